//! The tile statements of the runtime: reductions, products, loads and stores of tiles and row vectors, scans.

use super::*;

/// Run a tile statement for the current block (see [`host_tile`]).
/// SAFETY: as `tile_stmt`.
pub(super) unsafe fn tile_stmt(ctx: &mut Ctx, s: &Stmt, arg: &dyn Fn(usize) -> i64) -> Result<(), InterpError> {
    let (k, f, block, hosts) = unsafe { parts(ctx) };
    let check = bounds(k, block);
    unsafe {
        match s {
            Stmt::Reduce { vec, tile, op, accumulate } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let vp = f.vec(*vec);
                for r in 0..rows {
                    let mut a = f.tile(*tile, r * cols) as f32;
                    for c in 1..cols {
                        a = reduce(*op, a, f.tile(*tile, r * cols + c) as f32);
                    }
                    let slot = &mut *vp.add(r);
                    *slot = if *accumulate { reduce(*op, *slot, a) } else { a };
                }
            }
            Stmt::Mma { acc, a, b } => f.mma(*acc, a, b, arg(0), arg(1)),
            Stmt::MmaAsync { acc, a, b, .. } => {
                if arg(2) == 0 {
                    let d = &k.tiles[acc.0 as usize];
                    for i in 0..(d.rows * d.cols) as usize {
                        f.set_tile(*acc, i, 0.0);
                    }
                }
                f.mma(*acc, a, b, arg(0), arg(1))
            }
            Stmt::StoreCols { tile, col0, dst: r } => {
                let cols = k.tiles[tile.0 as usize].cols as usize;
                let base = f.shared_base(r, arg(0));
                let sd = &k.shared[r.buf.0 as usize];
                for i in 0..r.rows as usize {
                    for j in 0..r.cols as usize {
                        let v = f.tile(*tile, i * cols + *col0 as usize + j);
                        let at = base + (r.row0 as usize + i) * sd.cols as usize + r.col0 as usize + j;
                        f.set_shared(r.buf, at, v);
                    }
                }
            }
            Stmt::Load { tile, src } => {
                let d = &k.tiles[tile.0 as usize];
                let out = match src {
                    Place::Shared(r) => {
                        let base = f.shared_base(r, arg(0));
                        load_values(d, |i, j| Ok(Some(f.shared_at(r, base, i, j))))?
                    }
                    Place::Global(v) => {
                        let t = &hosts[v.tensor.0 as usize];
                        load_values(d, |i, j| {
                            let Some(at) = view_element((arg(0), arg(1), arg(2), arg(3)), i, j) else {
                                return Ok(None);
                            };
                            let idx = check("tile load", v.tensor, at, hosts)?;
                            Ok(Some(if d.dtype == DType::I32 { t.get_i64(idx) as f64 } else { t.get_f32(idx) as f64 }))
                        })?
                    }
                };
                for (i, v) in out.into_iter().enumerate() {
                    f.set_tile(*tile, i, v);
                }
            }
            Stmt::Store { tile, dst } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                match dst {
                    Place::Shared(r) => {
                        let base = f.shared_base(r, arg(0));
                        let sd = &k.shared[r.buf.0 as usize];
                        for i in 0..rows {
                            for j in 0..cols {
                                let v = f.tile(*tile, i * cols + j);
                                let at = base + (r.row0 as usize + i) * sd.cols as usize + r.col0 as usize + j;
                                f.set_shared(r.buf, at, v);
                            }
                        }
                    }
                    Place::Global(v) => {
                        let (off, stride, vr, vc) = (arg(0), arg(1), arg(2), arg(3));
                        for i in 0..rows.min(vr.max(0) as usize) {
                            for j in 0..cols.min(vc.max(0) as usize) {
                                let idx = check("tile store", v.tensor, off + i as i64 * stride + j as i64, hosts)?;
                                let val = f.tile(*tile, i * cols + j);
                                let t = &mut hosts[v.tensor.0 as usize];
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
            Stmt::LoadVec { vec, src } => {
                let (off, stride, vr) = (arg(0), arg(1), arg(2));
                let vp = f.vec(*vec);
                for r in 0..k.vecs[vec.0 as usize].rows as usize {
                    *vp.add(r) = if (r as i64) < vr {
                        let i = check("vector load", src.tensor, off + r as i64 * stride, hosts)?;
                        hosts[src.tensor.0 as usize].get_f32(i)
                    } else {
                        0.0
                    };
                }
            }
            Stmt::StoreVec { vec, dst } => {
                let (off, stride, vr) = (arg(0), arg(1), arg(2));
                let vp = f.vec(*vec);
                let rows = k.vecs[vec.0 as usize].rows as usize;
                for r in 0..rows.min(vr.max(0) as usize) {
                    let i = check("vector store", dst.tensor, off + r as i64 * stride, hosts)?;
                    hosts[dst.tensor.0 as usize].set_f32(i, *vp.add(r));
                }
            }
            Stmt::Scan { tile, scratch, op: ScanOp::Sum } => {
                let d = &k.tiles[tile.0 as usize];
                let sd = &k.shared[scratch.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                for c in 0..cols {
                    let mut s = f.tile(*tile, c) as f32;
                    for r in 1..rows {
                        s += f.tile(*tile, r * cols + c) as f32;
                        f.set_tile(*tile, r * cols + c, s as f64);
                    }
                }
                for r in 0..rows {
                    for c in 0..cols {
                        f.set_shared(*scratch, r * sd.cols as usize + c, f.tile(*tile, r * cols + c));
                    }
                }
            }
            _ => unreachable!("not a tile statement"),
        }
    }
    Ok(())
}
