//! The reference semantics of the IR: a straightforward interpreter over logical tiles.
//!
//! Blocks run one after another; inside a block each statement runs to completion for the whole block, so
//! asynchronous copies are immediate and barriers are no-ops. Tiles hold logical row-major values (a bf16 tile
//! holds f32 values rounded to bf16, as its registers would). A [`Stmt::Threads`] region runs its body once
//! per thread, threads `0..threads` one after another, each with its own variables and arrays; this is more
//! forgiving than a GPU (a thread sees what earlier threads of the same region wrote), so programs must still
//! put barriers where the IR documentation asks for them. Every memory access is bounds-checked: an index
//! outside a tensor, a shared buffer or an array is an error here, where a GPU would read garbage or fault.
//!
//! Modules: `memory` (values, store conversions, shared buffers), `eval` (expressions), `tiles` (the
//! block-level tile statements) and `threads` (the statements of threads regions).

mod eval;
mod memory;
mod mx;
mod threads;
mod tiles;
mod tma;

use k3k_ir::*;
use memory::{SharedMem, V};
pub(crate) use memory::{V as Val, round_to, wrap_int};
pub(crate) use mx::fp4_gemv_sums;
pub(crate) use threads::{atomic as atomic_value, shared_wide_lane};
pub(crate) use tiles::{dequant_fp4_at, load_values, reduce, view_element};
pub(crate) use tma::{
    MbarOp, MbarState, mbar_error, mbar_index, mbar_step, multicast_ctas, store_box, tma_load_values,
};

/// Why a CPU run failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InterpError {
    #[error(transparent)]
    Ir(#[from] IrError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("kernel `{kernel}`, block {block:?}: {what} index {index} is outside tensor `{tensor}` of {len} elements")]
    OutOfBounds { kernel: String, block: [u32; 3], what: &'static str, tensor: String, index: i64, len: usize },
    #[error("kernel `{kernel}`, block {block:?}: shared `{buf}` tile index {index} is outside 0..{count}")]
    SharedIndex { kernel: String, block: [u32; 3], buf: String, index: i64, count: u32 },
    #[error(
        "kernel `{kernel}`, block {block:?}, thread {thread:?}: {what} of shared `{buf}` at [{index}][{row}, {col}] \
         is outside its {count} tiles of {rows}x{cols}"
    )]
    SharedElement {
        kernel: String,
        block: [u32; 3],
        thread: Option<u32>,
        what: &'static str,
        buf: String,
        index: i64,
        row: i64,
        col: i64,
        count: u32,
        rows: u32,
        cols: u32,
    },
    #[error(
        "kernel `{kernel}`, block {block:?}, thread {thread}: array `{array}` of {len} elements indexed at {index}"
    )]
    ArrayIndex { kernel: String, block: [u32; 3], thread: u32, array: String, index: i64, len: usize },
    #[error(
        "kernel `{kernel}`, block {block:?}, thread {thread}: {what} of tensor `{tensor}` at index {index} is not a \
         multiple of its {lanes} lanes (misaligned)"
    )]
    Misaligned {
        kernel: String,
        block: [u32; 3],
        thread: u32,
        what: &'static str,
        tensor: String,
        index: i64,
        lanes: u32,
    },
    /// A global view's offset or row stride breaks the alignment its `vec` promises (the GPU code moves `vec`
    /// elements per access, or groups of them, and would fault or tear).
    #[error(
        "kernel `{kernel}`, block {block:?}: view of tensor `{tensor}` promises {vec}-element alignment, but its \
         {what} is {value}"
    )]
    ViewAlignment { kernel: String, block: [u32; 3], tensor: String, what: &'static str, value: i64, vec: u32 },
    #[error("kernel `{kernel}`: {what}")]
    Arith { kernel: String, what: String },
    #[error("kernel `{kernel}`, block {block:?}: mbarrier `{bar}`[{index}]: {what}")]
    Mbarrier { kernel: String, block: [u32; 3], bar: String, index: i64, what: String },
    /// The CTAs of a thread-block cluster wait for each other for good (see `cpu::cluster`).
    #[error("kernel `{kernel}`, cluster {cluster:?}: {what}")]
    Deadlock { kernel: String, cluster: [u32; 3], what: String },
    /// A CTA of a cluster stopped because another one failed (never returned by a run: the other's error is).
    #[error("stopped: another CTA of the cluster failed")]
    ClusterAborted,
}

/// Options of a CPU run.
#[derive(Clone, Copy, Debug)]
pub struct InterpOptions {
    /// The value given to a `NUM_SMS` symbol (persistent grids).
    pub num_sms: i64,
}

impl Default for InterpOptions {
    fn default() -> Self {
        InterpOptions { num_sms: 4 }
    }
}

