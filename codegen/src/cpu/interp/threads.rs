//! Threads regions and their per-thread statements: scalar stores, shared stores, atomics and register
//! arrays. A region runs its body for thread 0, then thread 1, and so on; per-thread variables and arrays are
//! (re)introduced by each thread's own `Let` / `LetArray`, so the shared variable slots serve every thread.

use super::memory::{V, round_to, wrap_int};
use super::{Block, InterpError};
use k3k_ir::*;

impl<'a> Block<'a> {
    /// Execute a region or one of the statements only valid inside regions.
    pub(super) fn thread_stmt(&mut self, s: &Stmt, tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        match s {
            Stmt::Threads { body } if body.iter().any(is_warp_stmt) => self.lockstep(body, tensors)?,
            Stmt::Threads { body } => {
                for t in 0..self.k.threads {
                    self.thread = Some(t);
                    self.body(body, tensors)?;
                }
                self.thread = None;
            }
            Stmt::StoreScalar { tensor, index, value } => {
                let i = self.int(index, tensors)?;
                let i = self.global_index("scalar store", *tensor, i, tensors)?;
                let v = self.eval(value, None, tensors)?;
                let t = &mut tensors[tensor.0 as usize];
                match v {
                    V::F(f) => t.set_f32(i, f),
                    other => t.set_i64(i, other.i()),
                }
            }
            Stmt::SharedStore { buf, index, row, col, value } => {
                let (index, row, col) = (self.int(index, tensors)?, self.int(row, tensors)?, self.int(col, tensors)?);
                let i = self.shared_element("store", *buf, index, row, col)?;
                let v = self.eval(value, None, tensors)?;
                let dtype = self.k.shared[buf.0 as usize].dtype;
                self.claim(*buf);
                self.shared[buf.0 as usize].set(dtype, i, v);
            }
            Stmt::Atomic { target, op, value, fetch } => {
                let v = self.eval(value, None, tensors)?;
                let old = match target {
                    AtomicTarget::Global { tensor, index } => {
                        let i = self.int(index, tensors)?;
                        let i = self.global_index("atomic", *tensor, i, tensors)?;
                        let t = &mut tensors[tensor.0 as usize];
                        let old = if t.dtype == DType::F32 { V::F(t.get_f32(i)) } else { V::I(t.get_i64(i)) };
                        match atomic(t.dtype, *op, old, v) {
                            V::F(f) => t.set_f32(i, f),
                            new => t.set_i64(i, new.i()),
                        }
                        old
                    }
                    AtomicTarget::Shared { buf, index, row, col } => {
                        let (index, row, col) =
                            (self.int(index, tensors)?, self.int(row, tensors)?, self.int(col, tensors)?);
                        let i = self.shared_element("atomic", *buf, index, row, col)?;
                        let dtype = self.k.shared[buf.0 as usize].dtype;
                        self.claim(*buf);
                        let mem = &mut self.shared[buf.0 as usize];
                        let old = mem.get(i);
                        mem.set(dtype, i, atomic(dtype, *op, old, v));
                        old
                    }
                };
                if let Some(var) = fetch {
                    self.vars[var.0 as usize] = old;
                }
            }
            Stmt::LetArray { arr, len, ty, init } => {
                let v = self.eval(init, None, tensors)?;
                let v = match ty {
                    ScalarTy::Int => V::I(v.i()),
                    ScalarTy::Float => V::F(v.f()),
                    ScalarTy::Bool => v,
                };
                self.arrays[arr.0 as usize] = vec![v; *len as usize];
            }
            Stmt::ArraySet { arr, index, value } => {
                let i = self.int(index, tensors)?;
                let i = self.array_slot(*arr, i)?;
                let v = self.eval(value, None, tensors)?;
                self.arrays[arr.0 as usize][i] = v;
            }
            Stmt::LoadWide { arr, at, tensor, index, lanes } | Stmt::StoreWide { tensor, index, arr, at, lanes } => {
                let store = matches!(s, Stmt::StoreWide { .. });
                let what = if store { "wide store" } else { "wide load" };
                let i = self.int(index, tensors)?;
                self.wide_aligned(what, &self.k.tensors[tensor.0 as usize].name, i, *lanes)?;
                for j in 0..*lanes {
                    let g = self.global_index(what, *tensor, i + j as i64, tensors)?;
                    let a = self.array_slot(*arr, *at as i64 + j as i64)?;
                    let t = &mut tensors[tensor.0 as usize];
                    let float = ScalarTy::of_dtype(t.dtype) == ScalarTy::Float;
                    if store {
                        match self.arrays[arr.0 as usize][a] {
                            V::F(f) if float => t.set_f32(g, f),
                            v => t.set_i64(g, v.i()),
                        }
                    } else {
                        self.arrays[arr.0 as usize][a] = if float { V::F(t.get_f32(g)) } else { V::I(t.get_i64(g)) };
                    }
                }
            }
            Stmt::SharedLoadWide { buf, col, lanes, .. } | Stmt::SharedStoreWide { buf, col, lanes, .. } => {
                // Lane by lane as the scalar statements (their checks and conversions), after the alignment check.
                let store = matches!(s, Stmt::SharedStoreWide { .. });
                let c = self.int(col, tensors)?;
                let what = if store { "wide shared store" } else { "wide shared load" };
                self.wide_aligned(what, &self.k.shared[buf.0 as usize].name, c, *lanes)?;
                for j in 0..*lanes as i64 {
                    let lane = shared_wide_lane(s, Expr::Int(c + j), j);
                    self.thread_stmt(&lane, tensors)?;
                }
            }
            _ => unreachable!("not a threads statement (warp statements run in `lockstep`)"),
        }
        Ok(())
    }

