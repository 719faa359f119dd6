//! Threads regions: per-thread C inside a block. Scalar stores, shared stores and atomics go through prelude
//! helpers (`prelude/simt.cuh`); register arrays become local C arrays.

use super::{Ctx, Renderer, c_type, scalar_c_type, tensor_arg};
use k3k_ir::*;

impl<'a> Renderer<'a> {
    /// Render a region or one of the statements only valid inside regions.
    pub(super) fn thread_stmt(&mut self, s: &Stmt) {
        let k = self.k;
        match s {
            Stmt::Threads { body } => {
                self.line("{  // threads region: every thread on its own");
                self.depth += 1;
                self.body(body);
                self.depth -= 1;
                // Reconverge the warps before block-level code (warp-collective `.aligned` instructions).
                self.line("}");
                self.line("__syncwarp();");
            }
            Stmt::StoreScalar { tensor, index, value } => {
                let line = format!(
                    "k3k::st_elem({} + ({}), {});",
                    tensor_arg(k, *tensor),
                    self.e(index, Ctx::Scalar),
                    self.typed(value, k.tensors[tensor.0 as usize].dtype)
                );
                self.line(&line);
            }
            Stmt::SharedStore { buf, index, row, col, value } => {
                let line = format!(
                    "k3k::st_elem({}, {});",
                    self.shared_elem(*buf, index, row, col, Ctx::Scalar),
                    self.typed(value, k.shared[buf.0 as usize].dtype)
                );
                self.line(&line);
            }
            Stmt::Atomic { target, op, value, fetch } => {
                let (dtype, ptr) = match target {
                    AtomicTarget::Global { tensor, index } => (
                        k.tensors[tensor.0 as usize].dtype,
                        format!("({} + ({}))", tensor_arg(k, *tensor), self.e(index, Ctx::Scalar)),
                    ),
                    AtomicTarget::Shared { buf, index, row, col } => {
                        (k.shared[buf.0 as usize].dtype, self.shared_elem(*buf, index, row, col, Ctx::Scalar))
                    }
                };
                let call =
                    format!("k3k::atomic_{}({ptr}, ({})({}))", op.name(), c_type(dtype), self.e(value, Ctx::Scalar));
                let line = match fetch {
                    Some(v) => {
                        let ty = ScalarTy::of_dtype(dtype);
                        let conv = if ty == ScalarTy::Float { "to_f32" } else { "to_i64" };
                        format!(
                            "{} x{} = k3k::{conv}({call});  // {}",
                            scalar_c_type(ty),
                            v.0,
                            k.vars[v.0 as usize].name
                        )
                    }
                    None => format!("{call};"),
                };
                self.line(&line);
            }
            Stmt::LetArray { arr, len, ty, init } => {
                let line = format!("{} a{}[{len}];  // {}", scalar_c_type(*ty), arr.0, k.arrays[arr.0 as usize].name);
                self.line(&line);
                self.line("{");
                self.depth += 1;
                let line = format!("const {} i_ = {};", scalar_c_type(*ty), self.e(init, Ctx::Scalar));
                self.line(&line);
                self.line("#pragma unroll");
                self.line(&format!("for (int j_ = 0; j_ < {len}; ++j_) a{}[j_] = i_;", arr.0));
                self.depth -= 1;
                self.line("}");
            }
            Stmt::ArraySet { arr, index, value } => {
                let line =
                    format!("a{}[(int)({})] = {};", arr.0, self.e(index, Ctx::Scalar), self.e(value, Ctx::Scalar));
                self.line(&line);
            }
            Stmt::LoadWide { arr, at, tensor, index, lanes } | Stmt::StoreWide { tensor, index, arr, at, lanes } => {
                let f = match s {
                    Stmt::LoadWide { .. } => "ld_wide",
                    // (`Kernel::pinned_wide_stores`: 16-byte stores by one `st.global.v4.b32`.)
                    _ if k.pinned_wide_stores
                        && *lanes as usize * k.tensors[tensor.0 as usize].dtype.size_bytes() == 16 =>
                    {
                        "st_wide_v"
                    }
                    _ => "st_wide",
                };
                let line = format!(
                    "k3k::{f}<{lanes}>({} + ({}), &a{}[{at}]);",
                    tensor_arg(k, *tensor),
                    self.e(index, Ctx::Scalar),
                    arr.0
                );
                self.line(&line);
            }
            Stmt::SharedLoadWide { arr, at, buf, index, row, col, lanes }
            | Stmt::SharedStoreWide { buf, index, row, col, arr, at, lanes } => {
                let f = if matches!(s, Stmt::SharedLoadWide { .. }) { "ld_wide" } else { "st_wide" };
                let line = format!(
                    "k3k::{f}<{lanes}>({}, &a{}[{at}]);",
                    self.shared_elem(*buf, index, row, col, Ctx::Scalar),
                    arr.0
                );
                self.line(&line);
            }
            Stmt::WarpShuffle { var, op, value } => {
                let ty = self.var_types[var.0 as usize].expect("validated");
                let v = self.e(value, Ctx::Scalar);
                let call = match op {
                    WarpOp::ShflXor(m) => format!("__shfl_xor_sync(0xffffffffu, {v}, {m})"),
                    WarpOp::ShflIdx(l) => format!("__shfl_sync(0xffffffffu, {v}, {l})"),
                    WarpOp::ShflUp(d) => format!("__shfl_up_sync(0xffffffffu, {v}, {d})"),
                    WarpOp::Ballot => format!("(long long)__ballot_sync(0xffffffffu, {v})"),
                };
                let line = format!("{} x{} = {call};  // {}", scalar_c_type(ty), var.0, k.vars[var.0 as usize].name);
                self.line(&line);
            }
            Stmt::WarpSync => self.line("__syncwarp();"),
            Stmt::Fence => self.line("__threadfence();"),
            _ => unreachable!("not a threads statement"),
        }
    }

    /// A value stored into `dtype` storage, with its expression type (which the validator matched to the
    /// storage) made explicit so that the prelude's float or int `st_elem` overload is chosen.
    fn typed(&self, value: &Expr, dtype: DType) -> String {
        format!("({})({})", scalar_c_type(ScalarTy::of_dtype(dtype)), self.e(value, Ctx::Scalar))
    }
}
