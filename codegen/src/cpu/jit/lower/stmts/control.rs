//! Scalar control (`let`, `assign`, `for`, `if`), the no-op synchronisation statements, nested bodies and
//! threads regions.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    pub(super) fn control_stmt(&mut self, s: &Stmt) -> Result<(), JitError> {
        match s {
            Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                let (v, _) = self.expr(value)?;
                self.b.def_var(self.vars[var.0 as usize], v);
            }
            Stmt::For { var, start, end, step, body, .. } => {
                let (i0, e, st) = (self.int(start)?, self.int(end)?, self.int(step)?);
                let bad = self.b.ins().icmp_imm_s(IntCC::SignedLessThanOrEqual, st, 0);
                let z = self.iconst(0);
                self.fail_if(bad, Fail::Step, &[st, z, z]);
                self.counted_loop(Bound::Value(i0), Bound::Value(e), Bound::Value(st), &mut |s, i| {
                    s.b.def_var(s.vars[var.0 as usize], i);
                    s.stmts(body)
                })?;
            }
            Stmt::If { cond, then_body, else_body } => {
                let (c, _) = self.expr(cond)?;
                let (tb, eb, join) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
                self.b.ins().brif(c, tb, &[], eb, &[]);
                for (blk, body) in [(tb, then_body), (eb, else_body)] {
                    self.b.switch_to_block(blk);
                    self.b.seal_block(blk);
                    self.stmts(body)?;
                    self.b.ins().jump(join, &[]);
                }
                self.b.switch_to_block(join);
                self.b.seal_block(join);
            }
            s if crate::cpu::sequential_noop(s) => {}
            // The producer warp's statements take effect in program order (see `Stmt::Producer`).
            Stmt::Producer { body } => self.stmts(body)?,
            // Turns only schedule the warpgroups' issue; the block runs as one (see `Stmt::InTurn`).
            Stmt::InTurn { body } => self.stmts(body)?,
            // The other warpgroups only skip the body; its tiles are the running warpgroups' alone (validated).
            Stmt::FirstWarpgroups { body, .. } => self.stmts(body)?,
            Stmt::Threads { body } if body.iter().any(rt::is_warp_stmt) => self.lockstep(body)?,
            Stmt::Threads { body } => {
                let t = self.b.declare_var(types::I64);
                let n = self.iconst(self.k.threads as i64);
                self.counted_loop(Bound::Const(0), Bound::Value(n), Bound::Const(1), &mut |s, i| {
                    s.b.def_var(t, i);
                    let outer = s.thread.replace(t);
                    s.stmts(body)?;
                    s.thread = outer;
                    Ok(())
                })?;
            }
            _ => unreachable!("not a control statement"),
        }
        Ok(())
    }
}
