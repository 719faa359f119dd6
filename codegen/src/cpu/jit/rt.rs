//! The JIT's block frame and its runtime: where register tiles, row vectors, shared buffers and per-thread
//! arrays live while a block runs, and the host functions the compiled code calls for the bulk tile
//! statements (the CPU counterpart of the CUDA prelude).
//!
//! Storage mirrors the interpreter's values exactly: float tiles hold f32 values (every value the interpreter
//! keeps in a float tile is an f32, already rounded to the tile's dtype), i32 tiles hold i32, row vectors f32,
//! float shared buffers f32 (rounded to the buffer's dtype) and integer shared buffers i64 (wrapped to the
//! buffer's dtype). The compiled code evaluates a tile statement's scalar operands (shared tile indices,
//! checked; global views) in the interpreter's order, then calls [`host_tile`], which runs the statement
//! element by element in the interpreter's order with the interpreter's conversions, so results agree bit
//! for bit.

mod mx;
mod sync;
mod tiles;

use super::Ctx;
use crate::cpu::cluster::{Cond, stop_error};
use crate::cpu::interp::{
    InterpError, MbarOp, MbarState, atomic_value, dequant_fp4_at, load_values, mbar_error, mbar_index, mbar_step,
    multicast_ctas, reduce, round_to, store_box, tma_load_values, view_element, wrap_int,
};
use k3k_ir::*;

/// Byte offsets of everything a block owns in its frame (all 8-byte aligned).
#[derive(Clone, Debug, Default)]
pub(crate) struct Layout {
    pub(crate) tiles: Vec<usize>,
    pub(crate) vecs: Vec<usize>,
    pub(crate) shared: Vec<usize>,
    /// Per array: the offset of its current length (an i64), followed by its 8-byte element slots.
    pub(crate) arrays: Vec<usize>,
    /// Bytes of the frame.
    pub(crate) size: usize,
    /// The arrays' bytes of the frame: `arrays_at..size`.
    pub(crate) arrays_at: usize,
    /// Lockstep regions (threads regions with warp statements) keep each thread's state in the lane area
    /// (`Ctx::lanes`, not part of the frame) between their segments: per thread, a record of `lane_stride`
    /// bytes holding its variables (8 bytes each, at `8 * var`), a copy of the frame's array bytes (at
    /// `lane_arrays`) and the value it gives to the warp exchange (8 bytes at `lane_value`); after the
    /// `threads` records, the block's array bytes saved while the region runs. 0 bytes without such regions.
    pub(crate) lane_stride: usize,
    pub(crate) lane_arrays: usize,
    pub(crate) lane_value: usize,
    pub(crate) lanes_size: usize,
    /// Per shared buffer, the buffers sharing its storage ([`Kernel::shared_overlaps`]).
    pub(crate) overlaps: Vec<Vec<usize>>,
    /// The frame offset of one i64 flag per shared buffer: written since an overlapping buffer was.
    pub(crate) live_at: usize,
    /// Per barrier declaration, the frame offset of its barriers' states (four i64 each, `interp::MbarState`).
    pub(crate) mbars: Vec<usize>,
}

/// A cluster's CTAs as the runtime reaches them (see `cpu::cluster`).
pub(crate) struct ClusterRt {
    pub(crate) sched: *const crate::cpu::cluster::Sched,
    /// Each CTA's frame, by rank.
    pub(crate) frames: Vec<*mut u8>,
    pub(crate) n: usize,
    pub(crate) id: [u32; 3],
}

/// Bytes of one element of a shared buffer in the frame.
pub(crate) fn shared_elem_bytes(dtype: DType) -> usize {
    if dtype.is_int() { 8 } else { 4 }
}

