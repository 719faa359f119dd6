//! Asynchronous copies, mbarriers, TMA loads and stores and cluster statements, through the runtime.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    pub(super) fn sync_stmt(&mut self, s: &Stmt) -> Result<(), JitError> {
        match s {
            Stmt::CopyAsync { dst, src } => {
                let i = self.shared_index(dst)?;
                let v = self.global_view(src)?;
                self.host_tile(s, &[i, v[0], v[1], v[2], v[3]]);
            }
            // Barrier state lives in the frame; the runtime checks it as the interpreter does.
            Stmt::MbarInit { .. } => self.host_tile(s, &[]),
            Stmt::MbarArriveExpectTx { bar, .. } | Stmt::MbarArrive { bar } => {
                let i = self.int(&bar.index)?;
                self.host_tile(s, &[i]);
            }
            Stmt::MbarWait { bar, parity, .. } => {
                let p = self.int(parity)?;
                let i = self.int(&bar.index)?;
                self.host_tile(s, &[i, p]);
            }
            Stmt::TmaLoad(t) => {
                // The interpreter's order: shared tile index, coordinates, barrier index.
                let mut args = vec![self.shared_index(&t.dst)?];
                for c in &t.coords {
                    args.push(self.int(c)?);
                }
                args.push(self.int(&t.bar.index)?);
                if let Some(m) = &t.multicast {
                    args.push(self.int(m)?);
                }
                self.host_tile(s, &args);
            }
            // Cluster statements (`cpu::cluster`): the runtime reaches the peers' frames.
            Stmt::MbarArriveCluster { bar, cta } => {
                let i = self.int(&bar.index)?;
                let c = self.int(cta)?;
                self.host_tile(s, &[i, c]);
            }
            Stmt::ClusterSync => self.host_tile(s, &[]),
            Stmt::TmaStore(t) => {
                // The interpreter's order: shared tile index, coordinates.
                let mut args = vec![self.shared_index(&t.src)?];
                for c in &t.coords {
                    args.push(self.int(c)?);
                }
                self.host_tile(s, &args);
            }
            // The runtime retires the older stores (reads their sources) here.
            Stmt::TmaStoreWait { .. } => self.host_tile(s, &[]),
            _ => unreachable!("not a copy or barrier statement"),
        }
        Ok(())
    }
}
