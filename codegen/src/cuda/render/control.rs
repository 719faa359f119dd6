//! Scalar control and nested bodies: `let`, assignments, loops, conditionals, the warpgroups' turns, the
//! first-warpgroups guard and the producer warp's bodies.

use super::*;

impl<'a> Renderer<'a> {
    pub(super) fn control_stmt(&mut self, s: &Stmt) {
        let k = self.k;
        match s {
            Stmt::Let { var, value } => {
                let ty = self.var_types[var.0 as usize].expect("validated");
                let line = format!(
                    "{} x{} = {};  // {}",
                    scalar_c_type(ty),
                    var.0,
                    self.e(value, Ctx::Scalar),
                    k.vars[var.0 as usize].name
                );
                self.line(&line);
            }
            Stmt::Assign { var, value } => {
                let line = format!("x{} = {};", var.0, self.e(value, Ctx::Scalar));
                self.line(&line);
            }
            Stmt::For { var, start, end, step, body, unroll } => {
                if *unroll {
                    self.line("#pragma unroll");
                } else {
                    self.line("#pragma unroll 1");
                }
                let line = format!(
                    "for (long long x{v} = {}; x{v} < {}; x{v} += {}) {{  // {}",
                    self.e(start, Ctx::Scalar),
                    self.e(end, Ctx::Scalar),
                    self.e(step, Ctx::Scalar),
                    k.vars[var.0 as usize].name,
                    v = var.0
                );
                self.nested(&line, body);
            }
            Stmt::If { cond, then_body, else_body } => {
                let line = format!("if ({}) {{", self.e(cond, Ctx::Scalar));
                self.line(&line);
                self.depth += 1;
                self.nest += 1;
                self.body(then_body);
                if !else_body.is_empty() {
                    self.depth -= 1;
                    self.line("} else {");
                    self.depth += 1;
                    self.body(else_body);
                }
                self.nest -= 1;
                self.depth -= 1;
                self.line("}");
            }
            // The consumer warpgroups take turns (named barriers, see `Stmt::InTurn` and the prelude's
            // `turn_take`); the producer warpgroup runs the body's skeleton without them.
            Stmt::InTurn { body } => {
                let wgs = k.threads / 128;
                self.line("{  // in turn");
                self.depth += 1;
                self.nest += 1;
                if self.view != View::Producer {
                    self.line(&format!("k3k::turn_take<{wgs}>();"));
                }
                self.body(body);
                if self.view != View::Producer {
                    self.line(&format!("k3k::turn_pass<{wgs}>();"));
                }
                self.nest -= 1;
                self.depth -= 1;
                self.line("}");
            }
            Stmt::FirstWarpgroups { count, body } => {
                self.nested(&format!("if (threadIdx.x < {}) {{  // first {count} warpgroups", 128 * count), body);
            }
            // (Rendered in the producer's slice only, every statement of it.)
            Stmt::Producer { body } => {
                let view = std::mem::replace(&mut self.view, View::All);
                self.body(body);
                self.view = view;
            }
            _ => unreachable!("not a scalar control statement"),
        }
    }
}