impl Layout {
    /// The layout of a kernel's frame, with each array's type and length (from its `LetArray`).
    pub(crate) fn new(k: &Kernel, array_decl: &[Option<(ScalarTy, u32)>]) -> Layout {
        let mut at = 0usize;
        let mut take = |bytes: usize| {
            let o = at;
            at += bytes.next_multiple_of(8);
            o
        };
        let tiles = k.tiles.iter().map(|t| take(4 * (t.rows * t.cols) as usize)).collect();
        let vecs = k.vecs.iter().map(|v| take(4 * v.rows as usize)).collect();
        let shared =
            k.shared.iter().map(|s| take(shared_elem_bytes(s.dtype) * (s.rows * s.cols * s.count) as usize)).collect();
        let live_at = take(8 * k.shared.len());
        let mbars = k.mbarriers.iter().map(|m| take(32 * m.count as usize)).collect();
        let arrays_at = take(0);
        let arrays = array_decl.iter().map(|d| take(8 + 8 * d.map_or(0, |d| d.1 as usize))).collect();
        let size = take(0);
        let lockstep = k.any_stmt(is_warp_stmt);
        let lane_arrays = 8 * k.vars.len();
        let lane_value = lane_arrays + (size - arrays_at);
        let lane_stride = lane_value + 8;
        let lanes_size = if lockstep { k.threads as usize * lane_stride + (size - arrays_at) } else { 0 };
        let overlaps = k.shared_overlaps();
        Layout {
            tiles,
            vecs,
            shared,
            arrays,
            size,
            arrays_at,
            lane_stride,
            lane_arrays,
            lane_value,
            lanes_size,
            overlaps,
            live_at,
            mbars,
        }
    }
}

/// Typed access to one block's frame (the interpreter's `Block` state, flattened).
struct Frame<'a> {
    k: &'a Kernel,
    l: &'a Layout,
    base: *mut u8,
}

