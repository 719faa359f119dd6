//! The block-level tile statements: maps, reductions, products, loads and stores, scans (the MXFP4 statements
//! are in `mx`, the copies in `tma`).

use super::eval::At;
use super::memory::round_to;
use super::{Block, InterpError};
use k3k_ir::*;

impl<'a> Block<'a> {
    /// Execute one tile or vector statement (the MXFP4 ones go to `mx_stmt`).
    pub(super) fn tile_stmt(&mut self, s: &Stmt, tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        let k = self.k;
        match s {
            Stmt::Map { tile, value } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let mut out = vec![0.0f64; rows * cols];
                for r in 0..rows {
                    for c in 0..cols {
                        let v = self.eval(value, Some(At { r, c, tile_cols: cols }), tensors)?;
                        out[r * cols + c] = tile_value(d.dtype, v.i(), v.f());
                    }
                }
                self.tiles[tile.0 as usize] = out;
            }
            Stmt::VecMap { vec, value } => {
                let rows = k.vecs[vec.0 as usize].rows as usize;
                let mut out = vec![0.0f32; rows];
                for (r, o) in out.iter_mut().enumerate() {
                    *o = self.eval(value, Some(At { r, c: 0, tile_cols: 0 }), tensors)?.f();
                }
                self.vecs[vec.0 as usize] = out;
            }
            Stmt::Reduce { vec, tile, op, accumulate } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                for r in 0..rows {
                    let row = &self.tiles[tile.0 as usize][r * cols..(r + 1) * cols];
                    let mut a = row[0] as f32;
                    for &v in &row[1..] {
                        a = reduce(*op, a, v as f32);
                    }
                    let slot = &mut self.vecs[vec.0 as usize][r];
                    *slot = if *accumulate { reduce(*op, *slot, a) } else { a };
                }
            }
            Stmt::Mma { acc, a, b } => self.mma(*acc, a, b, tensors)?,
            Stmt::MmaAsync { acc, a, b, accumulate } => {
                if !self.eval(accumulate, None, tensors)?.b() {
                    self.tiles[acc.0 as usize].fill(0.0);
                }
                self.mma(*acc, a, b, tensors)?
            }
            Stmt::Load { tile, src } => {
                let d = &k.tiles[tile.0 as usize];
                let out = match src {
                    Place::Shared(r) => {
                        let base = self.shared_base(r, tensors)?;
                        load_values(d, |i, j| Ok(Some(self.shared_at(r, base, i, j))))?
                    }
                    Place::Global(v) => {
                        let view = self.view(v, tensors)?;
                        let int = d.dtype == DType::I32;
                        load_values(d, |i, j| {
                            view_element(view, i, j)
                                .map(|at| self.global_read("tile load", v.tensor, at, int, tensors))
                                .transpose()
                        })?
                    }
                };
                self.tiles[tile.0 as usize] = out;
            }
            Stmt::Store { tile, dst } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                match dst {
                    Place::Shared(r) => {
                        let base = self.shared_base(r, tensors)?;
                        let sd = &k.shared[r.buf.0 as usize];
                        self.claim(r.buf);
                        for i in 0..rows {
                            for j in 0..cols {
                                let v = self.tiles[tile.0 as usize][i * cols + j];
                                let at = base + (r.row0 as usize + i) * sd.cols as usize + r.col0 as usize + j;
                                self.shared[r.buf.0 as usize].set_f64(sd.dtype, at, v);
                            }
                        }
                    }
                    Place::Global(v) => {
                        let (off, stride, vr, vc) = self.view(v, tensors)?;
                        for i in 0..rows.min(vr.max(0) as usize) {
                            for j in 0..cols.min(vc.max(0) as usize) {
                                let idx = self.global_index(
                                    "tile store",
                                    v.tensor,
                                    off + i as i64 * stride + j as i64,
                                    tensors,
                                )?;
                                let val = self.tiles[tile.0 as usize][i * cols + j];
                                let t = &mut tensors[v.tensor.0 as usize];
                                if d.dtype == DType::I32 {
                                    t.set_i64(idx, val as i64);
                                } else {
                                    t.set_f32(idx, val as f32);
                                }
                            }
                        }
                    }
                }
            }
            Stmt::StoreCols { tile, col0, dst: r } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let base = self.shared_base(r, tensors)?;
                let sd = &k.shared[r.buf.0 as usize];
                self.claim(r.buf);
                for i in 0..rows {
                    for j in 0..r.cols as usize {
                        let v = self.tiles[tile.0 as usize][i * cols + *col0 as usize + j];
                        let at = base + (r.row0 as usize + i) * sd.cols as usize + r.col0 as usize + j;
                        self.shared[r.buf.0 as usize].set_f64(sd.dtype, at, v);
                    }
                }
            }
            Stmt::LoadVec { vec, src } => {
                let (off, stride, vr) =
                    (self.int(&src.offset, tensors)?, self.int(&src.stride, tensors)?, self.int(&src.rows, tensors)?);
                let rows = k.vecs[vec.0 as usize].rows as usize;
                for r in 0..rows {
                    self.vecs[vec.0 as usize][r] = if (r as i64) < vr {
                        let i = self.global_index("vector load", src.tensor, off + r as i64 * stride, tensors)?;
                        tensors[src.tensor.0 as usize].get_f32(i)
                    } else {
                        0.0
                    };
                }
            }
            Stmt::StoreVec { vec, dst } => {
                let (off, stride, vr) =
                    (self.int(&dst.offset, tensors)?, self.int(&dst.stride, tensors)?, self.int(&dst.rows, tensors)?);
                let rows = k.vecs[vec.0 as usize].rows as usize;
                for r in 0..rows.min(vr.max(0) as usize) {
                    let i = self.global_index("vector store", dst.tensor, off + r as i64 * stride, tensors)?;
                    let v = self.vecs[vec.0 as usize][r];
                    tensors[dst.tensor.0 as usize].set_f32(i, v);
                }
            }
            Stmt::Scan { tile, scratch, op: ScanOp::Sum } => {
                let d = &k.tiles[tile.0 as usize];
                let sd = &k.shared[scratch.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let t = &mut self.tiles[tile.0 as usize];
                for c in 0..cols {
                    let mut s = t[c] as f32;
                    for r in 1..rows {
                        s += t[r * cols + c] as f32;
                        t[r * cols + c] = s as f64;
                    }
                }
                // The scratch keeps the scanned tile, as on the GPU.
                self.claim(*scratch);
                for r in 0..rows {
                    for c in 0..cols {
                        let v = self.tiles[tile.0 as usize][r * cols + c];
                        self.shared[scratch.0 as usize].set_f64(sd.dtype, r * sd.cols as usize + c, v);
                    }
                }
            }
            _ => unreachable!("not a tile statement"),
        }
        Ok(())
    }

    /// Offset, row stride, valid rows and valid cols of a global view.
    /// The view's alignment promise is checked here: offset and (for more than one row) the row stride of a
    /// non-empty view must be multiples of `vec`, which the GPU code relies on for its wide accesses.
    pub(super) fn view(&self, v: &GlobalView, tensors: &[HostTensor]) -> Result<(i64, i64, i64, i64), InterpError> {
        let (off, stride, rows, cols) = (
            self.int(&v.offset, tensors)?,
            self.int(&v.row_stride, tensors)?,
            self.int(&v.rows, tensors)?,
            self.int(&v.cols, tensors)?,
        );
        let vec = v.vec as i64;
        let bad = if rows <= 0 || cols <= 0 {
            None
        } else if off % vec != 0 {
            Some(("offset", off))
        } else if rows > 1 && stride % vec != 0 {
            Some(("row stride", stride))
        } else {
            None
        };
        if let Some((what, value)) = bad {
            return Err(InterpError::ViewAlignment {
                kernel: self.k.name.clone(),
                block: self.block,
                tensor: self.k.tensors[v.tensor.0 as usize].name.clone(),
                what,
                value,
                vec: v.vec,
            });
        }
        Ok((off, stride, rows, cols))
    }

    pub(super) fn shared_base(&self, r: &SharedRef, tensors: &[HostTensor]) -> Result<usize, InterpError> {
        let d = &self.k.shared[r.buf.0 as usize];
        let i = self.int(&r.index, tensors)?;
        if i < 0 || i >= d.count as i64 {
            return Err(InterpError::SharedIndex {
                kernel: self.k.name.clone(),
                block: self.block,
                buf: d.name.clone(),
                index: i,
                count: d.count,
            });
        }
        Ok(i as usize * (d.rows * d.cols) as usize)
    }

    /// Read logical element (r, c) of a shared window.
    pub(super) fn shared_at(&self, r: &SharedRef, base: usize, row: usize, col: usize) -> f64 {
        let d = &self.k.shared[r.buf.0 as usize];
        self.shared[r.buf.0 as usize].get_f64(base + (r.row0 as usize + row) * d.cols as usize + r.col0 as usize + col)
    }

    /// Logical element (i, j) of an operand (after its transpose).
    fn operand(&self, o: &Operand, tensors: &[HostTensor]) -> Result<(usize, usize, Vec<f64>), InterpError> {
        Ok(match o {
            Operand::Reg(t) => {
                let d = &self.k.tiles[t.0 as usize];
                (d.rows as usize, d.cols as usize, self.tiles[t.0 as usize].clone())
            }
            Operand::Banded { .. } => unreachable!("validated: banded operands are read per band by mma"),
            Operand::Shared { src, transpose } => {
                let base = self.shared_base(src, tensors)?;
                let (wr, wc) = (src.rows as usize, src.cols as usize);
                if self.k.shared[src.buf.0 as usize].dtype == DType::U32 {
                    // E4M3 codes four to a word (the FP8 `mma_async`, validated).
                    return Ok(crate::cpu::e4m3_words::expand(wr, wc, *transpose, |i, j| {
                        self.shared_at(src, base, i, j)
                    }));
                }
                let (r, c) = if *transpose { (wc, wr) } else { (wr, wc) };
                let mut m = vec![0.0; r * c];
                for i in 0..r {
                    for j in 0..c {
                        m[i * c + j] =
                            if *transpose { self.shared_at(src, base, j, i) } else { self.shared_at(src, base, i, j) };
                    }
                }
                (r, c, m)
            }
        })
    }

    fn mma(&mut self, acc: TileId, a: &Operand, b: &Operand, tensors: &[HostTensor]) -> Result<(), InterpError> {
        let (m, kd, av) = self.operand(a, tensors)?;
        // One B matrix per accumulator row band (a plain operand serves every band).
        let bands = match b {
            Operand::Banded { .. } => self.k.tiles[acc.0 as usize].warps[0] as usize,
            _ => 1,
        };
        let mut bmats = Vec::with_capacity(bands);
        for w in 0..bands {
            bmats.push(match b {
                Operand::Banded { src, transpose } => {
                    let mut moved = src.clone();
                    moved.row0 += w as u32 * src.rows;
                    self.operand(&Operand::Shared { src: moved, transpose: *transpose }, tensors)?
                }
                other => self.operand(other, tensors)?,
            });
        }
        let n = bmats[0].1;
        let band_rows = m / bands;
        let accv = &mut self.tiles[acc.0 as usize];
        for i in 0..m {
            let bv = &bmats[i / band_rows].2;
            for j in 0..n {
                // Products of bf16/f16 values are exact in f32; the tensor core sums in f32.
                let mut s = accv[i * n + j] as f32;
                for p in 0..kd {
                    s += (av[i * kd + p] as f32) * (bv[p * n + j] as f32);
                }
                accv[i * n + j] = s as f64;
            }
        }
        Ok(())
    }
}