/// Run a kernel on host tensors (in kernel argument order); outputs are written in place.
pub fn run(
    k: &Kernel,
    tensors: &mut [HostTensor],
    scalars: &[(&str, SymValue)],
    opts: InterpOptions,
) -> Result<(), InterpError> {
    validate(k)?;
    let shapes: Vec<TensorShape<'_>> =
        tensors.iter().map(|t| TensorShape { dtype: t.dtype, shape: &t.shape }).collect();
    let syms = bind(k, &shapes, scalars, opts.num_sms)?;
    let Some(grid) = eval_grid(k, &syms)? else { return Ok(()) };
    let overlaps = k.shared_overlaps();
    let new_block = |block: [u32; 3]| Block {
        k,
        syms: &syms,
        block,
        grid,
        vars: vec![V::I(0); k.vars.len()],
        tiles: k.tiles.iter().map(|t| vec![0.0; (t.rows * t.cols) as usize]).collect(),
        vecs: k.vecs.iter().map(|v| vec![0.0; v.rows as usize]).collect(),
        shared: k.shared.iter().map(|s| SharedMem::new(s.dtype, (s.rows * s.cols * s.count) as usize)).collect(),
        arrays: vec![vec![]; k.arrays.len()],
        thread: None,
        overlaps: &overlaps,
        live: vec![false; k.shared.len()],
        mbars: k.mbarriers.iter().map(|m| vec![[0; 4]; m.count as usize]).collect(),
        bulk_stores: vec![],
        cl: None,
    };
    if k.cluster_size() > 1 {
        return tma::run_clusters(k, grid, tensors, new_block);
    }
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                let mut b = new_block([x, y, z]);
                b.body(&k.body, tensors)?;
                b.retire_bulk_stores(0, tensors)?;
            }
        }
    }
    Ok(())
}

/// The state of one block.
struct Block<'a> {
    k: &'a Kernel,
    syms: &'a [SymValue],
    block: [u32; 3],
    grid: [u32; 3],
    /// Variables (block-level ones, and inside a region the current thread's own).
    vars: Vec<V>,
    /// Register tiles, logical row-major (i32 tiles hold exact integers).
    tiles: Vec<Vec<f64>>,
    vecs: Vec<Vec<f32>>,
    shared: Vec<SharedMem>,
    /// The current thread's arrays (inside a region).
    arrays: Vec<Vec<V>>,
    /// The thread running, inside a threads region.
    thread: Option<u32>,
    /// Per shared buffer, the buffers sharing its storage ([`Kernel::shared_overlaps`]).
    overlaps: &'a [Vec<usize>],
    /// Per shared buffer with overlaps: written since an overlapping buffer was (its contents are its own).
    live: Vec<bool>,
    /// Per barrier declaration, its barriers' states.
    mbars: Vec<Vec<MbarState>>,
    /// Bulk tensor stores ([`Stmt::TmaStore`]) whose source reads no wait has retired yet, oldest first: the
    /// statement, the source's base element and the box coordinates.
    bulk_stores: Vec<(k3k_ir::TmaStore, usize, Vec<i64>)>,
    /// In a thread-block cluster: the scheduler, this CTA's rank and its peers (see `cpu::cluster`).
    cl: Option<tma::ClusterLink<'a>>,
}

impl<'a> Block<'a> {
    /// Before a write into shared buffer `buf`: the first write after an overlapping buffer's (or since the
    /// block began) poisons every buffer sharing its storage ([`k3k_ir::SharedAlias`]).
    fn claim(&mut self, buf: SharedId) {
        let b = buf.0 as usize;
        if self.live[b] || self.overlaps[b].is_empty() {
            return;
        }
        for &o in &self.overlaps[b] {
            self.shared[o].poison(self.k.shared[o].dtype);
            self.live[o] = false;
        }
        self.live[b] = true;
    }

    fn oob(&self, what: &'static str, t: TensorId, index: i64, len: usize) -> InterpError {
        InterpError::OutOfBounds {
            kernel: self.k.name.clone(),
            block: self.block,
            what,
            tensor: self.k.tensors[t.0 as usize].name.clone(),
            index,
            len,
        }
    }

    fn arith(&self, what: impl Into<String>) -> InterpError {
        InterpError::Arith { kernel: self.k.name.clone(), what: what.into() }
    }

    /// Check a flat global index against a tensor.
    fn global_index(
        &self,
        what: &'static str,
        t: TensorId,
        i: i64,
        tensors: &[HostTensor],
    ) -> Result<usize, InterpError> {
        let len = tensors[t.0 as usize].len();
        if i < 0 || i as usize >= len {
            return Err(self.oob(what, t, i, len));
        }
        Ok(i as usize)
    }

