//! `cp.async` copies, TMA box copies and mbarriers on the CPU (see [`k3k_ir::tma`]): copies complete when issued; barriers are
//! tracked and checked, since a broken protocol (a wait no arrival or copy can complete, more arrivals than
//! the count, more bytes than expected) would hang or corrupt the GPU run. Shared with the JIT's runtime.

use super::{Block, InterpError};
use crate::cpu::cluster::{Cond, Sched, Shared, clusters, run_cluster, stop_error};
use k3k_ir::*;

/// A CTA's place in its cluster (see `cpu::cluster`).
pub(super) struct ClusterLink<'a> {
    sched: *const Sched,
    rank: usize,
    /// The cluster's CTAs by rank (this one included); only the running CTA touches any of them.
    peers: *const *mut Block<'a>,
    n: usize,
    /// The cluster's index (for errors).
    id: [u32; 3],
}

/// Run a kernel with a cluster shape: the clusters one after another, the CTAs of each concurrently (one
/// thread each, scheduled by `cpu::cluster`).
pub(super) fn run_clusters<'a>(
    k: &'a Kernel,
    grid: [u32; 3],
    tensors: &mut [HostTensor],
    new_block: impl Fn([u32; 3]) -> Block<'a>,
) -> Result<(), InterpError> {
    let n = k.cluster_size() as usize;
    let tens = Shared((tensors.as_mut_ptr(), tensors.len()));
    for (id, ids) in clusters(k, grid)? {
        let sched = Sched::new(n);
        let mut blocks: Vec<Block<'a>> = ids.into_iter().map(&new_block).collect();
        let ptrs: Vec<*mut Block<'a>> = blocks.iter_mut().map(|b| b as *mut Block<'a>).collect();
        for (r, b) in blocks.iter_mut().enumerate() {
            b.cl = Some(ClusterLink { sched: &sched, rank: r, peers: ptrs.as_ptr(), n, id });
        }
        let ptrs = &Shared(ptrs);
        let tens = &tens;
        run_cluster(k, id, &sched, |r| {
            // SAFETY: CTA `r`'s thread is the only one to hold its block mutably, and touches the
            // tensors and its peers only while it runs (one CTA at a time, see `cpu::cluster`).
            let p: *mut Block<'a> = ptrs.get()[r];
            let b = unsafe { &mut *p };
            let (tp, tn) = *tens.get();
            let ts = unsafe { std::slice::from_raw_parts_mut(tp, tn) };
            b.body(&k.body, ts)?;
            b.retire_bulk_stores(0, ts)
        })?;
        drop(blocks);
    }
    Ok(())
}

/// One barrier: arrival count (0: not initialized), pending arrivals, transaction count, completed phases.
pub(crate) type MbarState = [i64; 4];

/// What happens to a barrier.
#[derive(Clone, Copy, Debug)]
pub(crate) enum MbarOp {
    Init(u32),
    /// `n` arrivals, after adding `tx` bytes to the transaction count.
    Arrive {
        n: i64,
        tx: i64,
    },
    /// A copy delivered its bytes.
    Complete(i64),
    Wait(i64),
}

/// Apply one operation; `Err` says what went wrong (the GPU would hang or corrupt the next phase).
pub(crate) fn mbar_step(st: &mut MbarState, op: MbarOp) -> Result<(), String> {
    if let MbarOp::Init(c) = op {
        *st = [c as i64, c as i64, 0, 0];
        return Ok(());
    }
    if st[0] == 0 {
        return Err("used before mbar_init".into());
    }
    // With every arrival in, the phase may not have received more bytes than announced (`delivered` says by
    // what); it completes when the bytes are in too.
    let settle = |st: &mut MbarState, delivered: &str| {
        if st[1] == 0 && st[2] < 0 {
            return Err(format!("phase {}: {delivered} {} bytes more than expect_tx announced", st[3], -st[2]));
        }
        if st[1] == 0 && st[2] == 0 {
            st[3] += 1;
            st[1] = st[0];
        }
        Ok(())
    };
    match op {
        MbarOp::Init(_) => unreachable!(),
        MbarOp::Arrive { n, tx } => {
            st[2] += tx;
            if st[1] < n {
                return Err(format!(
                    "{n} arrivals with {} pending in phase {} (arrival count {}): more arrivals than the count",
                    st[1], st[3], st[0]
                ));
            }
            st[1] -= n;
            settle(st, "copies delivered")?;
        }
        MbarOp::Complete(bytes) => {
            st[2] -= bytes;
            settle(st, &format!("a copy of {bytes} bytes delivers"))?;
        }
        MbarOp::Wait(parity) => {
            if !(0..=1).contains(&parity) {
                return Err(format!("wait parity {parity} is not 0 or 1"));
            }
            if st[3] & 1 == parity {
                return Err(format!(
                    "wait for parity {parity} would hang: phase {} is incomplete ({} of {} arrivals and {} \
                     transaction bytes outstanding)",
                    st[3], st[1], st[0], st[2]
                ));
            }
        }
    }
    Ok(())
}

