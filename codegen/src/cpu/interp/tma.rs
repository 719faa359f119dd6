//! TMA box copies and mbarriers on the CPU (see [`k3k_ir::tma`]): copies complete when issued; barriers are
//! tracked and checked, since a broken protocol (a wait no arrival or copy can complete, more arrivals than
//! the count, more bytes than expected) would hang or corrupt the GPU run. Shared with the JIT's runtime.

use super::{Block, InterpError};
use k3k_ir::*;

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
    let complete = |st: &mut MbarState| {
        if st[1] == 0 && st[2] == 0 {
            st[3] += 1;
            st[1] = st[0];
        }
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
            if st[1] == 0 && st[2] < 0 {
                return Err(format!(
                    "phase {}: copies delivered {} bytes more than expect_tx announced",
                    st[3], -st[2]
                ));
            }
            complete(st);
        }
        MbarOp::Complete(bytes) => {
            st[2] -= bytes;
            if st[1] == 0 && st[2] < 0 {
                return Err(format!(
                    "phase {}: a copy of {bytes} bytes delivers {} bytes more than expect_tx announced",
                    st[3], -st[2]
                ));
            }
            complete(st);
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

impl Block<'_> {
    fn mbar(&mut self, r: &MbarRef, op: MbarOp, tensors: &[HostTensor]) -> Result<(), InterpError> {
        let index = self.int(&r.index, tensors)?;
        self.mbar_at(r.bar, index, op)
    }

    fn mbar_at(&mut self, bar: MbarId, index: i64, op: MbarOp) -> Result<(), InterpError> {
        let i = mbar_index(self.k, self.block, bar, index)?;
        mbar_step(&mut self.mbars[bar.0 as usize][i], op).map_err(|w| mbar_error(self.k, self.block, bar, index, w))
    }

    /// Execute a barrier or TMA statement.
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
                self.mbar(bar, MbarOp::Wait(p), tensors)?
            }
            Stmt::TmaLoad(t) => {
                let m = &k.tensor_maps[t.map.0 as usize];
                let base = self.shared_base(&t.dst, tensors)?;
                let coords = t.coords.iter().map(|c| self.int(c, tensors)).collect::<Result<Vec<_>, _>>()?;
                let bar_index = self.int(&t.bar.index, tensors)?;
                let d = &k.shared[t.dst.buf.0 as usize];
                self.claim(t.dst.buf);
                let src = &tensors[m.tensor.0 as usize];
                let shared = &mut self.shared[t.dst.buf.0 as usize];
                tma_box(&src.shape, &m.box_dims, &coords, |r, c, flat| {
                    let v = match flat {
                        Some(i) if d.dtype.is_int() => src.get_i64(i) as f64,
                        Some(i) => src.get_f32(i) as f64,
                        None => 0.0,
                    };
                    shared.set_f64(d.dtype, base + (t.dst.row0 as usize + r) * d.cols as usize + c, v);
                    Ok(())
                })?;
                let bytes = d.dtype.storage_bytes(m.box_elems()) as i64;
                self.mbar_at(t.bar.bar, bar_index, MbarOp::Complete(bytes))?;
            }
            _ => unreachable!("not a TMA statement"),
        }
        Ok(())
    }
}
