//! The two MXFP4 block layouts the IR's fp4 statements read ([`crate::Stmt::DequantFp4`],
//! [`crate::Stmt::DequantFp4Stream`], [`crate::Stmt::Fp4Gemv`]): where the 4-bit E2M1 code of column `c`
//! (0..32) of a 32-column block sits in the block's four 32-bit words. The op builders, the CPU backends, the
//! offline re-layout (`mx::pack`) and the CUDA prelude's decoders all follow this one definition.
//!
//! - **Natural** (the bytes of SEMANTICS.md section 1.3 read as little-endian words): word `c / 8`, value index `c % 8` at bits
//!   `4 i .. 4 i + 3`.
//! - **Packed** (k3k's offline re-layout): word `l = (c % 8) / 2` holds the eight values a lane `l` of a lane
//!   quad needs for an `mma.m16n8k16` A fragment (columns `2l + 8f + h`, f = 0..3, h = 0..1): value index
//!   `i = 2f + h`. Pair `f` (two neighbouring columns: a bf16x2 register) has its codes where the decoder builds
//!   the register in few instructions. The decoder's target is the bf16 bit pattern of `e2m1(code) * 2^-126`
//!   in both halves: sign at bit 15, the two exponent bits at 8..7, the mantissa bit at 6 (exponent 0 gives the
//!   subnormal 0.5 * 2^-126 exactly), i.e. the mask [`PAIR_BITS`] = `0x81C0_81C0`. Pairs 0, 1 and 2 sit at
//!   rotations by 0, 3 and 6 bits of that mask (one funnel shift and one AND each; pair 0 only the AND), and
//!   pair 3 in bits 0, 1, 3, 4 of each half, placed by one multiply that adds three shifted copies without
//!   carries ([`PAIR3_SOURCE`], [`PAIR3_MUL`]) and the AND. No layout puts all four pairs at rotations of the
//!   mask: the set {6, 7, 8, 15} does not tile Z16 (nor any cyclic group: its generating polynomial has one
//!   cyclotomic factor of 2-power order where a tile of four elements needs two).

/// The version of the packed layout. It is k3k's own and changes when a faster decode needs other bit
/// positions: version 1 (until 2026-12-04) kept each pair's two codes as adjacent nibbles (value index `i` at
/// bits `4 i`); version 2 is the one described above. Packed words stored outside the process must be stored
/// with this number and packed again from the natural layout when it differs (the kernels cannot tell the
/// layouts apart: old words decode to wrong values, not to an error).
pub const PACKED_LAYOUT_VERSION: u32 = 2;

/// The bits of a decoded pair: a bf16x2 of `e2m1 * 2^-126` (sign 15, exponent 8..7, mantissa 6; the same in
/// the high half).
pub const PAIR_BITS: u32 = 0x81C0_81C0;
/// Packed pair 3's bits before its multiply: bits 0, 1, 3, 4 of each half.
pub const PAIR3_SOURCE: u32 = 0x001B_001B;
/// Packed pair 3's multiplier: copies shifted by 3 (mantissa 3 -> 6, exponent low 4 -> 7), by 8 (exponent high
/// 0 -> 8) and by 14 (sign 1 -> 15).
pub const PAIR3_MUL: u32 = (1 << 3) | (1 << 8) | (1 << 14);
/// Packed pairs 0..3: the rotation right that brings the pair onto [`PAIR_BITS`] (pair 3: none, see
/// [`PAIR3_MUL`]).
pub const PAIR_ROTATION: [u32; 3] = [0, 3, 6];

/// Bit positions (mantissa, exponent low, exponent high, sign) of the low-half code of each packed pair; the
/// high-half code's bits are these plus 16, modulo 32.
const PACKED_BITS: [[u32; 4]; 4] = [[6, 7, 8, 15], [9, 10, 11, 18], [12, 13, 14, 21], [3, 4, 0, 1]];

/// The word of the block (0..4) and the value index in it (0..8) of column `c` (0..32) of a block.
pub fn slot(c: usize, packed: bool) -> (usize, usize) {
    if packed { ((c % 8) / 2, 2 * ((c / 8) % 4) + c % 2) } else { (c / 8, c % 8) }
}

fn packed_positions(index: usize) -> [u32; 4] {
    PACKED_BITS[index / 2].map(|b| (b + 16 * (index as u32 % 2)) % 32)
}

/// The E2M1 code (0..16) of value `index` (0..8) of a word.
pub fn code(word: u32, index: usize, packed: bool) -> u32 {
    if packed {
        packed_positions(index).iter().enumerate().map(|(role, &b)| ((word >> b) & 1) << role).sum()
    } else {
        (word >> (4 * index)) & 15
    }
}

/// Rows per tile of the tile-major layouts ([`tile_major`]).
pub const TILE_ROWS: usize = 16;
/// Words (of the packed layout) per row of one tile-major chunk: a 128-column quad, four 32-column blocks.
pub const TILE_QUAD_WORDS: usize = 16;
/// Scale bytes per row of one tile-major chunk (the quad's four blocks).
pub const TILE_QUAD_SCALES: usize = 4;