/// Element `c` of a row of a [`Stmt::DequantFp4`] or [`Stmt::DequantFp4Stream`] tile, as the GPU decodes it:
/// the nibble of column `c % 32` in its block's words (the packed layout, or the natural one of SEMANTICS.md
/// section 1.3) at the block's scale. `word(i)` reads word `i` of the row (4 per 32-column block), `scale(b)` the
/// scale of the row's block `b`. Shared by the interpreter and the JIT's host call.
pub(crate) fn dequant_fp4_at(
    c: usize,
    (packed, fold, finite): (bool, bool, bool),
    word: impl FnOnce(usize) -> Result<u32, InterpError>,
    scale: impl FnOnce(usize) -> Result<u32, InterpError>,
) -> Result<f64, InterpError> {
    let (w, p) = fp4::slot(c % 32, packed);
    let nib = fp4::code(word(4 * (c / 32) + w)?, p, packed);
    Ok(dequant_fp4_value(nib, scale(c / 32)?, fold, finite) as f64)
}

/// One value of [`Stmt::DequantFp4`], as the GPU computes it: the bf16 bits of `e2m1(nib) * 2^-126` (sign to
/// bit 15, exponent and mantissa bits to bits 8..6) times the bf16 scale multiplier(s), each product rounded to
/// bf16 (products of bf16 values are exact in f32, so rounding the f32 product is the bf16 multiply).
pub(crate) fn dequant_fp4_value(nib: u32, s: u32, fold: bool, finite: bool) -> f32 {
    let bf = |bits: u32| f32::from_bits((bits & 0xffff) << 16);
    let mul = |a: f32, b: f32| round_to(DType::Bf16, a * b);
    let v = bf(fp4::code_bits(nib));
    let nan = !finite && s == 255;
    if fold {
        let m = if nan { bf(0x7fc0) } else { bf(s.wrapping_mul(0x80).wrapping_add(0x3f00)) };
        mul(v, m)
    } else {
        let m = if nan {
            bf(0x7fc0)
        } else if s == 0 {
            bf(0x0040)
        } else {
            bf(s.wrapping_mul(0x80))
        };
        mul(mul(v, bf(0x7e80)), m)
    }
}

