//! Offline MXFP4 weight re-layout for the `mxfp4_matmul` kernels.
//!
//! In the natural layout (SEMANTICS.md section 1.3) the eight values a thread needs from one row of a 32-wide block — the
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
//!
//! Which layout to store: for decode (at most 8 tokens per expert) the tile-major form of the packed words
//! ([`tile`] / [`tile_scales`]) is the fastest measured (H200, 2026-12-05, one run: 28 experts x 4 tokens 0.104 ms
//! against 0.109 packed and cuBLAS bf16's 0.297). Prefill and the other paths read only the packed layout
//! (tile-major weights are refused there by name), so a node that serves both keeps the packed words, or both forms.

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

/// The tile-major decode layout (`WeightBytes::PackedTiles`, read by `mxfp4_matmul` PATH=gemv's shared-memory
/// ring only): packed words `[rows, k/8]` stored as `[rows/16, k/128, 16, 16 words]` and scales `[rows, k/32]` as
/// `[rows/16, k/128, 16, 4]` ([`fp4::tile_major`]): each 16-row block's 128-column quad is one contiguous 1 KB of
/// words and 64 bytes of scales, so a warp's copies of a quad read whole DRAM lines instead of 64 bytes from each
/// of 16 rows. Needs rows a multiple of 16 and K a multiple of 128 (typed errors otherwise).
pub fn tile(words: &[u32], rows: usize, k: usize) -> Result<Vec<u32>, OpError> {
    check_tiles(rows, k)?;
    check(rows, k, words.len(), "packed", k / 8)?;
    Ok(permute(words, k / 8, fp4::TILE_QUAD_WORDS, false))
}

/// The inverse of [`tile`].
pub fn untile(tiled: &[u32], rows: usize, k: usize) -> Result<Vec<u32>, OpError> {
    check_tiles(rows, k)?;
    check(rows, k, tiled.len(), "tiled", k / 8)?;
    Ok(permute(tiled, k / 8, fp4::TILE_QUAD_WORDS, true))
}

/// The scales of [`tile`]'s layout: `[rows, k/32]` bytes as `[rows/16, k/128, 16, 4]`.
pub fn tile_scales(s: &[u8], rows: usize, k: usize) -> Result<Vec<u8>, OpError> {
    check_tiles(rows, k)?;
    check(rows, k, s.len(), "scales", k / BLOCK)?;
    Ok(permute(s, k / BLOCK, fp4::TILE_QUAD_SCALES, false))
}

/// The inverse of [`tile_scales`].
pub fn untile_scales(s: &[u8], rows: usize, k: usize) -> Result<Vec<u8>, OpError> {
    check_tiles(rows, k)?;
    check(rows, k, s.len(), "tiled scales", k / BLOCK)?;
    Ok(permute(s, k / BLOCK, fp4::TILE_QUAD_SCALES, true))
}

fn check_tiles(rows: usize, k: usize) -> Result<(), OpError> {
    if !rows.is_multiple_of(fp4::TILE_ROWS) || !k.is_multiple_of(4 * BLOCK) {
        return Err(OpError::BadInput {
            op: "mx.pack",
            arg: "tiles".into(),
            why: format!("the tile-major layout needs rows a multiple of 16 and K a multiple of 128, got {rows} x {k}"),
        });
    }
    Ok(())
}

/// Row-major `[rows, row_len]` to tile-major (or back, `inverse`).
fn permute<T: Copy + Default + Send + Sync>(src: &[T], row_len: usize, unit: usize, inverse: bool) -> Vec<T> {
    let mut out = vec![T::default(); src.len()];
    let block = fp4::TILE_ROWS * row_len;
    out.par_chunks_mut(block).zip(src.par_chunks(block)).for_each(|(o, s)| {
        for i in 0..s.len() {
            let j = fp4::tile_major(i, row_len, unit);
            if inverse { o[i] = s[j] } else { o[j] = s[i] }
        }
    });
    out
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

    /// `untile(tile(w)) == w` for words and scales; a 16-row block's quad is contiguous; bad shapes are named.
    #[test]
    fn tile_round_trips_and_puts_a_quad_together() {
        let (rows, k) = (48, 384);
        let words: Vec<u32> = (0..rows * k / 8).map(|i| i as u32).collect();
        let t = tile(&words, rows, k).unwrap();
        assert_eq!(untile(&t, rows, k).unwrap(), words);
        // Block 1 (rows 16..32), quad 2 (words 32..48 of each row): 256 consecutive words, row by row.
        let at = (16 * k / 8) + 2 * 256;
        for r in 0..16 {
            for w in 0..16 {
                assert_eq!(t[at + 16 * r + w], ((16 + r) * k / 8 + 32 + w) as u32);
            }
        }
        let s: Vec<u8> = (0..rows * k / 32).map(|i| (i * 7) as u8).collect();
        let ts = tile_scales(&s, rows, k).unwrap();
        assert_eq!(untile_scales(&ts, rows, k).unwrap(), s);
        assert_eq!(&ts[..4], &s[..4]);
        assert_eq!(&ts[4..8], &s[k / 32..k / 32 + 4], "row 1's first quad follows row 0's");
        for (r, kk) in [(40, 384), (48, 352)] {
            let e = tile(&vec![0; r * kk / 8], r, kk).unwrap_err().to_string();
            assert!(e.contains("multiple of 16") && e.contains("128"), "{e}");
        }
    }
}
