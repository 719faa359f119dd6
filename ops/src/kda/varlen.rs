//! Chunked KDA for batches whose sequence lengths are only known at run time (`cu_seqlens`): the knobs with
//! every shape-dependent automatic choice made once, so that one pair of kernels serves every batch. (The
//! run-time half, chunk tables from `cu_seqlens` and the workspace, is `k3k_build::rt::KdaVarlen`.)

use super::{KdaProblem, Launch};
use crate::OpError;
use k3k_ir::Knobs;

/// `knobs` with every choice [`Launch::resolve`] makes from the shape (chunk size, warps, value block, stages)
/// fixed to what it makes for `pb`, and the one-part plan (`TSPLIT=1`, whose parts would depend on the chunk
/// count): the kernels built with these knobs are the same for every batch of the same heads, head dims and
/// options. `pb` is the representative batch the automatic choices are made for.
pub fn fixed_knobs(knobs: &Knobs, pb: &KdaProblem) -> Result<Knobs, OpError> {
    let l = Launch::resolve(knobs, pb)?;
    let mut k = knobs.clone();
    k.set("CHUNK", l.chunk);
    k.set("W1", l.w1);
    k.set("BV", l.bv);
    k.set("W2", l.w2);
    k.set("STAGES", l.stages);
    k.set("TSPLIT", 1u32);
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{Operator, Preset};

    #[test]
    fn fixed_knobs_build_the_same_kernels_for_every_batch() {
        let op = super::super::Kda;
        let dims = |extra: &[(&str, i64)]| {
            let mut p = Preset::new("t", &[("H", 2), ("K", 64), ("V", 64), ("safe", 1), ("gate", 1), ("l2norm", 1)]);
            p.dims.extend(extra.iter().map(|(k, v)| (k.to_string(), *v)));
            p
        };
        let rep = dims(&[("B", 8), ("T", 512)]);
        let k = fixed_knobs(&op.default_knobs(), &KdaProblem::from_preset(&rep).unwrap()).unwrap();
        assert_eq!(k.u32("TSPLIT").unwrap(), 1);
        let base: Vec<String> = op.kernels(&rep, &k).unwrap().iter().map(k3k_ir::stable_hash).collect();
        for other in [
            dims(&[("B", 1), ("T", 1)]),
            dims(&[("B", 1), ("T", 70000)]),
            dims(&[("N", 3), ("L0", 37), ("L1", 1), ("L2", 900)]),
        ] {
            let h: Vec<String> = op.kernels(&other, &k).unwrap().iter().map(k3k_ir::stable_hash).collect();
            assert_eq!(h, base, "{:?}", other.dims);
        }
    }
}
