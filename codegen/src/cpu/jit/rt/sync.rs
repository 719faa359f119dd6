//! The runtime's copies and barriers: `cp.async` copies, mbarriers, cluster barriers and the TMA's bulk loads
//! and stores.

use super::*;

/// Run a barrier or copy statement for the current block (see [`host_tile`]).
/// SAFETY: as `tile_stmt`.
pub(super) unsafe fn sync_stmt(ctx: &mut Ctx, s: &Stmt, arg: &dyn Fn(usize) -> i64) -> Result<(), InterpError> {
    let (k, f, block, hosts) = unsafe { parts(ctx) };
    let check = bounds(k, block);
    unsafe {
        match s {
            Stmt::CopyAsync { dst, src } => {
                let base = f.shared_base(dst, arg(0));
                let d = &k.shared[dst.buf.0 as usize];
                let (off, stride, rows, cols) = (arg(1), arg(2), arg(3), arg(4));
                for r in 0..dst.rows as usize {
                    for c in 0..dst.cols as usize {
                        let v = if (r as i64) < rows && (c as i64) < cols {
                            let i = check("async copy", src.tensor, off + r as i64 * stride + c as i64, hosts)?;
                            let t = &hosts[src.tensor.0 as usize];
                            if d.dtype.is_int() { t.get_i64(i) as f64 } else { t.get_f32(i) as f64 }
                        } else {
                            0.0
                        };
                        let at = base + (dst.row0 as usize + r) * d.cols as usize + dst.col0 as usize + c;
                        f.set_shared(dst.buf, at, v);
                    }
                }
            }
            Stmt::MbarInit { bar, count } => {
                for i in 0..k.mbarriers[bar.0 as usize].count as usize {
                    mbar_step(&mut *f.mbar(*bar, i), MbarOp::Init(*count)).expect("init cannot fail");
                }
            }
            Stmt::MbarArriveExpectTx { bar, bytes } => {
                f.mbar_op(block, bar.bar, arg(0), MbarOp::Arrive { n: 1, tx: *bytes as i64 })?
            }
            Stmt::MbarArrive { bar } => {
                f.mbar_op(block, bar.bar, arg(0), MbarOp::Arrive { n: k.threads as i64, tx: 0 })?
            }
            Stmt::MbarWait { bar, .. } => {
                let (index, p) = (arg(0), arg(1));
                if !ctx.cluster.is_null() {
                    // In a cluster, peers may still complete the phase: block until one does (or deadlock).
                    let cl = &*ctx.cluster;
                    let i = mbar_index(k, block, bar.bar, index)?;
                    let st = f.mbar(bar.bar, i) as *const MbarState;
                    if (0..=1).contains(&p) && (*st)[0] != 0 {
                        let what = format!("mbarrier `{}`[{index}]", k.mbarriers[bar.bar.0 as usize].name);
                        (*cl.sched)
                            .wait(cluster_rank(k, block), Cond::Mbar { st, parity: p, what })
                            .map_err(|s| stop_error(k, cl.id, s))?;
                    }
                }
                f.mbar_op(block, bar.bar, index, MbarOp::Wait(p))?
            }
            Stmt::MbarArriveCluster { bar, .. } => {
                let pf = cta_frame(ctx, &f, block, arg(1))?;
                pf.mbar_op(block, bar.bar, arg(0), MbarOp::Arrive { n: k.warps() as i64, tx: 0 })?
            }
            Stmt::ClusterSync => {
                if !ctx.cluster.is_null() {
                    let cl = &*ctx.cluster;
                    (*cl.sched).cluster_sync(cluster_rank(k, block)).map_err(|s| stop_error(k, cl.id, s))?;
                }
            }
            Stmt::TmaLoad(t) => {
                let m = &k.tensor_maps[t.map.0 as usize];
                let base = f.shared_base(&t.dst, arg(0));
                let rank = t.coords.len();
                let coords: Vec<i64> = (0..rank).map(|i| arg(1 + i)).collect();
                let d = &k.shared[t.dst.buf.0 as usize];
                let src = &hosts[m.tensor.0 as usize];
                let ctas = match &t.multicast {
                    None => vec![if ctx.cluster.is_null() { 0 } else { cluster_rank(k, block) as i64 }],
                    Some(_) => {
                        let n = if ctx.cluster.is_null() { 1 } else { (*ctx.cluster).n };
                        multicast_ctas(k, block, arg(2 + rank), n)?
                    }
                };
                let vals = tma_load_values(src, m, &coords, d, &t.dst, base)?;
                let bytes = d.dtype.storage_bytes(m.box_elems()) as i64;
                for cta in ctas {
                    let pf = cta_frame(ctx, &f, block, cta)?;
                    for &(at, v) in &vals {
                        pf.set_shared(t.dst.buf, at, v);
                    }
                    pf.mbar_op(block, t.bar.bar, arg(1 + rank), MbarOp::Complete(bytes))?;
                }
            }
            // As the interpreter: the source is read at the wait that retires the store (or the block's end).
            Stmt::TmaStore(t) => {
                let base = f.shared_base(&t.src, arg(0));
                let coords: Vec<i64> = (0..t.coords.len()).map(|i| arg(1 + i)).collect();
                ctx.bulk_stores.push(PendingStore { store: (**t).clone(), base, coords });
            }
            Stmt::TmaStoreWait { pending } => retire_bulk_stores(ctx, *pending as usize)?,
            _ => unreachable!("not a barrier or copy statement"),
        }
    }
    Ok(())
}