impl Frame<'_> {
    /// Element `i` of a tile as the interpreter's f64 value.
    ///
    /// SAFETY (all accessors): `i` is within the object (the callers loop over the declared shapes, and shared
    /// windows were checked against their buffer at compile time and their tile index at run time).
    unsafe fn tile(&self, t: TileId, i: usize) -> f64 {
        unsafe {
            let p = self.base.add(self.l.tiles[t.0 as usize]);
            if self.k.tiles[t.0 as usize].dtype == DType::I32 {
                *(p as *const i32).add(i) as f64
            } else {
                *(p as *const f32).add(i) as f64
            }
        }
    }

    /// Set element `i` of a tile to an interpreter value (exact: an i32 in an i32 tile, an f32 in a float one).
    unsafe fn set_tile(&self, t: TileId, i: usize, v: f64) {
        unsafe {
            let p = self.base.add(self.l.tiles[t.0 as usize]);
            if self.k.tiles[t.0 as usize].dtype == DType::I32 {
                *(p as *mut i32).add(i) = v as i32;
            } else {
                *(p as *mut f32).add(i) = quiet(v as f32);
            }
        }
    }

    unsafe fn vec(&self, v: VecId) -> *mut f32 {
        unsafe { self.base.add(self.l.vecs[v.0 as usize]) as *mut f32 }
    }

    /// Element `i` of a shared buffer as the interpreter's `SharedMem::get_f64`.
    unsafe fn shared(&self, b: SharedId, i: usize) -> f64 {
        unsafe {
            let p = self.base.add(self.l.shared[b.0 as usize]);
            if self.k.shared[b.0 as usize].dtype.is_int() {
                *(p as *const i64).add(i) as f64
            } else {
                *(p as *const f32).add(i) as f64
            }
        }
    }

    /// The interpreter's `Block::claim`: the first write into `b` after an overlapping buffer's poisons the
    /// buffers sharing its storage.
    unsafe fn claim(&self, b: usize) {
        unsafe { claim(self.k, self.l, self.base, b) }
    }

    /// `SharedMem::set_f64`.
    unsafe fn set_shared(&self, b: SharedId, i: usize, v: f64) {
        unsafe {
            self.claim(b.0 as usize);
            let d = &self.k.shared[b.0 as usize];
            let p = self.base.add(self.l.shared[b.0 as usize]);
            if d.dtype.is_int() {
                *(p as *mut i64).add(i) = wrap_int(d.dtype, v as i64);
            } else {
                *(p as *mut f32).add(i) = quiet(round_to(d.dtype, v as f32));
            }
        }
    }

    /// Read logical element (row, col) of a shared window whose tile starts at element `base`.
    unsafe fn shared_at(&self, r: &SharedRef, base: usize, row: usize, col: usize) -> f64 {
        let d = &self.k.shared[r.buf.0 as usize];
        unsafe { self.shared(r.buf, base + (r.row0 as usize + row) * d.cols as usize + r.col0 as usize + col) }
    }

    /// The base element of tile `index` (checked by the compiled code) of a shared buffer.
    /// Barrier `i` of declaration `bar` (SAFETY: `i` below the declaration's count; the frame is this block's
    /// and nothing else refers to the barrier while the pointer is used).
    fn mbar(&self, bar: MbarId, i: usize) -> *mut MbarState {
        self.base.wrapping_add(self.l.mbars[bar.0 as usize]).cast::<MbarState>().wrapping_add(i)
    }

    /// Apply a barrier operation to `bar[index]` (index checked), as the interpreter does.
    unsafe fn mbar_op(&self, block: [u32; 3], bar: MbarId, index: i64, op: MbarOp) -> Result<(), InterpError> {
        let i = mbar_index(self.k, block, bar, index)?;
        mbar_step(unsafe { &mut *self.mbar(bar, i) }, op).map_err(|w| mbar_error(self.k, block, bar, index, w))
    }

    fn shared_base(&self, r: &SharedRef, index: i64) -> usize {
        let d = &self.k.shared[r.buf.0 as usize];
        index as usize * (d.rows * d.cols) as usize
    }

    /// An operand as a row-major f32 matrix (after its transpose): (rows, cols, values).
    unsafe fn operand(&self, o: &Operand, index: i64, row_shift: u32) -> (usize, usize, Vec<f32>) {
        match o {
            Operand::Reg(t) => {
                let d = &self.k.tiles[t.0 as usize];
                let n = (d.rows * d.cols) as usize;
                (d.rows as usize, d.cols as usize, (0..n).map(|i| unsafe { self.tile(*t, i) } as f32).collect())
            }
            Operand::Shared { src, transpose } | Operand::Banded { src, transpose } => {
                let mut moved = src.clone();
                moved.row0 += row_shift;
                let base = self.shared_base(&moved, index);
                let (wr, wc) = (src.rows as usize, src.cols as usize);
                if self.k.shared[src.buf.0 as usize].dtype == DType::U32 {
                    // E4M3 codes four to a word (the FP8 `mma_async`, validated).
                    let (r, c, m) = crate::cpu::e4m3_words::expand(wr, wc, *transpose, |i, j| unsafe {
                        self.shared_at(&moved, base, i, j)
                    });
                    return (r, c, m.into_iter().map(|v| v as f32).collect());
                }
                let (r, c) = if *transpose { (wc, wr) } else { (wr, wc) };
                let mut m = vec![0.0f32; r * c];
                for i in 0..r {
                    for j in 0..c {
                        m[i * c + j] = unsafe {
                            if *transpose {
                                self.shared_at(&moved, base, j, i)
                            } else {
                                self.shared_at(&moved, base, i, j)
                            }
                        } as f32;
                    }
                }
                (r, c, m)
            }
        }
    }

    /// `acc += a @ b` in the interpreter's order: per element, from the accumulator, p = 0, 1, ... in f32.
    unsafe fn mma(&self, acc: TileId, a: &Operand, b: &Operand, a_index: i64, b_index: i64) {
        let (m, kd, av) = unsafe { self.operand(a, a_index, 0) };
        let bands = match b {
            Operand::Banded { .. } => self.k.tiles[acc.0 as usize].warps[0] as usize,
            _ => 1,
        };
        let bmats: Vec<_> = (0..bands)
            .map(|w| {
                let shift = match b {
                    Operand::Banded { src, .. } => w as u32 * src.rows,
                    _ => 0,
                };
                unsafe { self.operand(b, b_index, shift) }
            })
            .collect();
        let n = bmats[0].1;
        let band_rows = m / bands;
        let accp = unsafe { self.base.add(self.l.tiles[acc.0 as usize]) as *mut f32 };
        // SAFETY: the accumulator is an f32 tile of m x n elements (validated).
        let accv = unsafe { std::slice::from_raw_parts_mut(accp, m * n) };
        for i in 0..m {
            let bv = &bmats[i / band_rows].2;
            let row = &mut accv[i * n..(i + 1) * n];
            // Each element sums its products in the order p = 0, 1, ... (the loops over p and j are swapped
            // from the interpreter's, which changes no element's order of operations).
            for p in 0..kd {
                let x = av[i * kd + p];
                let brow = &bv[p * n..(p + 1) * n];
                for (s, y) in row.iter_mut().zip(brow) {
                    *s += x * *y;
                }
            }
        }
    }
}

