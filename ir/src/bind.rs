//! Binding launch arguments to a kernel: check every tensor's dtype and shape against the kernel's symbolic
//! dims, collect the symbol values, and evaluate the grid. Shared by the GPU launcher and the CPU interpreter,
//! so both reject bad input with the same typed error naming the argument.

use crate::dtype::DType;
use crate::expr::{BinOp, Expr, UnOp};
use crate::kernel::{Dim, Kernel, SymKind};

/// The value of one symbol (shape dim or scalar argument).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SymValue {
    Int(i64),
    Float(f32),
}

impl SymValue {
    /// The integer value (floats truncate).
    pub fn as_int(self) -> i64 {
        match self {
            SymValue::Int(v) => v,
            SymValue::Float(v) => v as i64,
        }
    }
}

/// The launcher-provided symbol sizing persistent grids: the GPU's multiprocessor count, or for a kernel with a
/// cluster shape the CTAs that fit at once in whole clusters (the CUDA runtime asks the driver; the CPU backends
/// take it from their configuration).
pub const NUM_SMS: &str = "NUM_SMS";

/// The dtype and shape of one tensor argument.
#[derive(Clone, Copy, Debug)]
pub struct TensorShape<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
}

/// Why arguments do not fit a kernel.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindError {
    #[error("kernel `{kernel}` takes {expected} tensors, got {got}")]
    Count { kernel: String, expected: usize, got: usize },
    #[error("argument `{arg}`: expected a {expected} tensor, got {got}")]
    DType { arg: String, expected: DType, got: DType },
    #[error("argument `{arg}`: expected rank {expected} ([{dims}]), got shape {got:?}")]
    Rank { arg: String, expected: usize, dims: String, got: Vec<usize> },
    #[error("argument `{arg}` dim {dim} (`{sym}`): expected {expected} (as bound by `{from}`), got {got}")]
    Mismatch { arg: String, dim: usize, sym: String, expected: i64, from: String, got: usize },
    #[error("argument `{arg}` dim {dim}: expected {expected}, got {got}")]
    Const { arg: String, dim: usize, expected: i64, got: usize },
    #[error("missing scalar argument `{name}`")]
    MissingScalar { name: String },
    #[error("scalar argument `{name}`: expected {expected}")]
    ScalarType { name: String, expected: &'static str },
    #[error("grid of kernel `{kernel}`: {reason}")]
    Grid { kernel: String, reason: String },
}