    /// Element `i` of tensor `t` (bounds-checked as [`Self::global_index`]) as f64: read as an integer when
    /// `int`, else as f32.
    fn global_read(
        &self,
        what: &'static str,
        t: TensorId,
        i: i64,
        int: bool,
        tensors: &[HostTensor],
    ) -> Result<f64, InterpError> {
        let i = self.global_index(what, t, i, tensors)?;
        let t = &tensors[t.0 as usize];
        Ok(if int { t.get_i64(i) as f64 } else { t.get_f32(i) as f64 })
    }

    /// The flat index of element (row, col) of tile `index` of a shared buffer, bounds-checked.
    fn shared_element(
        &self,
        what: &'static str,
        buf: SharedId,
        index: i64,
        row: i64,
        col: i64,
    ) -> Result<usize, InterpError> {
        let d = &self.k.shared[buf.0 as usize];
        if index < 0 || index >= d.count as i64 || row < 0 || row >= d.rows as i64 || col < 0 || col >= d.cols as i64 {
            return Err(InterpError::SharedElement {
                kernel: self.k.name.clone(),
                block: self.block,
                thread: self.thread,
                what,
                buf: d.name.clone(),
                index,
                row,
                col,
                count: d.count,
                rows: d.rows,
                cols: d.cols,
            });
        }
        Ok(((index * d.rows as i64 + row) * d.cols as i64 + col) as usize)
    }

    fn int(&self, e: &Expr, tensors: &[HostTensor]) -> Result<i64, InterpError> {
        Ok(self.eval(e, None, tensors)?.i())
    }

    fn body(&mut self, body: &[Stmt], tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        for s in body {
            self.stmt(s, tensors)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt, tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        match s {
            Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                self.vars[var.0 as usize] = self.eval(value, None, tensors)?;
            }
            Stmt::For { var, start, end, step, body, .. } => {
                let (mut i, e, st) = (self.int(start, tensors)?, self.int(end, tensors)?, self.int(step, tensors)?);
                if st <= 0 {
                    return Err(self.arith(format!("loop step {st} <= 0")));
                }
                while i < e {
                    self.vars[var.0 as usize] = V::I(i);
                    self.body(body, tensors)?;
                    i += st;
                }
            }
            // The producer warp's statements take effect in program order (see `Stmt::Producer`).
            Stmt::Producer { body } => self.body(body, tensors)?,
            // Turns only schedule the warpgroups' issue; the block runs as one (see `Stmt::InTurn`).
            Stmt::InTurn { body } => self.body(body, tensors)?,
            // The other warpgroups only skip the body; its tiles are the running warpgroups' alone (validated).
            Stmt::FirstWarpgroups { body, .. } => self.body(body, tensors)?,
            Stmt::If { cond, then_body, else_body } => {
                if self.eval(cond, None, tensors)?.b() {
                    self.body(then_body, tensors)?;
                } else {
                    self.body(else_body, tensors)?;
                }
            }
            s if crate::cpu::sequential_noop(s) => {}
            _ => match s.family() {
                StmtFamily::Tiles | StmtFamily::Mma => self.tile_stmt(s, tensors)?,
                StmtFamily::Mx => self.mx_stmt(s, tensors)?,
                StmtFamily::Sync => self.tma_stmt(s, tensors)?,
                StmtFamily::Threads => self.thread_stmt(s, tensors)?,
                StmtFamily::Control => unreachable!("every control statement has its arm above"),
            },
        }
        Ok(())
    }
}

/// The f32 semantics of the float -> float unary operators (what the prelude computes).
pub fn unary_f32(op: UnOp, x: f32) -> f32 {
    match op {
        UnOp::Exp => x.exp(),
        UnOp::Exp2 => x.exp2(),
        UnOp::Exp2Ftz => {
            let r = x.exp2();
            if r < f32::MIN_POSITIVE { 0.0 } else { r }
        }
        UnOp::Log => x.ln(),
        UnOp::Log2 => x.log2(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Rsqrt => 1.0 / x.sqrt(),
        UnOp::Recip => 1.0 / x,
        UnOp::Tanh => x.tanh(),
        UnOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnOp::Softplus => {
            if x > 20.0 {
                x
            } else {
                x.exp().ln_1p()
            }
        }
        UnOp::Silu => x / (1.0 + (-x).exp()),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::Trunc => x.trunc(),
        UnOp::Round => x.round_ties_even(),
        UnOp::RoundBf16 => half::bf16::from_f32(x).to_f32(),
        UnOp::Ilogb => {
            if x == 0.0 || !x.is_finite() {
                f32::NAN
            } else {
                let b = x.abs().to_bits();
                let e = (b >> 23) as i32;
                if e == 0 { (-118 - b.leading_zeros() as i32) as f32 } else { (e - 127) as f32 }
            }
        }
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Not | UnOp::IsNan | UnOp::IsFinite | UnOp::Bits | UnOp::FromBits => {
            unreachable!("not a float -> float op")
        }
    }
}