/// A float as the interpreter's f64 storage of tiles and shared buffers gives it back: signalling NaNs come
/// back quiet (the f32 -> f64 conversion sets the quiet bit and keeps the payload).
#[inline]
pub(crate) fn quiet(x: f32) -> f32 {
    if x.is_nan() { f32::from_bits(x.to_bits() | 0x0040_0000) } else { x }
}

/// The block's rank in its cluster.
fn cluster_rank(k: &Kernel, block: [u32; 3]) -> usize {
    k3k_ir::cluster::rank_of(k.cluster, block) as usize
}

/// The frame of cluster CTA `cta` (the block's own frame for its own rank, or rank 0 without a cluster).
fn cta_frame<'a>(ctx: &Ctx, f: &Frame<'a>, block: [u32; 3], cta: i64) -> Result<Frame<'a>, InterpError> {
    let (own, n) = if ctx.cluster.is_null() {
        (0, 1)
    } else {
        // SAFETY: set by the cluster runner for the whole run.
        (cluster_rank(f.k, block), unsafe { (*ctx.cluster).n })
    };
    if cta < 0 || cta >= n as i64 {
        return Err(InterpError::Arith {
            kernel: f.k.name.clone(),
            what: format!("block {block:?}: cluster CTA rank {cta} outside 0..{n}"),
        });
    }
    if cta as usize == own {
        return Ok(Frame { k: f.k, l: f.l, base: f.base });
    }
    // SAFETY: the peer sleeps while this CTA runs (see `cpu::cluster`); its frame outlives the run.
    Ok(Frame { k: f.k, l: f.l, base: unsafe { (&(*ctx.cluster).frames)[cta as usize] } })
}

/// Run the tile statement `s` for the current block. `args` holds its scalar operands, evaluated by the
/// compiled code in the interpreter's order (see `lower::Lower::tile_stmt`). Returns 0, or 1 with the error
/// in `ctx.error`.
pub(crate) extern "C" fn host_tile(ctx: *mut Ctx, s: *const Stmt, args: *const i64) -> i32 {
    // SAFETY: the compiled code passes its own context, a statement of the kernel it was compiled from (owned
    // by the `JitKernel`) and a stack array of as many operands as `lower` evaluates for this statement.
    let (ctx, s) = unsafe { (&mut *ctx, &*s) };
    let arg = |i: usize| unsafe { *args.add(i) };
    match unsafe { tile_stmt(ctx, s, &arg) } {
        Ok(()) => 0,
        Err(e) => {
            ctx.error = Some(e);
            1
        }
    }
}

/// A bulk tensor store not yet retired: the statement, its source's base element and the box coordinates.
pub(crate) struct PendingStore {
    store: k3k_ir::TmaStore,
    base: usize,
    coords: Vec<i64>,
}

/// Carry out the source reads (and the copies) of all but the `keep` most recent bulk stores of the block.
/// SAFETY: `ctx` describes the running block (its frame and tensors), as for [`tile_stmt`].
pub(crate) unsafe fn retire_bulk_stores(ctx: &mut Ctx, keep: usize) -> Result<(), InterpError> {
    let n = ctx.bulk_stores.len().saturating_sub(keep);
    if n == 0 {
        return Ok(());
    }
    let (k, l) = unsafe { (&*ctx.kernel, &*ctx.layout) };
    let f = Frame { k, l, base: ctx.frame };
    let hosts = unsafe { std::slice::from_raw_parts_mut(ctx.hosts, k.tensors.len()) };
    for p in ctx.bulk_stores.drain(..n) {
        let t = &p.store;
        let m = &k.tensor_maps[t.map.0 as usize];
        let d = &k.shared[t.src.buf.0 as usize];
        store_box(&mut hosts[m.tensor.0 as usize], &m.box_dims, &p.coords, d.dtype.is_int(), |r, c| unsafe {
            f.shared(t.src.buf, p.base + (t.src.row0 as usize + r) * d.cols as usize + c)
        })?;
    }
    Ok(())
}