/// Bind tensors (in kernel order) and named scalars; returns one value per symbol of the kernel.
/// `NUM_SMS`, when the kernel declares it and the caller does not pass it, is set to `num_sms`.
pub fn bind(
    k: &Kernel,
    tensors: &[TensorShape<'_>],
    scalars: &[(&str, SymValue)],
    num_sms: i64,
) -> Result<Vec<SymValue>, BindError> {
    if tensors.len() != k.tensors.len() {
        return Err(BindError::Count { kernel: k.name.clone(), expected: k.tensors.len(), got: tensors.len() });
    }
    let mut vals: Vec<Option<(SymValue, String)>> = vec![None; k.syms.len()];
    for (p, t) in k.tensors.iter().zip(tensors) {
        if p.dtype != t.dtype {
            return Err(BindError::DType { arg: p.name.clone(), expected: p.dtype, got: t.dtype });
        }
        if p.dims.len() != t.shape.len() {
            let dims: Vec<String> = p
                .dims
                .iter()
                .map(|d| match d {
                    Dim::Const(c) => c.to_string(),
                    Dim::Sym(s) => k.syms[s.0 as usize].name.clone(),
                })
                .collect();
            return Err(BindError::Rank {
                arg: p.name.clone(),
                expected: p.dims.len(),
                dims: dims.join(", "),
                got: t.shape.to_vec(),
            });
        }
        for (i, (d, &n)) in p.dims.iter().zip(t.shape).enumerate() {
            match d {
                Dim::Const(c) => {
                    if *c != n as i64 {
                        return Err(BindError::Const { arg: p.name.clone(), dim: i, expected: *c, got: n });
                    }
                }
                Dim::Sym(s) => match &vals[s.0 as usize] {
                    Some((SymValue::Int(v), from)) if *v != n as i64 => {
                        return Err(BindError::Mismatch {
                            arg: p.name.clone(),
                            dim: i,
                            sym: k.syms[s.0 as usize].name.clone(),
                            expected: *v,
                            from: from.clone(),
                            got: n,
                        });
                    }
                    Some(_) => {}
                    None => vals[s.0 as usize] = Some((SymValue::Int(n as i64), p.name.clone())),
                },
            }
        }
    }
    for (i, s) in k.syms.iter().enumerate() {
        if s.kind == SymKind::Dim {
            continue;
        }
        let given = scalars.iter().find(|(n, _)| *n == s.name).map(|(_, v)| *v);
        let v = match (given, s.kind) {
            (Some(SymValue::Int(v)), SymKind::Int) => SymValue::Int(v),
            (Some(SymValue::Float(v)), SymKind::Float) => SymValue::Float(v),
            (Some(_), SymKind::Int) => {
                return Err(BindError::ScalarType { name: s.name.clone(), expected: "an integer" });
            }
            (Some(_), _) => return Err(BindError::ScalarType { name: s.name.clone(), expected: "a float" }),
            (None, SymKind::Int) if s.name == NUM_SMS => SymValue::Int(num_sms),
            (None, _) => return Err(BindError::MissingScalar { name: s.name.clone() }),
        };
        vals[i] = Some((v, "scalar".into()));
    }
    vals.into_iter()
        .enumerate()
        .map(|(i, v)| v.map(|(v, _)| v).ok_or_else(|| BindError::MissingScalar { name: k.syms[i].name.clone() }))
        .collect()
}

/// Evaluate an integer expression over symbols and constants (what grid sizes may use).
pub fn eval_int(e: &Expr, syms: &[SymValue]) -> Option<i64> {
    Some(match e {
        Expr::Int(v) => *v,
        Expr::Sym(s) => syms.get(s.0 as usize)?.as_int(),
        Expr::Un(UnOp::Neg, a) => -eval_int(a, syms)?,
        Expr::Bin(op, a, b) => {
            let (a, b) = (eval_int(a, syms)?, eval_int(b, syms)?);
            match op {
                BinOp::Add => a.checked_add(b)?,
                BinOp::Sub => a.checked_sub(b)?,
                BinOp::Mul => a.checked_mul(b)?,
                BinOp::Div => a.checked_div(b)?,
                BinOp::Rem => a.checked_rem(b)?,
                BinOp::Min => a.min(b),
                BinOp::Max => a.max(b),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The grid of a bound kernel. Each dimension must be in 1..=2^31-1 (x) or 1..=65535 (y, z); a zero-sized
/// grid is reported as `Ok(None)` (nothing to launch).
pub fn eval_grid(k: &Kernel, syms: &[SymValue]) -> Result<Option<[u32; 3]>, BindError> {
    let mut g = [0u32; 3];
    for (i, e) in k.grid.iter().enumerate() {
        let v = eval_int(e, syms).ok_or_else(|| BindError::Grid {
            kernel: k.name.clone(),
            reason: format!("cannot evaluate {}", crate::print::expr(k, e)),
        })?;
        if v <= 0 {
            return Ok(None);
        }
        let max = if i == 0 { i32::MAX as i64 } else { 65_535 };
        if v > max {
            return Err(BindError::Grid {
                kernel: k.name.clone(),
                reason: format!("dimension {i} = {v} exceeds {max}"),
            });
        }
        g[i] = v as u32;
    }
    Ok(Some(g))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::KernelBuilder;
    use crate::kernel::Access;

    fn kern() -> Kernel {
        let mut b = KernelBuilder::new("k", 32);
        let m = b.dim("M");
        let n = b.dim("N");
        b.tensor("x", DType::Bf16, &[m.clone(), n.clone()], Access::Read);
        b.tensor("y", DType::F32, &[m.clone(), Expr::Int(4)], Access::Write);
        let s = b.int_arg(NUM_SMS);
        b.grid(s, m.ceil_div(16i64), 1i64);
        b.finish().unwrap()
    }

    /// Bind [`kern`]'s tensors `x` and `y`, each given as (dtype, shape), on `num_sms` SMs.
    fn bind_xy(
        k: &Kernel,
        (xt, x): (DType, &[usize]),
        (yt, y): (DType, &[usize]),
        num_sms: i64,
    ) -> Result<Vec<SymValue>, BindError> {
        bind(k, &[TensorShape { dtype: xt, shape: x }, TensorShape { dtype: yt, shape: y }], &[], num_sms)
    }

    #[test]
    fn binds_and_evaluates_grid() {
        let k = kern();
        let v = bind_xy(&k, (DType::Bf16, &[33, 7]), (DType::F32, &[33, 4]), 132).unwrap();
        assert_eq!(eval_grid(&k, &v).unwrap(), Some([132, 3, 1]));
    }

    #[test]
    fn mismatches_name_the_argument() {
        let k = kern();
        let e = bind_xy(&k, (DType::Bf16, &[33, 7]), (DType::F32, &[32, 4]), 1).unwrap_err();
        assert!(matches!(&e, BindError::Mismatch { arg, sym, .. } if arg == "y" && sym == "M"), "{e}");
        let e = bind(&k, &[TensorShape { dtype: DType::F32, shape: &[33, 7] }], &[], 1).unwrap_err();
        assert!(matches!(e, BindError::Count { .. }));
        let e = bind_xy(&k, (DType::F32, &[33, 7]), (DType::F32, &[33, 4]), 1).unwrap_err();
        assert!(e.to_string().contains("argument `x`"), "{e}");
        let e = bind_xy(&k, (DType::Bf16, &[33, 7]), (DType::F32, &[33, 5]), 1).unwrap_err();
        assert!(matches!(e, BindError::Const { dim: 1, .. }));
    }

    #[test]
    fn empty_grid_is_none() {
        let k = kern();
        let v = bind_xy(&k, (DType::Bf16, &[0, 7]), (DType::F32, &[0, 4]), 1).unwrap();
        assert_eq!(eval_grid(&k, &v).unwrap(), None);
    }
}
