//! Barriers and asynchronous copies: block and cluster barriers, `cp.async` copies and their commit and
//! wait, mbarriers and the TMA's bulk loads and stores.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn sync_stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s {
            Stmt::Barrier | Stmt::AsyncCommit | Stmt::AsyncWait { .. } => {}
            Stmt::MbarInit { bar, count } => {
                let m = self
                    .k
                    .mbarriers
                    .get(bar.0 as usize)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no mbarrier declaration #{}", bar.0)))?;
                if *count == 0 || *count >= 1 << 20 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!("mbarrier `{}`: arrival count {count} outside 1..2^20", m.name),
                    ));
                }
            }
            Stmt::MbarArriveExpectTx { bar, bytes } => {
                self.mbar_ref(bar)?;
                if *bytes >= 1 << 20 {
                    return Err(self.err(IrErrorKind::Shape, format!("expect_tx of {bytes} bytes: at most 2^20 - 1")));
                }
            }
            Stmt::MbarArrive { bar } => self.mbar_ref(bar)?,
            Stmt::MbarWait { bar, parity, .. } => {
                self.mbar_ref(bar)?;
                self.scalar(parity, ScalarTy::Int, "mbarrier wait parity")?;
            }
            Stmt::TmaLoad(t) => {
                self.tma_load(t)?;
                if let Some(mask) = &t.multicast {
                    self.scalar(mask, ScalarTy::Int, "tma multicast mask")?;
                    self.cluster_mask(mask)?;
                }
            }
            Stmt::TmaStore(t) => self.tma_store(t)?,
            Stmt::TmaStoreWait { .. } => {}
            Stmt::MbarArriveCluster { bar, cta } => {
                self.mbar_ref(bar)?;
                self.scalar(cta, ScalarTy::Int, "cluster CTA rank")?;
                let n = self.k.cluster_size() as i64;
                if let Some(c) = cta.as_const_int()
                    && (c < 0 || c >= n)
                {
                    return Err(self.err(IrErrorKind::Shape, format!("cluster CTA rank {c} outside 0..{n}")));
                }
            }
            Stmt::ClusterSync | Stmt::GridDep(_) => {}
            Stmt::CopyAsync { dst, src } => {
                let d = self.shared_ref(dst)?;
                let t = self.global_view(src)?;
                if t.dtype != d.dtype {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!(
                            "async copy from `{}` ({}) into shared `{}` ({}) cannot convert",
                            t.name, t.dtype, d.name, d.dtype
                        ),
                    ));
                }
                if dst.cols % src.vec != 0 || dst.col0 % src.vec != 0 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!("window cols {} not a multiple of vec {}", dst.cols, src.vec),
                    ));
                }
                // Every access lands on a multiple of its size only if the shared rows are.
                if d.dtype.storage_bytes(d.cols as usize) % d.dtype.storage_bytes(src.vec as usize) != 0 {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "shared `{}` rows ({} elements) are not a multiple of the copy's vec {}",
                            d.name, d.cols, src.vec
                        ),
                    ));
                }
            }
            _ => unreachable!("not a barrier or copy statement"),
        }
        Ok(())
    }
}
