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

/// Blocks per parallel work item of [`pack`] / [`unpack`] (64 KB of packed words).
const BLOCKS_PER_ITEM: usize = 4096;

/// For pair `f` (0..4): the packed bits of a natural byte. In a natural block, byte `j` holds columns `2j` (low
/// nibble) and `2j + 1`, which are pair `f = j / 4` of packed word `l = j % 4` (columns `2l + 8f + h`): one
/// lookup per byte.
fn pair_table() -> &'static [[u32; 256]; 4] {
    static TABLE: std::sync::OnceLock<[[u32; 256]; 4]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [[0u32; 256]; 4];
        for (f, row) in t.iter_mut().enumerate() {
            for (byte, bits) in row.iter_mut().enumerate() {
                let (lo, hi) = (byte as u32 & 15, byte as u32 >> 4);
                *bits = fp4::place(lo, 2 * f, true) | fp4::place(hi, 2 * f + 1, true);
            }
        }
        t
    })
}

/// Re-layout natural MXFP4 element bytes `q: [rows, k/2]` into `[rows, k/8]` u32 words (see the module docs).
pub fn pack(q: &[u8], rows: usize, k: usize) -> Result<Vec<u32>, OpError> {
    check(rows, k, q.len(), "q", k / 2)?;
    let t = pair_table();
    let mut out = vec![0u32; rows * k / 8];
    let (wi, bi) = (4 * BLOCKS_PER_ITEM, BLOCK / 2 * BLOCKS_PER_ITEM);
    out.par_chunks_mut(wi).zip(q.par_chunks(bi)).for_each(|(words, bytes)| {
        for (w, b) in words.chunks_exact_mut(4).zip(bytes.chunks_exact(BLOCK / 2)) {
            for (l, word) in w.iter_mut().enumerate() {
                *word = (0..4).fold(0, |acc, f| acc | t[f][b[l + 4 * f] as usize]);
            }
        }
    });
    Ok(out)
}

/// The inverse of [`pack`]: `[rows, k/8]` words back to natural `[rows, k/2]` bytes (each pair through the
/// decoders' own [`fp4::packed_pair_bits`], whose halves carry the two codes' bits in place).
pub fn unpack(words: &[u32], rows: usize, k: usize) -> Result<Vec<u8>, OpError> {
    check(rows, k, words.len(), "packed", k / 8)?;
    let mut out = vec![0u8; rows * k / 2];
    let (wi, bi) = (4 * BLOCKS_PER_ITEM, BLOCK / 2 * BLOCKS_PER_ITEM);
    out.par_chunks_mut(bi).zip(words.par_chunks(wi)).for_each(|(bytes, words)| {
        for (b, w) in bytes.chunks_exact_mut(BLOCK / 2).zip(words.chunks_exact(4)) {
            for (j, byte) in b.iter_mut().enumerate() {
                let pair = fp4::packed_pair_bits(w[j % 4], j / 4);
                *byte = (fp4::bits_code(pair & 0xFFFF) | fp4::bits_code(pair >> 16) << 4) as u8;
            }
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

    /// The table-driven pack puts every column's code where `k3k_ir::fp4` says (per column, from its definition),
    /// and unpack inverts it, over random bytes and every byte value; blocks straddle the parallel work items.
    #[test]
    fn pack_follows_the_layout_definition_and_unpack_inverts_it() {
        let (rows, k) = (3, 32 * (BLOCKS_PER_ITEM + 7));
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let q: Vec<u8> = (0..rows * k / 2)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i < 256 { i as u8 } else { x as u8 }
            })
            .collect();
        let words = pack(&q, rows, k).unwrap();
        for (blk, (w, b)) in words.chunks_exact(4).zip(q.chunks_exact(BLOCK / 2)).enumerate() {
            for c in 0..BLOCK {
                let (wi, p) = packed_slot(c);
                let want = (b[c / 2] >> (4 * (c % 2))) & 15;
                assert_eq!(fp4::code(w[wi], p, true), want as u32, "block {blk} column {c}");
            }
        }
        assert_eq!(unpack(&words, rows, k).unwrap(), q);
        assert!(matches!(pack(&q, rows, k + 32), Err(OpError::BadInput { .. })));
        assert!(pack(&q, rows, k + 16).is_err(), "K not a multiple of 32");
    }
}