/// The error of a barrier operation.
pub(crate) fn mbar_error(k: &Kernel, block: [u32; 3], bar: MbarId, index: i64, what: String) -> InterpError {
    InterpError::Mbarrier { kernel: k.name.clone(), block, bar: k.mbarriers[bar.0 as usize].name.clone(), index, what }
}

/// Check a barrier index; its position among the declaration's barriers.
pub(crate) fn mbar_index(k: &Kernel, block: [u32; 3], bar: MbarId, index: i64) -> Result<usize, InterpError> {
    let count = k.mbarriers[bar.0 as usize].count as i64;
    if index < 0 || index >= count {
        return Err(mbar_error(k, block, bar, index, format!("index outside 0..{count}")));
    }
    Ok(index as usize)
}

/// The CTA ranks of a multicast mask, checked against a cluster of `n` CTAs.
pub(crate) fn multicast_ctas(k: &Kernel, block: [u32; 3], mask: i64, n: usize) -> Result<Vec<i64>, InterpError> {
    if mask <= 0 || mask >= 1i64 << n {
        return Err(InterpError::Arith {
            kernel: k.name.clone(),
            what: format!("block {block:?}: multicast mask {mask:#x} names no CTA or CTAs outside the cluster of {n}"),
        });
    }
    Ok((0..n as i64).filter(|r| mask >> r & 1 == 1).collect())
}

/// What a TMA load of map `m` at `coords` writes into `dst` (a window of buffer `d` whose tile starts at element
/// `base`): (element of the buffer, value) in box order, 0 outside the tensor `src`. Shared by the interpreter and
/// the JIT's host call.
pub(crate) fn tma_load_values(
    src: &HostTensor,
    m: &TensorMapDecl,
    coords: &[i64],
    d: &SharedDecl,
    dst: &SharedRef,
    base: usize,
) -> Result<Vec<(usize, f64)>, InterpError> {
    let mut vals = Vec::with_capacity(m.box_elems());
    tma_box(&src.shape, &m.box_dims, coords, |r, c, flat| {
        let v = match flat {
            Some(i) if d.dtype.is_int() => src.get_i64(i) as f64,
            Some(i) => src.get_f32(i) as f64,
            None => 0.0,
        };
        vals.push((base + (dst.row0 as usize + r) * d.cols as usize + c, v));
        Ok(())
    })?;
    Ok(vals)
}

/// The elements of one box: calls `f(row, col, flat)` in row-major box order, where (row, col) is the element's
/// place in the destination window (outer box dims flattened into rows) and `flat` its flat index in the
/// tensor (`None` outside it: the copy engine fills zero). `shape` is the tensor's (outermost first).
pub(crate) fn tma_box(
    shape: &[usize],
    box_dims: &[u32],
    coords: &[i64],
    mut f: impl FnMut(usize, usize, Option<usize>) -> Result<(), InterpError>,
) -> Result<(), InterpError> {
    let rank = box_dims.len();
    // Map dim i (innermost first) is tensor dim rank-1-i; its element stride.
    let dims: Vec<i64> = (0..rank).map(|i| shape[rank - 1 - i] as i64).collect();
    let mut strides = vec![1i64; rank];
    for i in 1..rank {
        strides[i] = strides[i - 1] * dims[i - 1];
    }
    let rows: usize = box_dims[1..].iter().map(|&d| d as usize).product();
    let cols = box_dims[0] as usize;
    for row in 0..rows {
        // The outer box position of this row.
        let mut rest = row;
        let mut base = Some(0i64);
        for i in 1..rank {
            let b = box_dims[i] as usize;
            let x = coords[i] + (rest % b) as i64;
            rest /= b;
            base = base.filter(|_| (0..dims[i]).contains(&x)).map(|o| o + x * strides[i]);
        }
        for col in 0..cols {
            let x = coords[0] + col as i64;
            let flat = base.filter(|_| (0..dims[0]).contains(&x)).map(|o| (o + x) as usize);
            f(row, col, flat)?;
        }
    }
    Ok(())
}

