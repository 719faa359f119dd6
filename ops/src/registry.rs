//! All operators, by name.

use crate::op::Operator;

/// Every operator k3k knows, in a stable order.
pub fn all() -> Vec<Box<dyn Operator>> {
    vec![
        Box::new(crate::latent_moe_gemm::LatentMoeGemm),
        Box::new(crate::mx::matmul::Mxfp4Matmul),
        Box::new(crate::mx::quant::MxQuantize),
        Box::new(crate::mx::quant::MxDequantize),
        Box::new(crate::gated_mla::ops::GatedMlaPrefill),
        Box::new(crate::gated_mla::ops::GatedMlaDecode),
        Box::new(crate::gated_mla::ops::GatedMlaGate),
        Box::new(crate::hist_quantile::HistQuantileQb),
        Box::new(crate::hist_quantile::HistQuantileColumn),
        Box::new(crate::kda::Kda),
        Box::new(crate::kda::KdaDecode),
    ]
}

/// Operators selected by `sel`: an operator's exact name selects it alone (`kda`, not `kda.decode`); a family
/// prefix ending in `.` (`gated_mla.`), or a family name that is not itself an operator (`gated_mla`), selects
/// the operators of the family; `all` selects every operator.
pub fn select(sel: &str) -> Vec<Box<dyn Operator>> {
    let ops = all();
    if sel == "all" {
        return ops;
    }
    if ops.iter().any(|o| o.name() == sel) {
        return ops.into_iter().filter(|o| o.name() == sel).collect();
    }
    let family = sel.strip_suffix('.').unwrap_or(sel);
    if family.is_empty() {
        return vec![];
    }
    ops.into_iter().filter(|o| o.name().starts_with(&format!("{family}."))).collect()
}

/// The names of every operator.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|o| o.name()).collect()
}
