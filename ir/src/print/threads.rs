//! Threads regions and the statements valid inside them (per-thread stores, atomics, arrays, warp shuffles).

use super::*;

/// Print one per-thread statement.
pub(super) fn thread_stmt(k: &Kernel, st: &Stmt, depth: usize, pad: &str, s: &mut String) {
    match st {
        Stmt::Threads { body: inner } => {
            let _ = writeln!(s, "{pad}threads {{");
            body(k, inner, depth + 1, s);
            let _ = writeln!(s, "{pad}}}");
        }
        Stmt::StoreScalar { tensor, index, value } => {
            let _ = writeln!(s, "{pad}{}[{}] := {}", tensor_name(k, tensor.0), expr(k, index), expr(k, value));
        }
        Stmt::SharedStore { buf, index, row, col, value } => {
            let _ = writeln!(s, "{pad}{} := {}", shared_elem(k, *buf, index, row, col), expr(k, value));
        }
        Stmt::Atomic { target, op, value, fetch } => {
            let t = match target {
                AtomicTarget::Global { tensor, index } => {
                    format!("{}[{}]", tensor_name(k, tensor.0), expr(k, index))
                }
                AtomicTarget::Shared { buf, index, row, col } => shared_elem(k, *buf, index, row, col),
            };
            let lhs = fetch.map_or(String::new(), |v| format!("let {} = ", expr(k, &Expr::Var(v))));
            let _ = writeln!(s, "{pad}{lhs}atomic_{}({t}, {})", op.name(), expr(k, value));
        }
        Stmt::LetArray { arr, len, ty, init } => {
            let _ = writeln!(s, "{pad}let {}: {ty}[{len}] = {}", array_name(k, *arr), expr(k, init));
        }
        Stmt::ArraySet { arr, index, value } => {
            let _ = writeln!(s, "{pad}{}[{}] := {}", array_name(k, *arr), expr(k, index), expr(k, value));
        }
        Stmt::LoadWide { arr, at, tensor, index, lanes } => {
            let _ = writeln!(
                s,
                "{pad}{}[{at}..+{lanes}] := wide {}[{}..+{lanes}]",
                array_name(k, *arr),
                tensor_name(k, tensor.0),
                expr(k, index)
            );
        }
        Stmt::SharedLoadWide { arr, at, buf, index, row, col, lanes } => {
            let _ = writeln!(
                s,
                "{pad}{}[{at}..+{lanes}] := wide {}..+{lanes}",
                array_name(k, *arr),
                shared_elem(k, *buf, index, row, col)
            );
        }
        Stmt::SharedStoreWide { buf, index, row, col, arr, at, lanes } => {
            let _ = writeln!(
                s,
                "{pad}{}..+{lanes} := wide {}[{at}..+{lanes}]",
                shared_elem(k, *buf, index, row, col),
                array_name(k, *arr)
            );
        }
        Stmt::StoreWide { tensor, index, arr, at, lanes } => {
            let _ = writeln!(
                s,
                "{pad}{}[{}..+{lanes}] := wide {}[{at}..+{lanes}]",
                tensor_name(k, tensor.0),
                expr(k, index),
                array_name(k, *arr)
            );
        }
        Stmt::WarpShuffle { var, op, value } => {
            let _ = writeln!(s, "{pad}let {} = warp_{}({})", expr(k, &Expr::Var(*var)), op.name(), expr(k, value));
        }
        Stmt::WarpSync => {
            let _ = writeln!(s, "{pad}syncwarp");
        }
        Stmt::Fence => {
            let _ = writeln!(s, "{pad}fence");
        }
        _ => unreachable!("not a per-thread statement"),
    }
}
