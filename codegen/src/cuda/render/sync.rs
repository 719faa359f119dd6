//! Barriers and copies: block and cluster barriers, `cp.async` copies with their commit and wait, mbarriers and
//! the TMA's bulk loads and stores.

use super::*;

impl<'a> Renderer<'a> {
    /// A bulk tensor copy's CUDA operands: the shared address of window `r`'s first row, and the box
    /// coordinates as ints.
    fn tma_operands(&self, r: &SharedRef, coords: &[Expr]) -> (String, String) {
        let row = format!("{} + {} * {}::ROW_BYTES", self.shared_ptr(r), r.row0, self.shared_layout(r.buf));
        let coords: Vec<String> = coords.iter().map(|c| format!("(int)({})", self.e(c, Ctx::Scalar))).collect();
        (row, coords.join(", "))
    }

    pub(super) fn sync_stmt(&mut self, s: &Stmt) {
        let k = self.k;
        match s {
            // With a producer warp, a barrier inside loops or conditionals is the consumers' (named barrier 1);
            // at the top level every thread meets (see `Stmt::Producer`).
            Stmt::Barrier if k.producer_warp && self.nest > 0 => self.line("k3k::barrier();"),
            Stmt::Barrier => self.line("__syncthreads();"),
            Stmt::AsyncCommit => self.line("k3k::async_commit();"),
            Stmt::MbarInit { bar, count } => {
                let n = k.mbarriers[bar.0 as usize].count;
                self.line(&format!("k3k::mbar_init(mb{}, {n}, {count}u);", bar.0));
            }
            Stmt::MbarArriveExpectTx { bar, bytes } => {
                let line = format!("k3k::mbar_arrive_expect_tx({}, {bytes}u);", self.mbar_ptr(bar));
                self.line(&line);
            }
            Stmt::MbarArrive { bar } => {
                let line = format!("k3k::mbar_arrive({});", self.mbar_ptr(bar));
                self.line(&line);
            }
            Stmt::MbarWait { bar, parity, elected } => {
                // CTA scope in a cluster too, as CUTLASS's pipelines: a phase completes by copy transactions (a
                // peer's multicast bytes included, visible to the waiters) or by arrivals that only say a slot's
                // reads are done (see `mbar_arrive_cluster`).
                let f = if *elected { "mbar_wait_elected" } else { "mbar_wait" };
                let line = format!("k3k::{f}({}, (int)({}));", self.mbar_ptr(bar), self.e(parity, Ctx::Scalar));
                self.line(&line);
            }
            Stmt::TmaLoad(t) => {
                let (dst, coords) = self.tma_operands(&t.dst, &t.coords);
                let (f, mask) = match &t.multicast {
                    Some(m) => ("tma_load_mc", format!(", (unsigned short)({})", self.e(m, Ctx::Scalar))),
                    None => ("tma_load", String::new()),
                };
                let line = format!("k3k::{f}({dst}, &tm{}, {}{mask}, {coords});", t.map.0, self.mbar_ptr(&t.bar));
                self.line(&line);
            }
            Stmt::TmaStore(t) => {
                let (src, coords) = self.tma_operands(&t.src, &t.coords);
                self.line("k3k::tma_store_fence();");
                self.line(&format!("k3k::tma_store({src}, &tm{}, {coords});", t.map.0));
            }
            Stmt::TmaStoreWait { pending } => self.line(&format!("k3k::tma_store_wait<{pending}>();")),
            // Without a cluster the block is rank 0 of a one-CTA cluster (the only rank the validator and the
            // CPU backends accept): a plain arrival on its own barrier, one per warp.
            Stmt::MbarArriveCluster { bar, .. } if k.cluster_size() == 1 => {
                let line = format!("k3k::mbar_arrive_warp({});", self.mbar_ptr(bar));
                self.line(&line);
            }
            Stmt::MbarArriveCluster { bar, cta } => {
                let line = format!(
                    "k3k::mbar_arrive_cluster({}, (unsigned)({}));",
                    self.mbar_ptr(bar),
                    self.e(cta, Ctx::Scalar)
                );
                self.line(&line);
            }
            Stmt::ClusterSync => self.line("k3k::cluster_sync();"),
            // Programmatic dependent launch (sm_90): the memory clobber keeps the compiler from moving loads of
            // what the previous grid writes above the wait.
            Stmt::GridDep(GridDep::Wait) => self.line("asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");"),
            Stmt::GridDep(GridDep::LaunchDependents) => {
                self.line("asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");")
            }
            Stmt::AsyncWait { pending } => self.line(&format!("k3k::async_wait<{pending}>();")),
            Stmt::CopyAsync { dst, src } => {
                let t = &k.tensors[src.tensor.0 as usize];
                let line = format!(
                    "k3k::copy_async<{}, {}, {}, {}, {}, {}>({}, {}, {}, {});",
                    c_type(t.dtype),
                    src.vec,
                    k.threads,
                    self.shared_layout(dst.buf),
                    dst.rows,
                    dst.cols,
                    self.shared_ptr(dst),
                    dst.row0,
                    dst.col0,
                    self.view_args(src)
                );
                self.line(&line);
            }
            _ => unreachable!("not a barrier or copy statement"),
        }
    }
}