/// A bulk store's box written into `dst` (elements outside the tensor skipped), element (row, col) of the box
/// read by `read`: the copy both CPU backends carry out when they retire the store.
pub(crate) fn store_box(
    dst: &mut HostTensor,
    box_dims: &[u32],
    coords: &[i64],
    int: bool,
    read: impl Fn(usize, usize) -> f64,
) -> Result<(), InterpError> {
    let shape = dst.shape.clone();
    tma_box(&shape, box_dims, coords, |r, c, flat| {
        if let Some(i) = flat {
            let v = read(r, c);
            if int { dst.set_i64(i, v as i64) } else { dst.set_f32(i, v as f32) }
        }
        Ok(())
    })
}

impl<'a> Block<'a> {
    /// Carry out the source reads (and the copies) of all but the `keep` most recent bulk stores.
    pub(super) fn retire_bulk_stores(&mut self, keep: usize, tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        let n = self.bulk_stores.len().saturating_sub(keep);
        for (t, base, coords) in self.bulk_stores.drain(..n).collect::<Vec<_>>() {
            let m = &self.k.tensor_maps[t.map.0 as usize];
            let d = &self.k.shared[t.src.buf.0 as usize];
            let shared = &self.shared[t.src.buf.0 as usize];
            store_box(&mut tensors[m.tensor.0 as usize], &m.box_dims, &coords, d.dtype.is_int(), |r, c| {
                shared.get_f64(base + (t.src.row0 as usize + r) * d.cols as usize + c)
            })?;
        }
        Ok(())
    }

