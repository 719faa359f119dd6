//! Run-time shapes of a request: which of an operator's run-time dims a launcher leaves free, the shape the
//! kernels are built for (MXFP4 for every scale byte), bucketed requests (one kernel per bucket of a dim) and
//! varlen KDA requests (the batch-dependent knob choices fixed once).

use crate::builder::{BuildError, ResolvedRequest, Variant, VarlenRecord, dims_text, signature};
use crate::lookup::{self, KnobSource};
use k3k_ir::{Kernel, Knobs, stable_hash};
use k3k_ops::op::{Operator, Preset};
use std::path::Path;

/// One GPU's variant of a bucketed request: per bucket value, the knobs the results give that shape (the
/// tuner's rule) and the one kernel the operator builds there; every bucket's kernel takes the same arguments.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bucket_variant(
    op: &dyn Operator,
    p: &Preset,
    build_p: &Preset,
    dim: &str,
    values: &[i64],
    g: &str,
    results: &Path,
    nvrtc: Option<&str>,
    warnings: &mut Vec<String>,
    forced: &dyn Fn(Knobs) -> Knobs,
    module: &str,
) -> Result<(Variant, Vec<ResolvedRequest>), BuildError> {
    let inconsistent = |why: String| BuildError::Inconsistent { request: module.into(), why };
    let mut kernels: Vec<Kernel> = vec![];
    let mut texts = vec![];
    let mut reports = vec![];
    for &b in values {
        let (mut pb, mut bb) = (p.clone(), build_p.clone());
        pb.dims.insert(dim.into(), b);
        bb.dims.insert(dim.into(), b);
        pb.name = dims_text(&pb.dims);
        let (tuned, source) = lookup::resolve(op, &pb, g, results, nvrtc, warnings);
        let knobs = forced(tuned);
        let mut seen = std::collections::HashSet::new();
        let built: Vec<Kernel> = op
            .kernels(&bb, &knobs)
            .map_err(|e| BuildError::Op { request: module.into(), gpu: g.into(), err: Box::new(e) })?
            .into_iter()
            .filter(|k| seen.insert(stable_hash(k)))
            .collect();
        if built.len() != 1 {
            return Err(inconsistent(format!(
                "at {dim} = {b} the operator runs {} kernels ({}); a bucket takes a one-kernel path: end the buckets \
                 below {b}",
                built.len(),
                built.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        if let Some(k0) = kernels.first()
            && signature(k0) != signature(&built[0])
        {
            return Err(inconsistent(format!(
                "the kernel at {dim} = {b} takes other arguments than the one at {dim} = {}",
                values[0]
            )));
        }
        if let KnobSource::Default { why } = &source {
            warnings.push(format!("{} [{}] on {g}: {why}; using the default knobs {knobs}", op.name(), pb.name));
        }
        texts.push(format!("{dim} <= {b}: {source}"));
        reports.push(ResolvedRequest {
            module: module.into(),
            op: op.name().into(),
            shape: pb.name.clone(),
            gpu: g.into(),
            knobs,
            source,
            kernels: vec![built[0].name.clone()],
        });
        kernels.extend(built);
    }
    let variant = Variant {
        gpu: g.into(),
        knobs: reports[0].knobs.clone(),
        source: texts.join("; "),
        kernels,
        plan: None,
        varlen: None,
    };
    Ok((variant, reports))
}

/// The knobs of a varlen KDA request: the automatic choices made for the representative batch, then fixed.
pub(crate) fn varlen_knobs(p: &Preset, knobs: &Knobs) -> Result<Knobs, k3k_ops::OpError> {
    let pb = k3k_ops::kda::KdaProblem::from_preset(p)?;
    k3k_ops::kda::varlen::fixed_knobs(knobs, &pb)
}

/// The kernels of a varlen KDA request (intra, state from zeros, state from `h0`) and what the run-time half
/// needs, after checking that other batches (one token; the most tokens; ragged sequences) get the very same
/// kernels. `Err(Ok(..))`: the operator refused; `Err(Err(why))`: the kernels depend on the batch.
#[allow(clippy::type_complexity)]
pub(crate) fn varlen_kernels(
    op: &dyn Operator,
    p: &Preset,
    knobs: &Knobs,
    max_tokens: usize,
    max_seqs: usize,
) -> Result<(Vec<Kernel>, VarlenRecord), Result<k3k_ops::OpError, String>> {
    let with = |p: &Preset, extra: &[(&str, i64)]| {
        let mut q = p.clone();
        for (k, v) in extra {
            q.dims.insert(k.to_string(), *v);
        }
        q
    };
    let pair = |q: &Preset| -> Result<Vec<Kernel>, k3k_ops::OpError> {
        let zero = op.kernels(&with(q, &[("h0", 0)]), knobs)?;
        let from = op.kernels(&with(q, &[("h0", 1)]), knobs)?;
        Ok(vec![zero[0].clone(), zero[1].clone(), from[0].clone(), from[1].clone()])
    };
    let ks = pair(p).map_err(Ok)?;
    if stable_hash(&ks[0]) != stable_hash(&ks[2]) {
        return Err(Err("the intra kernel differs with and without h0".into()));
    }
    let hashes = |v: &[Kernel]| v.iter().map(stable_hash).collect::<Vec<_>>();
    let unbatched = |q: &Preset| {
        let mut q = q.clone();
        for k in ["B", "T", "N"] {
            q.dims.remove(k);
        }
        q.dims.retain(|k, _| !(k.starts_with('L') && k[1..].parse::<u32>().is_ok()));
        q
    };
    let base = unbatched(p);
    let max_t = max_tokens as i64;
    for other in [
        with(&base, &[("B", 1), ("T", 1)]),
        with(&base, &[("B", 1), ("T", max_t)]),
        with(&base, &[("N", 3), ("L0", 1), ("L1", (max_t / 2).max(1)), ("L2", 37)]),
    ] {
        if pair(&other).map(|o| hashes(&o)).ok() != Some(hashes(&ks)) {
            return Err(Err(format!(
                "at knobs {knobs} the KDA kernels change with the batch ({:?}); fix the knob that depends on it",
                other.dims
            )));
        }
    }
    let pb = k3k_ops::kda::KdaProblem::from_preset(p).map_err(Ok)?;
    let l = k3k_ops::kda::Launch::resolve(knobs, &pb).map_err(Ok)?;
    let token_inputs = ks[0].tensors.iter().position(|t| t.name == "ctab").ok_or_else(|| Err("no ctab".to_string()))?;
    let rec = VarlenRecord {
        chunk: l.chunk as usize,
        hv: pb.hv,
        dk: pb.dk,
        dv: pb.dv,
        op_dt: l.op_dt,
        max_tokens,
        max_seqs,
        token_inputs,
        scalars: k3k_ops::kda::intra_scalars(&pb).into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
    };
    Ok((vec![ks[0].clone(), ks[1].clone(), ks[3].clone()], rec))
}

/// The MXFP4 operator, whose default kernels k3k-build builds for every scale byte.
pub(crate) const MXFP4_OP: &str = "mxfp4_matmul";

/// The dims a model changes from step to step, per operator: token counts, batch sizes, sequence lengths.
/// A request leaves one of them free (launchers take any value) when the operator builds the very same kernels
/// (same IR hash) at other values of it, so that the launcher is exactly the kernel the operator itself runs at
/// those shapes; otherwise it stays pinned to the request's value. `.pin(..)` pins one anyway. Every other
/// kernel dim named like a request dim is fixed at build time, as a model fixes it.
pub fn runtime_dims(op: &str) -> &'static [&'static str] {
    match op {
        "latent_moe_gemm" | MXFP4_OP => &["M"],
        "kda" => &["B", "T"],
        "kda.decode" => &["N"],
        "gated_mla.prefill" => &["T", "S"],
        "gated_mla.decode" => &["B", "S"],
        "gated_mla.gate" => &["T"],
        _ if op.starts_with("hist_quantile") => &["T"],
        _ => &[],
    }
}

/// The values a run-time dim is probed at: small counts, the neighbours of the request's value, and every power
/// of two (and its neighbours) up to 2^20 tokens (those within the operator's declared bounds).
fn probe_values(v: i64) -> Vec<i64> {
    let mut xs: Vec<i64> = vec![1, 2, 3, 5, 7, v - 1, v + 1, 2 * v + 3];
    for i in 1..=20 {
        let p = 1i64 << i;
        xs.extend([p - 1, p, p + 1, 3 * p / 2]);
    }
    xs.retain(|&x| x >= 1 && x != v);
    xs.sort_unstable();
    xs.dedup();
    xs
}

/// The run-time dims of a request that are free: building the operator at other values of the dim (see
/// [`probe_values`]) gives the same kernels.
pub(crate) fn free_runtime_dims(op: &dyn Operator, p: &Preset, knobs: &Knobs, kernels: &[Kernel]) -> Vec<String> {
    let hashes = |ks: Vec<Kernel>| -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        ks.iter().map(stable_hash).filter(|h| seen.insert(h.clone())).collect()
    };
    let Ok(base) = op.kernels(p, knobs).map(hashes) else { return vec![] };
    if base.iter().zip(kernels).any(|(h, k)| *h != stable_hash(k)) {
        return vec![];
    }
    runtime_dims(op.name())
        .iter()
        .filter(|d| {
            let Some(&v) = p.dims.get(**d) else { return false };
            probe_values(v).into_iter().all(|x| {
                let mut q = p.clone();
                q.dims.insert(d.to_string(), x);
                // Values past the operator's bounds are no shapes it takes.
                op.check_dims(&q).is_err() || op.kernels(&q, knobs).map(hashes).is_ok_and(|h| h == base)
            })
        })
        .map(|d| d.to_string())
        .collect()
}

/// The shape the kernels of a request are built for. For `mxfp4_matmul`, `wide=1` (kernels right for every
/// E8M0 byte: two multiplies per decoded value, NaN blocks) unless the request assumes folded scales.
pub(crate) fn build_preset(op: &str, p: &Preset, folded_scales: bool) -> Preset {
    let mut b = p.clone();
    if op == MXFP4_OP {
        b.dims.insert("wide".into(), if folded_scales { 0 } else { 1 });
    }
    b
}