    /// A region with warp statements (validated to sit at its top level): the statements between two warp
    /// statements run for every thread (each with its own saved variables and arrays), then the warp statement
    /// runs for all threads together: every thread evaluates the value, then each receives its source lane's.
    fn lockstep(&mut self, body: &[Stmt], tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        let n = self.k.threads as usize;
        let block_vars = self.vars.clone();
        let block_arrays = std::mem::take(&mut self.arrays);
        let mut states: Vec<(Vec<V>, Vec<Vec<V>>)> =
            (0..n).map(|_| (block_vars.clone(), vec![vec![]; self.k.arrays.len()])).collect();
        let mut seg = 0;
        let result = loop {
            let end = body[seg..].iter().position(is_warp_stmt).map_or(body.len(), |p| seg + p);
            let mut vals = Vec::with_capacity(n);
            let step = (|| {
                for (t, st) in states.iter_mut().enumerate() {
                    std::mem::swap(&mut self.vars, &mut st.0);
                    std::mem::swap(&mut self.arrays, &mut st.1);
                    self.thread = Some(t as u32);
                    let mut r = self.body(&body[seg..end], tensors);
                    if r.is_ok()
                        && let Some(Stmt::WarpShuffle { value, .. }) = body.get(end)
                    {
                        match self.eval(value, None, tensors) {
                            Ok(v) => vals.push(v),
                            Err(e) => r = Err(e),
                        }
                    }
                    std::mem::swap(&mut self.vars, &mut st.0);
                    std::mem::swap(&mut self.arrays, &mut st.1);
                    r?;
                }
                Ok(())
            })();
            if let Err(e) = step {
                break Err(e);
            }
            if let Some(Stmt::WarpShuffle { var, op, .. }) = body.get(end) {
                for (t, st) in states.iter_mut().enumerate() {
                    let (lane, w0) = (t % 32, t - t % 32);
                    st.0[var.0 as usize] = match op.source_lane(lane as u32) {
                        Some(src) => vals[w0 + src as usize],
                        None => V::I((0..32).filter(|&j| vals[w0 + j].b()).map(|j| 1i64 << j).sum()),
                    };
                }
            }
            if end >= body.len() {
                break Ok(());
            }
            seg = end + 1;
        };
        self.vars = block_vars;
        self.arrays = block_arrays;
        self.thread = None;
        result
    }
}