/// What a host statement works on: the kernel, the block's frame, the block index and the tensors.
/// SAFETY: `ctx.kernel`, `ctx.layout` and `ctx.frame` describe the running kernel and its zeroed frame;
/// `ctx.hosts` points to its tensors (the compiled code holds no reference into them across this call).
unsafe fn parts<'a>(ctx: &Ctx) -> (&'a Kernel, Frame<'a>, [u32; 3], &'a mut [HostTensor]) {
    let (k, l) = unsafe { (&*ctx.kernel, &*ctx.layout) };
    let f = Frame { k, l, base: ctx.frame };
    let block = [ctx.block[0] as u32, ctx.block[1] as u32, ctx.block[2] as u32];
    let hosts = unsafe { std::slice::from_raw_parts_mut(ctx.hosts, k.tensors.len()) };
    (k, f, block, hosts)
}

/// The bounds check of a global element access: the index, or an out-of-bounds error naming `what`.
fn bounds(
    k: &Kernel,
    block: [u32; 3],
) -> impl Fn(&'static str, TensorId, i64, &[HostTensor]) -> Result<usize, InterpError> + '_ {
    move |what: &'static str, t: TensorId, i: i64, hosts: &[HostTensor]| {
        let len = hosts[t.0 as usize].len();
        if i < 0 || i as usize >= len {
            return Err(InterpError::OutOfBounds {
                kernel: k.name.clone(),
                block,
                what,
                tensor: k.tensors[t.0 as usize].name.clone(),
                index: i,
                len,
            });
        }
        Ok(i as usize)
    }
}

/// Run the statement `s` for the current block: its family's runner (`tiles`, `sync`, `mx`).
/// SAFETY: as [`parts`].
unsafe fn tile_stmt(ctx: &mut Ctx, s: &Stmt, arg: &dyn Fn(usize) -> i64) -> Result<(), InterpError> {
    match s.family() {
        StmtFamily::Tiles | StmtFamily::Mma => unsafe { tiles::tile_stmt(ctx, s, arg) },
        StmtFamily::Sync => unsafe { sync::sync_stmt(ctx, s, arg) },
        StmtFamily::Mx => unsafe { mx::mx_stmt(ctx, s, arg) },
        StmtFamily::Control | StmtFamily::Threads => {
            unreachable!("lower only calls host_tile for tile statements, not {s:?}")
        }
    }
}

/// The atomic read-modify-write of element `i` of tensor `t` (index checked by the compiled code) with value
/// `vi` / `vf` (the value as an int and as a float). Returns the old value: f32 bits for f32 tensors, else
/// the int.
pub(crate) extern "C" fn host_atomic_global(ctx: *mut Ctx, t: i64, i: i64, op: i64, vi: i64, vf: f32) -> i64 {
    // SAFETY: as `host_tile`; the index was bounds-checked.
    let ctx = unsafe { &mut *ctx };
    let t = unsafe { &mut *ctx.hosts.add(t as usize) };
    let i = i as usize;
    let v = value(vi, vf, t.dtype == DType::F32);
    let old = if t.dtype == DType::F32 { Val::F(t.get_f32(i)) } else { Val::I(t.get_i64(i)) };
    match atomic_value(t.dtype, ATOMIC_OPS[op as usize], old, v) {
        Val::F(f) => t.set_f32(i, f),
        new => t.set_i64(i, new.i()),
    }
    bits(old)
}

/// `Frame::claim` on a raw frame.
///
/// SAFETY: `frame` is a zeroed-at-block-start frame of `l`, the layout of `k`.
unsafe fn claim(k: &Kernel, l: &Layout, frame: *mut u8, b: usize) {
    if l.overlaps[b].is_empty() {
        return;
    }
    unsafe {
        let live = frame.add(l.live_at) as *mut i64;
        if *live.add(b) != 0 {
            return;
        }
        for &o in &l.overlaps[b] {
            let d = &k.shared[o];
            let p = frame.add(l.shared[o]);
            let n = (d.rows * d.cols * d.count) as usize;
            if d.dtype.is_int() {
                let v = wrap_int(d.dtype, SHARED_POISON);
                std::slice::from_raw_parts_mut(p as *mut i64, n).fill(v);
            } else {
                std::slice::from_raw_parts_mut(p as *mut f32, n).fill(f32::NAN);
            }
            *live.add(o) = 0;
        }
        *live.add(b) = 1;
    }
}

