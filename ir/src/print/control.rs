//! Scalar control and nested bodies: `let`, assignments, loops, conditionals, the producer warp's bodies,
//! turns and the first-warpgroups guard.

use super::*;

/// Print one scalar control statement.
pub(super) fn control_stmt(k: &Kernel, st: &Stmt, depth: usize, pad: &str, s: &mut String) {
    match st {
        Stmt::Let { var, value } => {
            let _ = writeln!(s, "{pad}let {} = {}", expr(k, &Expr::Var(*var)), expr(k, value));
        }
        Stmt::Assign { var, value } => {
            let _ = writeln!(s, "{pad}{} := {}", expr(k, &Expr::Var(*var)), expr(k, value));
        }
        Stmt::For { var, start, end, step, body: inner, unroll } => {
            let _ = writeln!(
                s,
                "{pad}for {} in {}..{} step {}{} {{",
                expr(k, &Expr::Var(*var)),
                expr(k, start),
                expr(k, end),
                expr(k, step),
                if *unroll { " unroll" } else { "" }
            );
            body(k, inner, depth + 1, s);
            let _ = writeln!(s, "{pad}}}");
        }
        Stmt::If { cond, then_body, else_body } => {
            let _ = writeln!(s, "{pad}if {} {{", expr(k, cond));
            body(k, then_body, depth + 1, s);
            if !else_body.is_empty() {
                let _ = writeln!(s, "{pad}}} else {{");
                body(k, else_body, depth + 1, s);
            }
            let _ = writeln!(s, "{pad}}}");
        }
        Stmt::Producer { body: inner } => {
            let _ = writeln!(s, "{pad}producer warp {{");
            body(k, inner, depth + 1, s);
            let _ = writeln!(s, "{pad}}}");
        }
        Stmt::InTurn { body: inner } => {
            let _ = writeln!(s, "{pad}in turn {{");
            body(k, inner, depth + 1, s);
            let _ = writeln!(s, "{pad}}}");
        }
        Stmt::FirstWarpgroups { count, body: inner } => {
            let _ = writeln!(s, "{pad}first {count} warpgroups {{");
            body(k, inner, depth + 1, s);
            let _ = writeln!(s, "{pad}}}");
        }
        _ => unreachable!("not a scalar control statement"),
    }
}