/// What a `Stmt::Load` writes into tile `d`, row-major, as the tile keeps it (see [`tile_value`]): `read(i, j)` of
/// each element, 0 where it gives `None` (outside a global view). Shared by the interpreter and the JIT's host call.
pub(crate) fn load_values(
    d: &RegTileDecl,
    mut read: impl FnMut(usize, usize) -> Result<Option<f64>, InterpError>,
) -> Result<Vec<f64>, InterpError> {
    let (rows, cols) = (d.rows as usize, d.cols as usize);
    let mut out = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        for j in 0..cols {
            let v = read(i, j)?.unwrap_or(0.0);
            out.push(tile_value(d.dtype, v as i64, v as f32));
        }
    }
    Ok(out)
}

/// The flat tensor index of element (i, j) of a global view `(offset, row stride, rows, cols)`; `None` outside it.
pub(crate) fn view_element((off, stride, rows, cols): (i64, i64, i64, i64), i: usize, j: usize) -> Option<i64> {
    ((i as i64) < rows && (j as i64) < cols).then(|| off + i as i64 * stride + j as i64)
}

/// What a register element of `dtype` keeps of a value (i32 tiles wrap the int, float tiles round the float).
pub(crate) fn tile_value(dtype: DType, i: i64, f: f32) -> f64 {
    match dtype {
        DType::I32 => i as i32 as f64,
        dt => round_to(dt, f) as f64,
    }
}

/// One step of a row reduction or a scan, in f32 as on the GPU.
pub(crate) fn reduce(op: ReduceOp, a: f32, b: f32) -> f32 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

#[cfg(test)]
mod tests {
    use super::dequant_fp4_value;

    /// The E2M1 values of codes 0..16 (SEMANTICS.md section 1.2).
    const E2M1: [f64; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];

    #[test]
    fn dequant_fp4_is_the_exact_value_under_its_promises() {
        for s in 0..=255u32 {
            for nib in 0..16u32 {
                let want = if s == 255 { f32::NAN } else { (E2M1[nib as usize] * 2f64.powi(s as i32 - 127)) as f32 };
                // (fold, finite) combinations whose promise this scale byte keeps.
                for (fold, finite) in [(false, false), (false, true), (true, false), (true, true)] {
                    if (fold && s > 128 && s != 255) || (finite && s == 255) {
                        continue;
                    }
                    let got = dequant_fp4_value(nib, s, fold, finite);
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "nib {nib} s {s} fold {fold} finite {finite}: {got:e} != {want:e}"
                    );
                }
            }
        }
    }
}
