//! Offline MXFP4 weight re-layout for the `mxfp4_matmul` kernels.
//!
//! In the natural layout (SPEC 1) the eight values a thread needs from one row of a 32-wide block — the
//! `mma.m16n8k16` A-fragment columns `2l, 2l+1, 2l+8, 2l+9, 2l+16, 2l+17, 2l+24, 2l+25` for lane `l = lane % 4`
//! — sit in four different bytes, so the on-chip decoder reads four bytes per eight values. [`pack`] reorders
//! the 16 bytes of every block into four 32-bit words, word `l` holding exactly those eight values, and places
//! each pair of neighbouring columns where the decoder builds its bf16x2 register in two or three instructions
//! ([`k3k_ir::fp4`] defines the layout): one 32-bit load per eight values, and the four lanes of a quad read one
//! contiguous 16-byte chunk. Scales are unchanged. [`unpack`] is the inverse.
//!
//! The packed layout is versioned ([`LAYOUT_VERSION`], version 2 since 2026-12-04): pack at load time, or keep
//! the version beside stored packed weights and pack them again from the natural layout when it changes (the
//! kernels cannot detect words of another version; they would decode them to wrong values).

use super::BLOCK;
use crate::OpError;
use k3k_ir::fp4;
use rayon::prelude::*;

/// The packed layout's version ([`fp4::PACKED_LAYOUT_VERSION`]).
pub const LAYOUT_VERSION: u32 = fp4::PACKED_LAYOUT_VERSION;

/// Word index (0..4) and value index (0..8) of column `c` (0..32) of a block in the packed layout.
pub fn packed_slot(c: usize) -> (usize, usize) {
    fp4::slot(c, true)
}

fn check(rows: usize, k: usize, got: usize, what: &str, per_row: usize) -> Result<(), OpError> {
    super::check_k("mx.pack", "K", k)?;
    if got != rows * per_row {
        return Err(OpError::BadInput {
            op: "mx.pack",
            arg: what.into(),
            why: format!("expected {rows} rows x {per_row} = {} elements, got {got}", rows * per_row),
        });
    }
    Ok(())
}

/// Re-layout natural MXFP4 element bytes `q: [rows, k/2]` into `[rows, k/8]` u32 words (see the module docs).
pub fn pack(q: &[u8], rows: usize, k: usize) -> Result<Vec<u32>, OpError> {
    check(rows, k, q.len(), "q", k / 2)?;
    let mut out = vec![0u32; rows * k / 8];
    out.par_chunks_mut(4).zip(q.par_chunks(BLOCK / 2)).for_each(|(words, bytes)| {
        for c in 0..BLOCK {
            let nib = (bytes[c / 2] >> (4 * (c % 2))) & 0xf;
            let (w, p) = packed_slot(c);
            words[w] |= fp4::place(nib as u32, p, true);
        }
    });
    Ok(out)
}

/// The inverse of [`pack`]: `[rows, k/8]` words back to natural `[rows, k/2]` bytes.
pub fn unpack(words: &[u32], rows: usize, k: usize) -> Result<Vec<u8>, OpError> {
    check(rows, k, words.len(), "packed", k / 8)?;
    let mut out = vec![0u8; rows * k / 2];
    out.par_chunks_mut(BLOCK / 2).zip(words.par_chunks(4)).for_each(|(bytes, w)| {
        for c in 0..BLOCK {
            let (wi, p) = packed_slot(c);
            let nib = fp4::code(w[wi], p, true) as u8;
            bytes[c / 2] |= nib << (4 * (c % 2));
        }
    });
    Ok(out)
}

/// Little-endian bytes of packed words (how a `[rows, k/8]` u32 host tensor stores them).
pub fn words_to_bytes(w: &[u32]) -> Vec<u8> {
    w.par_iter().flat_map_iter(|v| v.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_a_permutation() {
        let mut seen = [false; 32];
        for c in 0..32 {
            let (w, p) = packed_slot(c);
            assert!(!seen[w * 8 + p]);
            seen[w * 8 + p] = true;
        }
        // Lane l's fragment columns land in word l, in order.
        for l in 0..4 {
            let cols = [2 * l, 2 * l + 1, 2 * l + 8, 2 * l + 9, 2 * l + 16, 2 * l + 17, 2 * l + 24, 2 * l + 25];
            for (i, c) in cols.into_iter().enumerate() {
                assert_eq!(packed_slot(c), (l, i));
            }
        }
    }
}
