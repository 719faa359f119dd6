//! Tile statements: `map` and `vec_map` compiled inline, the bulk loads, stores, reductions and products
//! through the runtime.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    pub(super) fn tile_stmt(&mut self, s: &Stmt) -> Result<(), JitError> {
        match s {
            Stmt::Map { tile, value } => {
                let d = &self.k.tiles[tile.0 as usize];
                let (rows, cols, dtype) = (d.rows as i64, d.cols as i64, d.dtype);
                let off = self.layout.tiles[tile.0 as usize] as i64;
                self.for_range(rows, &mut |l, r| {
                    l.for_range(cols, &mut |l, c| {
                        let outer = l.at.replace((r, c, cols));
                        let (v, t) = l.expr(value)?;
                        l.at = outer;
                        let a = l.elem_addr(off, r, c, cols, 4);
                        if dtype == DType::I32 {
                            let i = l.as_int(v, t);
                            l.b.ins().istore32(l.trusted, i, a, 0);
                        } else {
                            let f = l.stored_float(dtype, v, t);
                            l.b.ins().store(l.trusted, f, a, 0);
                        }
                        Ok(())
                    })
                })?;
            }
            Stmt::VecMap { vec, value } => {
                let rows = self.k.vecs[vec.0 as usize].rows as i64;
                let off = self.layout.vecs[vec.0 as usize] as i64;
                self.for_range(rows, &mut |l, r| {
                    let z = l.iconst(0);
                    let outer = l.at.replace((r, z, 0));
                    let (v, t) = l.expr(value)?;
                    l.at = outer;
                    let f = l.as_float(v, t);
                    let a = l.flat_addr(off, r, 4);
                    l.b.ins().store(l.trusted, f, a, 0);
                    Ok(())
                })?;
            }
            Stmt::Reduce { .. } | Stmt::Scan { .. } => self.host_tile(s, &[]),
            Stmt::Mma { a, b, .. } => {
                let ai = self.operand_index(a)?;
                let bi = self.operand_index(b)?;
                self.host_tile(s, &[ai, bi]);
            }
            Stmt::MmaAsync { a, b, accumulate, .. } => {
                let (acc, t) = self.expr(accumulate)?;
                let acc = self.as_int(acc, t);
                let ai = self.operand_index(a)?;
                let bi = self.operand_index(b)?;
                self.host_tile(s, &[ai, bi, acc]);
            }
            Stmt::StoreCols { dst, .. } => {
                let i = self.shared_index(dst)?;
                self.host_tile(s, &[i]);
            }
            Stmt::Load { src: p, .. } | Stmt::Store { dst: p, .. } => match p {
                Place::Shared(r) => {
                    let i = self.shared_index(r)?;
                    self.host_tile(s, &[i]);
                }
                Place::Global(v) => {
                    let v = self.global_view(v)?;
                    self.host_tile(s, &v);
                }
            },
            Stmt::LoadVec { src: v, .. } | Stmt::StoreVec { dst: v, .. } => {
                let args = [self.int(&v.offset)?, self.int(&v.stride)?, self.int(&v.rows)?];
                self.host_tile(s, &args);
            }
            _ => unreachable!("not a tile statement"),
        }
        Ok(())
    }
}