/// The compiled code's `claim` before an inline store into shared buffer `b` (one with overlaps).
pub(crate) extern "C" fn host_claim(ctx: *mut Ctx, b: i64) -> i64 {
    // SAFETY: as `host_tile`.
    let ctx = unsafe { &mut *ctx };
    unsafe { claim(&*ctx.kernel, &*ctx.layout, ctx.frame, b as usize) };
    0
}

/// The atomic read-modify-write of flat element `i` of shared buffer `b` (checked by the compiled code).
pub(crate) extern "C" fn host_atomic_shared(ctx: *mut Ctx, b: i64, i: i64, op: i64, vi: i64, vf: f32) -> i64 {
    // SAFETY: as `host_tile`; the element was bounds-checked.
    let ctx = unsafe { &mut *ctx };
    let (k, l) = unsafe { (&*ctx.kernel, &*ctx.layout) };
    let d = &k.shared[b as usize];
    let p = unsafe { ctx.frame.add(l.shared[b as usize]) };
    let i = i as usize;
    let int = d.dtype.is_int();
    let v = value(vi, vf, !int);
    unsafe {
        claim(k, l, ctx.frame, b as usize);
        let old = if int { Val::I(*(p as *const i64).add(i)) } else { Val::F(*(p as *const f32).add(i)) };
        // `SharedMem::set`.
        match atomic_value(d.dtype, ATOMIC_OPS[op as usize], old, v) {
            new if int => *(p as *mut i64).add(i) = wrap_int(d.dtype, new.i()),
            new => *(p as *mut f32).add(i) = quiet(round_to(d.dtype, new.f())),
        }
        bits(old)
    }
}

use crate::cpu::interp::Val;

pub(crate) const ATOMIC_OPS: [AtomicOp; 3] = [AtomicOp::Add, AtomicOp::Max, AtomicOp::Min];

fn value(vi: i64, vf: f32, float: bool) -> Val {
    if float { Val::F(vf) } else { Val::I(vi) }
}

fn bits(v: Val) -> i64 {
    match v {
        Val::F(f) => f.to_bits() as i64,
        other => other.i(),
    }
}

/// A statement of a lockstep region's top level: `WarpShuffle` or `WarpSync`.
pub(crate) fn is_warp_stmt(s: &Stmt) -> bool {
    matches!(s, Stmt::WarpShuffle { .. } | Stmt::WarpSync)
}

/// The exchange of the warp shuffle `s` over the lane area (see [`Layout`]): every thread has stored its value
/// (8-byte slot; an i8 0/1 for a ballot's bool) and its variables; each thread's variable `var` becomes the
/// value of its source lane in its warp (the whole slot: the variable has the value's type), or for a ballot
/// the i64 mask of its warp's lanes whose bool is true, as the interpreter's `lockstep`. Returns 0.
pub(crate) extern "C" fn host_warp(ctx: *mut Ctx, s: *const Stmt) -> i32 {
    // SAFETY: as `host_tile`; the lane area holds `threads` records of `lane_stride` bytes (threads is a multiple
    // of 32, so every source lane is a thread of the block).
    let (ctx, s) = unsafe { (&*ctx, &*s) };
    let (k, l) = unsafe { (&*ctx.kernel, &*ctx.layout) };
    let Stmt::WarpShuffle { var, op, .. } = s else { unreachable!("lower only calls host_warp for shuffles") };
    let lane = |t: usize| unsafe { ctx.lanes.add(t * l.lane_stride) };
    let value = |t: usize| unsafe { (lane(t).add(l.lane_value) as *const u64).read_unaligned() };
    for t in 0..k.threads as usize {
        let (ln, w0) = (t % 32, t - t % 32);
        let v = match op.source_lane(ln as u32) {
            Some(src) => value(w0 + src as usize),
            None => (0..32).filter(|&j| value(w0 + j) as u8 != 0).map(|j| 1u64 << j).sum(),
        };
        unsafe { (lane(t).add(8 * var.0 as usize) as *mut u64).write_unaligned(v) };
    }
    0
}

/// `round_to` for the frame's float shared stores and tile maps (dtype by its index in [`DType::ALL`]).
pub(crate) extern "C" fn host_round_to(dt: i64, x: f32) -> f32 {
    round_to(DType::ALL[dt as usize], x)
}

/// The index of a dtype in [`DType::ALL`].
pub(crate) fn dtype_code(d: DType) -> i64 {
    DType::ALL.iter().position(|x| *x == d).expect("every dtype is listed") as i64
}
