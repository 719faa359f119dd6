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

/// Operators whose name equals `sel` or starts with `sel.` (so `gated_mla` selects `gated_mla.prefill` and
/// `gated_mla.decode`); `all` selects every operator.
pub fn select(sel: &str) -> Vec<Box<dyn Operator>> {
    all().into_iter().filter(|o| sel == "all" || o.name() == sel || o.name().starts_with(&format!("{sel}."))).collect()
}

/// The names of every operator.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|o| o.name()).collect()
}