    /// Run `f` on cluster CTA `cta` (this block itself for its own rank, or without a cluster for rank 0).
    fn with_cta<R>(
        &mut self,
        cta: i64,
        f: impl FnOnce(&mut Block<'a>) -> Result<R, InterpError>,
    ) -> Result<R, InterpError> {
        let (own, n) = self.cl.as_ref().map_or((0, 1), |c| (c.rank, c.n));
        if cta < 0 || cta >= n as i64 {
            return Err(InterpError::Arith {
                kernel: self.k.name.clone(),
                what: format!("block {:?}: cluster CTA rank {cta} outside 0..{n}", self.block),
            });
        }
        if cta as usize == own {
            return f(self);
        }
        let c = self.cl.as_ref().expect("n > 1");
        // SAFETY: the peer's thread sleeps while this CTA runs (see `cpu::cluster`); its block outlives the run.
        let peer = unsafe { &mut **c.peers.add(cta as usize) };
        f(peer)
    }

    fn mbar(&mut self, r: &MbarRef, op: MbarOp, tensors: &[HostTensor]) -> Result<(), InterpError> {
        let index = self.int(&r.index, tensors)?;
        self.mbar_at(r.bar, index, op)
    }

    fn mbar_at(&mut self, bar: MbarId, index: i64, op: MbarOp) -> Result<(), InterpError> {
        let i = mbar_index(self.k, self.block, bar, index)?;
        mbar_step(&mut self.mbars[bar.0 as usize][i], op).map_err(|w| mbar_error(self.k, self.block, bar, index, w))
    }

    /// Execute a barrier, `cp.async` copy or TMA statement.
    pub(super) fn tma_stmt(&mut self, s: &Stmt, tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        let k = self.k;
        match s {
            Stmt::MbarInit { bar, count } => {
                for st in self.mbars[bar.0 as usize].iter_mut() {
                    mbar_step(st, MbarOp::Init(*count)).expect("init cannot fail");
                }
            }
            Stmt::MbarArriveExpectTx { bar, bytes } => {
                self.mbar(bar, MbarOp::Arrive { n: 1, tx: *bytes as i64 }, tensors)?
            }
            Stmt::MbarArrive { bar } => self.mbar(bar, MbarOp::Arrive { n: k.threads as i64, tx: 0 }, tensors)?,
            Stmt::MbarWait { bar, parity, .. } => {
                let p = self.int(parity, tensors)?;
                let index = self.int(&bar.index, tensors)?;
                if let Some(cl) = &self.cl {
                    // In a cluster, peers may still complete the phase: block until one does (or deadlock).
                    let i = mbar_index(k, self.block, bar.bar, index)?;
                    let st: *const MbarState = &self.mbars[bar.bar.0 as usize][i];
                    let what = format!("mbarrier `{}`[{index}]", k.mbarriers[bar.bar.0 as usize].name);
                    if (0..=1).contains(&p) && self.mbars[bar.bar.0 as usize][i][0] != 0 {
                        unsafe { &*cl.sched }
                            .wait(cl.rank, Cond::Mbar { st, parity: p, what })
                            .map_err(|s| stop_error(k, cl.id, s))?;
                    }
                }
                self.mbar_at(bar.bar, index, MbarOp::Wait(p))?
            }
            Stmt::MbarArriveCluster { bar, cta } => {
                let index = self.int(&bar.index, tensors)?;
                let cta = self.int(cta, tensors)?;
                let n = k.warps() as i64;
                self.with_cta(cta, |b| b.mbar_at(bar.bar, index, MbarOp::Arrive { n, tx: 0 }))?;
            }
            Stmt::ClusterSync => {
                if let Some(cl) = &self.cl {
                    unsafe { &*cl.sched }.cluster_sync(cl.rank).map_err(|s| stop_error(k, cl.id, s))?;
                }
            }
            Stmt::TmaLoad(t) => {
                let m = &k.tensor_maps[t.map.0 as usize];
                let base = self.shared_base(&t.dst, tensors)?;
                let coords = t.coords.iter().map(|c| self.int(c, tensors)).collect::<Result<Vec<_>, _>>()?;
                let bar_index = self.int(&t.bar.index, tensors)?;
                let ctas = match &t.multicast {
                    None => vec![self.cl.as_ref().map_or(0, |c| c.rank as i64)],
                    Some(mask) => {
                        let mask = self.int(mask, tensors)?;
                        multicast_ctas(k, self.block, mask, self.cl.as_ref().map_or(1, |c| c.n))?
                    }
                };
                let d = &k.shared[t.dst.buf.0 as usize];
                let src = &tensors[m.tensor.0 as usize];
                let vals = tma_load_values(src, m, &coords, d, &t.dst, base)?;
                let bytes = d.dtype.storage_bytes(m.box_elems()) as i64;
                for cta in ctas {
                    self.with_cta(cta, |b| {
                        b.claim(t.dst.buf);
                        let shared = &mut b.shared[t.dst.buf.0 as usize];
                        for &(at, v) in &vals {
                            shared.set_f64(d.dtype, at, v);
                        }
                        b.mbar_at(t.bar.bar, bar_index, MbarOp::Complete(bytes))
                    })?;
                }
            }
            // The copy engine may read the source at any time before the wait that retires the store: the
            // interpreter (and the JIT) read it at the latest, at that wait (or at the block's end), so a program
            // that rewrites a source too early stores the new contents and fails its check.
            Stmt::TmaStore(t) => {
                let base = self.shared_base(&t.src, tensors)?;
                let coords = t.coords.iter().map(|c| self.int(c, tensors)).collect::<Result<Vec<_>, _>>()?;
                self.bulk_stores.push(((**t).clone(), base, coords));
            }
            Stmt::TmaStoreWait { pending } => self.retire_bulk_stores(*pending as usize, tensors)?,
            Stmt::CopyAsync { dst, src } => {
                let base = self.shared_base(dst, tensors)?;
                let d = &k.shared[dst.buf.0 as usize];
                let (off, stride, rows, cols) = self.view(src, tensors)?;
                self.claim(dst.buf);
                for r in 0..dst.rows as usize {
                    for c in 0..dst.cols as usize {
                        let v = if (r as i64) < rows && (c as i64) < cols {
                            let at = off + r as i64 * stride + c as i64;
                            self.global_read("async copy", src.tensor, at, d.dtype.is_int(), tensors)?
                        } else {
                            0.0
                        };
                        let at = base + (dst.row0 as usize + r) * d.cols as usize + dst.col0 as usize + c;
                        self.shared[dst.buf.0 as usize].set_f64(d.dtype, at, v);
                    }
                }
            }
            _ => unreachable!("not a barrier or copy statement"),
        }
        Ok(())
    }
}
