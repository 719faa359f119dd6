//! The FP8 operands of `Stmt::MmaAsync` on the CPU backends: shared windows of u32 words, each word four E4M3
//! codes (byte j = element 4c + j of the row), expanded to the logical operand matrix of the product.

use k3k_ir::tensor::e4m3_to_f32;

/// The logical `(rows, cols, values)` of an E4M3 word window of `rows x words` (row-major), read as `[rows, 4
/// words]` codes, or transposed (`[4 words, rows]`, a B operand stored `[N, K]`). `word(i, j)` gives the word at
/// window row i, column j (as the backends store it: an integer value in an f64).
pub(crate) fn expand(
    rows: usize,
    words: usize,
    transpose: bool,
    word: impl Fn(usize, usize) -> f64,
) -> (usize, usize, Vec<f64>) {
    let k = 4 * words;
    let mut m = vec![0.0f64; rows * k];
    for i in 0..rows {
        for j in 0..words {
            let w = word(i, j) as i64 as u32;
            for b in 0..4 {
                let v = e4m3_to_f32((w >> (8 * b)) as u8) as f64;
                let c = 4 * j + b;
                if transpose {
                    m[c * rows + i] = v;
                } else {
                    m[i * k + c] = v;
                }
            }
        }
    }
    if transpose { (k, rows, m) } else { (rows, k, m) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_little_endian_codes() {
        // 0x38 = 1.0, 0x40 = 2.0, 0xB8 = -1.0, 0x30 = 0.5.
        let w = u32::from_le_bytes([0x38, 0x40, 0xB8, 0x30]) as f64;
        let (r, c, m) = expand(1, 1, false, |_, _| w);
        assert_eq!((r, c), (1, 4));
        assert_eq!(m, vec![1.0, 2.0, -1.0, 0.5]);
        let (r, c, m) = expand(2, 1, true, |i, _| if i == 0 { w } else { 0.0 });
        assert_eq!((r, c), (4, 2));
        assert_eq!(m, vec![1.0, 0.0, 2.0, 0.0, -1.0, 0.0, 0.5, 0.0]);
    }
}