/// The tile-major layouts of the MXFP4 decode (`PackedTiles` weights, `Stmt::Fp4Gemv` `tiled`): a row-major
/// `[R, row_len]` matrix (R a multiple of [`TILE_ROWS`], `row_len` a multiple of `unit`) stored as
/// `[R / 16, row_len / unit, 16, unit]`, so that the `unit` elements of 16 consecutive rows at the same columns
/// (one 16-row block's quad: 16 x 64 bytes of words with `unit` = [`TILE_QUAD_WORDS`], 16 x 4 scale bytes with
/// `unit` = [`TILE_QUAD_SCALES`]) are contiguous. Maps the row-major flat index `i` to the stored one.
pub fn tile_major(i: usize, row_len: usize, unit: usize) -> usize {
    let (r, c) = (i / row_len, i % row_len);
    (r - r % TILE_ROWS) * row_len + (c / unit) * (TILE_ROWS * unit) + (r % TILE_ROWS) * unit + c % unit
}

/// The bits a code (0..16) sets as value `index` of a word (OR them into the word; the inverse of [`code`]).
pub fn place(code: u32, index: usize, packed: bool) -> u32 {
    if packed {
        packed_positions(index).iter().enumerate().map(|(role, &b)| ((code >> role) & 1) << b).sum()
    } else {
        (code & 15) << (4 * index)
    }
}

/// What the GPU decoders compute for pair `f` (0..4) of a packed word: the [`PAIR_BITS`] pattern of its two
/// values (low half: column `2l + 8f`, high half: `+ 1`).
pub fn packed_pair_bits(word: u32, f: usize) -> u32 {
    if f == 3 {
        ((word & PAIR3_SOURCE).wrapping_mul(PAIR3_MUL)) & PAIR_BITS
    } else {
        word.rotate_right(PAIR_ROTATION[f]) & PAIR_BITS
    }
}

/// The [`PAIR_BITS`] pattern of one code (0..16) in the low half: what the decoders make of it.
pub fn code_bits(code: u32) -> u32 {
    ((code & 8) << 12) | ((code & 7) << 6)
}

/// The inverse of [`code_bits`]: the code (0..16) a low half's [`PAIR_BITS`] pattern carries (other bits ignored).
pub fn bits_code(bits: u32) -> u32 {
    ((bits >> 6) & 7) | ((bits >> 12) & 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_place_every_column_once() {
        for packed in [false, true] {
            let mut bits = [0u32; 4];
            for c in 0..32 {
                let (w, i) = slot(c, packed);
                let p = place(15, i, packed);
                assert_eq!(p.count_ones(), 4, "column {c}");
                assert_eq!(bits[w] & p, 0, "column {c} overlaps (packed {packed})");
                bits[w] |= p;
            }
            assert_eq!(bits, [u32::MAX; 4]);
        }
    }

    #[test]
    fn a_lanes_fragment_columns_share_its_word_in_order() {
        for l in 0..4 {
            let cols = [2 * l, 2 * l + 1, 2 * l + 8, 2 * l + 9, 2 * l + 16, 2 * l + 17, 2 * l + 24, 2 * l + 25];
            for (i, c) in cols.into_iter().enumerate() {
                assert_eq!(slot(c, true), (l, i));
            }
        }
    }

    /// The tile-major index is a permutation of each group of 16 rows, and a 16-row block's quad is contiguous.
    #[test]
    fn tile_major_permutes_16_row_blocks_and_keeps_a_quad_contiguous() {
        for (rows, row_len, unit) in [(16, 16, 16), (48, 448, 16), (32, 112, 4), (16, 4, 4)] {
            let mut seen = vec![false; rows * row_len];
            for i in 0..rows * row_len {
                let j = tile_major(i, row_len, unit);
                assert!(j / (16 * row_len) == i / (16 * row_len), "stays in its 16-row block");
                assert!(!seen[j], "{i} -> {j} twice");
                seen[j] = true;
            }
            // Rows 16..32 (the second block when there is one), chunk 1: 16 x unit contiguous elements.
            if rows >= 32 && row_len >= 2 * unit {
                let first = tile_major(16 * row_len + unit, row_len, unit);
                for r in 0..16 {
                    for c in 0..unit {
                        assert_eq!(tile_major((16 + r) * row_len + unit + c, row_len, unit), first + r * unit + c);
                    }
                }
            }
        }
    }

    #[test]
    fn code_reads_back_what_place_wrote() {
        let mut x = 0x9E37_79B9u32;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            for packed in [false, true] {
                let codes: Vec<u32> = (0..8).map(|i| (x >> (4 * i)) & 15).collect();
                let word = codes.iter().enumerate().map(|(i, &c)| place(c, i, packed)).fold(0, |a, b| a | b);
                for (i, &c) in codes.iter().enumerate() {
                    assert_eq!(code(word, i, packed), c);
                }
            }
        }
    }

    /// The decoders' rotations and multiply give every pair's two codes exactly, whatever the other six codes
    /// of the word are (every pair of codes, each with three different surroundings).
    #[test]
    fn the_pair_decode_is_exact_for_every_pair_of_codes() {
        for f in 0..4 {
            for lo in 0..16u32 {
                for hi in 0..16u32 {
                    for fill in [0u32, 15, 0xA5C3_96E1] {
                        let mut word = place(lo, 2 * f, true) | place(hi, 2 * f + 1, true);
                        for i in (0..8).filter(|&i| i / 2 != f) {
                            word |= place((fill >> (4 * i)) & 15, i, true);
                        }
                        let want = code_bits(lo) | (code_bits(hi) << 16);
                        let got = packed_pair_bits(word, f);
                        assert_eq!(got, want, "pair {f} codes {lo} {hi} fill {fill:#x}");
                        assert_eq!((bits_code(got & 0xFFFF), bits_code(got >> 16)), (lo, hi));
                    }
                }
            }
        }
    }
}
