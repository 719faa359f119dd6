//! Chunked KDA for batches whose sequence lengths are only known at run time (`cu_seqlens`): the knobs with
//! every shape-dependent automatic choice made once, so that one pair of kernels serves every batch, and the
//! layout of the workspace the chunk tables and the intra-chunk scratch live in.
//!
//! A batch of N sequences (lengths from `cu_seqlens`, N + 1 row offsets) is cut into chunks of `chunk` tokens
//! that never cross a sequence; the chunk table `ctab: [nch, 2]` holds each chunk's first row and length, the
//! sequence table `stab: [N, 2]` each sequence's first chunk and chunk count (as [`KdaProblem::chunk_tables`]).
//! The intra kernel reads the tokens and the chunk table and writes five scratch tensors per chunk; the state
//! pass reads them with both tables and writes `o` and the final states `ht`.

use super::{KdaProblem, Launch};
use crate::OpError;
use k3k_ir::{DType, Knobs};

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

/// Where each table and scratch tensor of a batch lives in the workspace: byte offsets, each 256-byte aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub ctab: usize,
    pub stab: usize,
    pub wu: usize,
    pub qbar: usize,
    pub kbar: usize,
    pub p: usize,
    pub gamma: usize,
    /// Bytes in all.
    pub bytes: usize,
}

/// The shapes of a batch's scratch tensors: `wu`, `qbar`, `kbar`, `p` in the operand dtype, `gamma` in f32.
pub fn scratch_shapes(hv: usize, nch: usize, chunk: usize, dk: usize, dv: usize) -> [[usize; 4]; 4] {
    [[hv, nch, chunk, dk + dv], [hv, nch, chunk, dk], [hv, nch, chunk, dk], [hv, nch, chunk, chunk]]
}

/// The workspace layout of a batch of `nch` chunks over `n` sequences.
pub fn layout(hv: usize, nch: usize, n: usize, chunk: usize, dk: usize, dv: usize, op_dt: DType) -> Layout {
    let align = |x: usize| x.div_ceil(256) * 256;
    let mut at = 0usize;
    let mut take = |bytes: usize| {
        let o = at;
        at = align(at + bytes);
        o
    };
    let ctab = take(nch * 2 * 4);
    let stab = take(n * 2 * 4);
    let [wu, qb, kb, pm] = scratch_shapes(hv, nch, chunk, dk, dv);
    let el = |s: [usize; 4]| op_dt.storage_bytes(s.iter().product());
    let (wu, qbar, kbar, p) = (take(el(wu)), take(el(qb)), take(el(kb)), take(el(pm)));
    let gamma = take(hv * nch * dk * 4);
    Layout { ctab, stab, wu, qbar, kbar, p, gamma, bytes: at }
}

/// The most chunks a batch of at most `max_tokens` tokens in at most `max_seqs` sequences has.
pub fn max_chunks(max_tokens: usize, max_seqs: usize, chunk: usize) -> usize {
    max_tokens / chunk + max_seqs
}

/// Fill `ctab` then `stab` (as `[row0, len]*` and `[first, count]*`, i32) into `out` from the row offsets
/// `cu_seqlens` (`[0, l0, l0 + l1, ...]`); returns (chunks, sequences). Refuses offsets that do not start at 0
/// or decrease, naming the entry. `out` is cleared first and grows only past its capacity.
pub fn chunk_tables(cu_seqlens: &[i32], chunk: usize, out: &mut Vec<i32>) -> Result<(usize, usize), OpError> {
    let bad = |why: String| OpError::BadInput { op: "kda", arg: "cu_seqlens".into(), why };
    if cu_seqlens.first() != Some(&0) {
        return Err(bad(format!("must start with 0 (N + 1 row offsets), got {:?}", cu_seqlens.first())));
    }
    if chunk == 0 {
        return Err(bad("chunk size 0".into()));
    }
    out.clear();
    let n = cu_seqlens.len() - 1;
    for (i, w) in cu_seqlens.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(bad(format!(
                "entry {} ({}) is below entry {i} ({}): offsets never decrease",
                i + 1,
                w[1],
                w[0]
            )));
        }
        let mut r = w[0];
        while r < w[1] {
            let len = (chunk as i32).min(w[1] - r);
            out.extend([r, len]);
            r += len;
        }
    }
    let nch = out.len() / 2;
    // The sequence table after the chunk table.
    let mut first = 0i32;
    for w in cu_seqlens.windows(2) {
        let count = ((w[1] - w[0]) as usize).div_ceil(chunk) as i32;
        out.extend([first, count]);
        first += count;
    }
    Ok((nch, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Preset;

    #[test]
    fn tables_match_the_problems_own() {
        for lens in [vec![1usize], vec![37, 1, 130, 64], vec![32, 32, 0, 5], vec![300], vec![0, 0]] {
            let mut dims: Vec<(String, i64)> = vec![("N".into(), lens.len() as i64), ("H".into(), 1), ("K".into(), 32)];
            dims.extend(lens.iter().enumerate().map(|(i, &l)| (format!("L{i}"), l as i64)));
            let p = Preset { name: "t".into(), dims: dims.into_iter().collect() };
            let pb = KdaProblem::from_preset(&p).unwrap();
            let cu: Vec<i32> = std::iter::once(0)
                .chain(lens.iter().scan(0i32, |s, &l| {
                    *s += l as i32;
                    Some(*s)
                }))
                .collect();
            for chunk in [32usize, 64] {
                let (ctab, stab) = pb.chunk_tables(chunk);
                let mut out = vec![];
                let (nch, n) = chunk_tables(&cu, chunk, &mut out).unwrap();
                assert_eq!((nch, n), (ctab.len() / 2, lens.len()), "{lens:?}");
                let want: Vec<i32> = ctab.iter().chain(&stab).map(|&x| x as i32).collect();
                assert_eq!(out, want, "{lens:?} chunk {chunk}");
                assert!(nch <= max_chunks(lens.iter().sum(), lens.len(), chunk));
            }
        }
        let mut out = vec![];
        assert!(chunk_tables(&[1, 4], 32, &mut out).unwrap_err().to_string().contains("start with 0"));
        assert!(chunk_tables(&[0, 8, 4], 32, &mut out).unwrap_err().to_string().contains("entry 2 (4)"));
    }

    #[test]
    fn layout_is_aligned_and_disjoint() {
        let l = layout(2, 9, 3, 32, 128, 128, DType::F16);
        let offs = [l.ctab, l.stab, l.wu, l.qbar, l.kbar, l.p, l.gamma];
        assert!(offs.iter().all(|o| o % 256 == 0));
        assert!(offs.windows(2).all(|w| w[0] < w[1]));
        // wu: [HV=2, nch=9, 32, K+V=256] f16.
        assert_eq!(l.qbar - l.wu, 2 * 9 * 32 * 256 * 2);
        assert!(l.bytes >= l.gamma + 2 * 9 * 128 * 4);
    }
}
