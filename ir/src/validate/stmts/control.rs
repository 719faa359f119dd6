//! Scalar control and nested bodies: `let`, `assign`, `for`, `if`, and the `first_warpgroups`,
//! `in_turn` and `producer` bodies.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn control_stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s {
            Stmt::FirstWarpgroups { count, body } => {
                let t = self.k.threads;
                if self.k.producer_warp || !t.is_multiple_of(128) || *count == 0 || 128 * count >= t {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "`first_warpgroups` of {count} needs at least {} whole warpgroups (threads a multiple of \
                             128) and no producer warp; the kernel has {t} threads{}",
                            count + 1,
                            if self.k.producer_warp { " and a producer warp" } else { "" }
                        ),
                    ));
                }
                // Products the body starts complete inside it: a `mma_wait(0)` at its top level after the last
                // statement that starts one (ptxas 13.0 serializes every wgmma of a kernel whose products stay in
                // flight across such a branch, its note C7518).
                let starts = |t: &Stmt| {
                    let mut any = false;
                    t.visit(&mut |u| any |= matches!(u, Stmt::MmaAsync { .. }));
                    any
                };
                if let Some(last) = body.iter().rposition(starts)
                    && !body[last..].iter().any(|t| matches!(t, Stmt::MmaWait { pending: 0 }))
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        "a `first_warpgroups` body leaves `mma_async` products in flight: wait for them inside it \
                         (`mma_wait(0)` after the last; ptxas serializes every wgmma of a kernel whose products stay \
                         in flight across the branch)",
                    ));
                }
                self.region(
                    format!("first {count} warpgroups"),
                    body,
                    |v| v.first_wgs = Some((*count, v.scopes.len())),
                    |v| v.first_wgs = None,
                )?;
            }
            Stmt::InTurn { body } => {
                let t = self.k.threads;
                if !t.is_multiple_of(128) || t < 256 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "`in_turn` needs at least two whole consumer warpgroups (threads a multiple of 128, \
                             at least 256; the kernel has {t})"
                        ),
                    ));
                }
                self.region("in_turn".into(), body, |v| v.in_turn = true, |v| v.in_turn = false)?;
            }
            Stmt::Producer { body } => {
                self.region("producer".into(), body, |v| v.producer = true, |v| v.producer = false)?;
            }
            Stmt::Let { var, value } => {
                if var.0 as usize >= self.k.vars.len() {
                    return Err(self.err(IrErrorKind::Scope, format!("no variable #{}", var.0)));
                }
                let t = self.ty(value, Ctx::Scalar { allow_special: true })?;
                self.introduce(*var, t, "variable")?;
            }
            Stmt::Assign { var, value } => {
                let want = self.var_ty(*var).ok_or_else(|| {
                    self.err(IrErrorKind::Scope, format!("assignment to variable #{} out of scope", var.0))
                })?;
                if let (Some((_, base)), Some(at)) = (self.first_wgs, self.var_scope(*var))
                    && at < base
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "variable `{}` is introduced outside the `first_warpgroups` body: the warpgroups that skip \
                             the body would keep its old value (introduce a variable inside, or write through shared \
                             memory)",
                            self.var_name(*var)
                        ),
                    ));
                }
                if let (Some(base), Some(at)) = (self.region, self.var_scope(*var))
                    && at < base
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "variable `{}` is introduced outside the threads region: assigning it inside would give \
                             every thread its own value of a block-level variable (introduce a per-thread variable, \
                             or write through shared memory)",
                            self.var_name(*var)
                        ),
                    ));
                }
                self.scalar(value, want, "assigned value")?;
            }
            Stmt::For { var, start, end, step, body, .. } => {
                self.path.push(format!("for `{}`", self.k.vars.get(var.0 as usize).map_or("?", |v| &v.name)));
                for (e, what) in [(start, "loop start"), (end, "loop end"), (step, "loop step")] {
                    self.scalar(e, ScalarTy::Int, what)?;
                }
                if let Some(st) = step.as_const_int()
                    && st <= 0
                {
                    return Err(self.err(IrErrorKind::Shape, "loop step must be positive"));
                }
                if var.0 as usize >= self.k.vars.len()
                    || self.var_types[var.0 as usize].replace(ScalarTy::Int).is_some()
                {
                    return Err(self.err(IrErrorKind::Scope, format!("loop variable #{} is missing or reused", var.0)));
                }
                self.scopes.push(Scope::with_var(*var, ScalarTy::Int));
                self.body(body)?;
                self.scopes.pop();
                self.path.pop();
            }
            Stmt::If { cond, then_body, else_body } => {
                self.scalar(cond, ScalarTy::Bool, "if condition")?;
                self.path.push("then".into());
                self.scopes.push(Scope::default());
                self.body(then_body)?;
                self.scopes.pop();
                self.path.pop();
                self.path.push("else".into());
                self.scopes.push(Scope::default());
                self.body(else_body)?;
                self.scopes.pop();
                self.path.pop();
            }
            _ => unreachable!("not a scalar control and nested-body statement"),
        }
        Ok(())
    }

    /// A nested body (`first_warpgroups`, `in_turn`, `producer`) in a scope of its own, named `label` in error
    /// paths, with its context set by `enter` for the body's duration and cleared by `leave`.
    fn region(
        &mut self,
        label: String,
        body: &[Stmt],
        enter: impl FnOnce(&mut Self),
        leave: impl FnOnce(&mut Self),
    ) -> Result<(), IrError> {
        self.path.push(label);
        enter(self);
        self.scopes.push(Scope::default());
        let r = self.body(body);
        self.scopes.pop();
        leave(self);
        self.path.pop();
        r
    }
}