/// A warp statement (run by [`Block::lockstep`]).
fn is_warp_stmt(s: &Stmt) -> bool {
    matches!(s, Stmt::WarpShuffle { .. } | Stmt::WarpSync)
}

/// The new value of an element of `dtype` holding `old` after `op` with `v` (before the store's conversion).
pub(crate) fn atomic(dtype: DType, op: AtomicOp, old: V, v: V) -> V {
    if dtype == DType::F32 {
        let (a, b) = (old.f(), round_to(dtype, v.f()));
        return V::F(match op {
            AtomicOp::Add => a + b,
            AtomicOp::Max => a.max(b),
            AtomicOp::Min => a.min(b),
        });
    }
    let (a, b) = (wrap_int(dtype, old.i()), wrap_int(dtype, v.i()));
    let unsigned = matches!(dtype, DType::U32 | DType::U64);
    V::I(wrap_int(
        dtype,
        match op {
            AtomicOp::Add => a.wrapping_add(b),
            // u32 values are non-negative in an i64; u64 values keep their bits, so compare those unsigned.
            AtomicOp::Max if unsigned => (a as u64).max(b as u64) as i64,
            AtomicOp::Min if unsigned => (a as u64).min(b as u64) as i64,
            AtomicOp::Max => a.max(b),
            AtomicOp::Min => a.min(b),
        },
    ))
}

impl Block<'_> {
    /// The wide accesses' alignment: element `i` of `name` (a tensor or a shared buffer) is a multiple of `lanes`.
    fn wide_aligned(&self, what: &'static str, name: &str, i: i64, lanes: u32) -> Result<(), InterpError> {
        if i.rem_euclid(lanes as i64) != 0 {
            return Err(InterpError::Misaligned {
                kernel: self.k.name.clone(),
                block: self.block,
                thread: self.thread.unwrap_or(0),
                what,
                tensor: name.to_string(),
                index: i,
                lanes,
            });
        }
        Ok(())
    }
}

/// Lane `j` of a [`Stmt::SharedLoadWide`] / [`Stmt::SharedStoreWide`] as the scalar statement both CPU backends run
/// (its checks and conversions): `arr[at + j] = buf[index](row, col_j)` or the store back, `col_j` the lane's column.
pub(crate) fn shared_wide_lane(s: &Stmt, col_j: Expr, j: i64) -> Stmt {
    match s {
        Stmt::SharedLoadWide { arr, at, buf, index, row, .. } => {
            let value = Expr::shared_load(*buf, index.clone(), row.clone(), col_j);
            Stmt::ArraySet { arr: *arr, index: Expr::Int(*at as i64 + j), value }
        }
        Stmt::SharedStoreWide { buf, index, row, arr, at, .. } => {
            let value = Expr::array_get(*arr, Expr::Int(*at as i64 + j));
            Stmt::SharedStore { buf: *buf, index: index.clone(), row: row.clone(), col: col_j, value }
        }
        _ => unreachable!("not a wide shared access"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomics_compare_in_the_storage_type() {
        assert_eq!(atomic(DType::U64, AtomicOp::Max, V::I(-1), V::I(5)), V::I(-1));
        assert_eq!(atomic(DType::I64, AtomicOp::Max, V::I(-1), V::I(5)), V::I(5));
        assert_eq!(atomic(DType::U32, AtomicOp::Min, V::I(7), V::I(-1)), V::I(7));
        assert_eq!(atomic(DType::I32, AtomicOp::Min, V::I(7), V::I(-1)), V::I(-1));
        assert_eq!(atomic(DType::F32, AtomicOp::Max, V::F(1.0), V::F(f32::NAN)), V::F(1.0));
        assert_eq!(atomic(DType::U32, AtomicOp::Add, V::I(0xffff_ffff), V::I(2)), V::I(1));
    }
}
