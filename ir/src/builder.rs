//! An ergonomic way for operators to write kernels: declare arguments and tiles, then emit statements with
//! closures for nested bodies. `finish` validates the result.

use crate::dtype::{DType, ScalarTy};
use crate::expr::{ArrId, Expr, SharedId, SymId, TensorId, TileId, VarId, VecId};
use crate::kernel::*;
use crate::knob::Knobs;
use crate::mx::*;
use crate::tma::{MbarDecl, MbarId, MbarRef, TensorMapDecl, TmaLoad, TmaStore, TmapId};
use crate::validate::{IrError, validate};

/// Builds one [`Kernel`].
pub struct KernelBuilder {
    k: Kernel,
    stack: Vec<Vec<Stmt>>,
}

impl KernelBuilder {
    /// Start a kernel named `name` with `threads` threads per block.
    pub fn new(name: &str, threads: u32) -> Self {
        KernelBuilder {
            k: Kernel {
                name: name.to_string(),
                threads,
                tensors: vec![],
                syms: vec![],
                grid: [Expr::Int(1), Expr::Int(1), Expr::Int(1)],
                vars: vec![],
                tiles: vec![],
                vecs: vec![],
                shared: vec![],
                arrays: vec![],
                body: vec![],
                knobs: Knobs::new(),
                min_blocks_per_sm: 0,
                mbarriers: vec![],
                tensor_maps: vec![],
                cluster: crate::cluster::no_cluster(),
                producer_warp: false,
                elected_warpgroup: 0,
                mma_origins: false,
                pinned_wide_stores: false,
            },
            stack: vec![vec![]],
        }
    }

    fn sym(&mut self, name: &str, kind: SymKind) -> Expr {
        if let Some(i) = self.k.syms.iter().position(|s| s.name == name) {
            return Expr::Sym(SymId(i as u32));
        }
        self.k.syms.push(SymDecl { name: name.into(), kind });
        Expr::Sym(SymId(self.k.syms.len() as u32 - 1))
    }

    /// A shape dimension symbol (bound from tensor shapes at launch).
    pub fn dim(&mut self, name: &str) -> Expr {
        self.sym(name, SymKind::Dim)
    }
    /// An integer scalar argument.
    pub fn int_arg(&mut self, name: &str) -> Expr {
        self.sym(name, SymKind::Int)
    }
    /// A float scalar argument.
    pub fn float_arg(&mut self, name: &str) -> Expr {
        self.sym(name, SymKind::Float)
    }

    /// A tensor argument; each dim is a constant (`Expr::Int`) or a dim symbol (`Expr::Sym`).
    pub fn tensor(&mut self, name: &str, dtype: DType, dims: &[Expr], access: Access) -> TensorId {
        let dims = dims
            .iter()
            .map(|d| match d {
                Expr::Int(v) => Dim::Const(*v),
                Expr::Sym(s) => Dim::Sym(*s),
                other => panic!("tensor `{name}`: dims must be constants or symbols, got {other:?}"),
            })
            .collect();
        self.k.tensors.push(TensorParam { name: name.into(), dtype, dims, access });
        TensorId(self.k.tensors.len() as u32 - 1)
    }

    /// Set the grid.
    pub fn grid(&mut self, x: impl Into<Expr>, y: impl Into<Expr>, z: impl Into<Expr>) {
        self.k.grid = [x.into(), y.into(), z.into()];
    }

    /// Record the knob values the kernel is built with.
    pub fn knobs(&mut self, knobs: Knobs) {
        self.k.knobs = knobs;
    }
    /// A register tile spread over a `warps[0] x warps[1]` warp grid.
    pub fn tile(&mut self, name: &str, dtype: DType, rows: u32, cols: u32, warps: [u32; 2]) -> TileId {
        self.k.tiles.push(RegTileDecl { name: name.into(), dtype, rows, cols, warps, solo: false });
        TileId(self.k.tiles.len() as u32 - 1)
    }

    /// Make a tile solo (see [`RegTileDecl::solo`]): its replica warps skip the statements that write it.
    pub fn solo(&mut self, t: TileId) {
        self.k.tiles[t.0 as usize].solo = true;
    }

    /// A row vector matching tiles of `rows` rows on `warps`.
    pub fn vec(&mut self, name: &str, rows: u32, warps: [u32; 2]) -> VecId {
        self.k.vecs.push(VecDecl { name: name.into(), rows, warps });
        VecId(self.k.vecs.len() as u32 - 1)
    }

    /// `count` shared tiles of `rows x cols`.
    pub fn shared(&mut self, name: &str, dtype: DType, rows: u32, cols: u32, count: u32, swizzle: Swizzle) -> SharedId {
        self.k.shared.push(SharedDecl { name: name.into(), dtype, rows, cols, count, swizzle, alias: None });
        SharedId(self.k.shared.len() as u32 - 1)
    }

    /// `count` shared tiles of `rows x cols` stored in bytes `byte_offset..` of the earlier buffer `of`
    /// ([`SharedAlias`]: for buffers whose live ranges do not overlap).
    #[allow(clippy::too_many_arguments)]
    pub fn shared_alias(
        &mut self,
        name: &str,
        dtype: DType,
        rows: u32,
        cols: u32,
        count: u32,
        swizzle: Swizzle,
        of: SharedId,
        byte_offset: u32,
    ) -> SharedId {
        let alias = Some(SharedAlias { of, byte_offset });
        self.k.shared.push(SharedDecl { name: name.into(), dtype, rows, cols, count, swizzle, alias });
        SharedId(self.k.shared.len() as u32 - 1)
    }

    /// Ask for `n` resident blocks per SM (`__launch_bounds__(threads, n)`: ptxas caps the registers to fit).
    pub fn min_blocks_per_sm(&mut self, n: u32) {
        self.k.min_blocks_per_sm = n;
    }

    /// Address the `mma.sync` operand loads from per-thread origins (see [`Kernel::mma_origins`]).
    pub fn mma_origins(&mut self, on: bool) {
        self.k.mma_origins = on;
    }

    /// Store 16-byte [`Stmt::StoreWide`]s by one vector instruction that the compiler cannot split (see
    /// [`Kernel::pinned_wide_stores`]).
    pub fn pinned_wide_stores(&mut self, on: bool) {
        self.k.pinned_wide_stores = on;
    }

    /// The whole tile `index` of a shared buffer.
    pub fn slot(&self, buf: SharedId, index: impl Into<Expr>) -> SharedRef {
        let d = &self.k.shared[buf.0 as usize];
        SharedRef { buf, index: index.into(), row0: 0, col0: 0, rows: d.rows, cols: d.cols }
    }

    /// A window of tile `index` of a shared buffer.
    pub fn window(
        &self,
        buf: SharedId,
        index: impl Into<Expr>,
        row0: u32,
        col0: u32,
        rows: u32,
        cols: u32,
    ) -> SharedRef {
        SharedRef { buf, index: index.into(), row0, col0, rows, cols }
    }

    pub(crate) fn push(&mut self, s: Stmt) {
        self.stack.last_mut().expect("body stack").push(s);
    }

    fn new_var(&mut self, name: &str) -> VarId {
        self.k.vars.push(VarDecl { name: name.into() });
        VarId(self.k.vars.len() as u32 - 1)
    }

    /// Introduce a variable; returns its id (usable as an expression through `Expr::from`).
    pub fn let_var(&mut self, name: &str, value: impl Into<Expr>) -> VarId {
        let var = self.new_var(name);
        self.push(Stmt::Let { var, value: value.into() });
        var
    }

    /// Introduce an immutable variable and return it as an expression.
    pub fn let_(&mut self, name: &str, value: impl Into<Expr>) -> Expr {
        Expr::Var(self.let_var(name, value))
    }

    /// Update a variable.
    pub fn assign(&mut self, var: VarId, value: impl Into<Expr>) {
        self.push(Stmt::Assign { var, value: value.into() });
    }

    fn body(&mut self, f: impl FnOnce(&mut Self)) -> Vec<Stmt> {
        self.stack.push(vec![]);
        f(self);
        self.stack.pop().expect("body stack")
    }

    fn for_impl(
        &mut self,
        name: &str,
        start: Expr,
        end: Expr,
        step: Expr,
        unroll: bool,
        f: impl FnOnce(&mut Self, Expr),
    ) {
        let var = self.new_var(name);
        let body = self.body(|b| f(b, Expr::Var(var)));
        self.push(Stmt::For { var, start, end, step, body, unroll });
    }

    /// `for name in (start..end).step_by(step) { f }`.
    pub fn for_(
        &mut self,
        name: &str,
        start: impl Into<Expr>,
        end: impl Into<Expr>,
        step: impl Into<Expr>,
        f: impl FnOnce(&mut Self, Expr),
    ) {
        self.for_impl(name, start.into(), end.into(), step.into(), false, f)
    }

    /// Like [`Self::for_`], asking the code generator to unroll (bounds should be constants).
    pub fn for_unrolled(
        &mut self,
        name: &str,
        start: impl Into<Expr>,
        end: impl Into<Expr>,
        step: impl Into<Expr>,
        f: impl FnOnce(&mut Self, Expr),
    ) {
        self.for_impl(name, start.into(), end.into(), step.into(), true, f)
    }

    /// `if cond { f }`.
    pub fn if_(&mut self, cond: impl Into<Expr>, f: impl FnOnce(&mut Self)) {
        let then_body = self.body(f);
        self.push(Stmt::If { cond: cond.into(), then_body, else_body: vec![] });
    }

    /// `if cond { t } else { e }`.
    pub fn if_else(&mut self, cond: impl Into<Expr>, t: impl FnOnce(&mut Self), e: impl FnOnce(&mut Self)) {
        let then_body = self.body(t);
        let else_body = self.body(e);
        self.push(Stmt::If { cond: cond.into(), then_body, else_body });
    }

    /// Block-wide barrier.
    pub fn barrier(&mut self) {
        self.push(Stmt::Barrier);
    }
    /// Element-wise `tile = value`.
    pub fn map(&mut self, tile: TileId, value: impl Into<Expr>) {
        self.push(Stmt::Map { tile, value: value.into() });
    }
    /// Row-wise `vec = value`.
    pub fn vec_map(&mut self, vec: VecId, value: impl Into<Expr>) {
        self.push(Stmt::VecMap { vec, value: value.into() });
    }
    /// Row reduction.
    pub fn reduce(&mut self, vec: VecId, tile: TileId, op: ReduceOp, accumulate: bool) {
        self.push(Stmt::Reduce { vec, tile, op, accumulate });
    }
    /// `acc += a @ b`.
    pub fn mma(&mut self, acc: TileId, a: Operand, b: Operand) {
        self.push(Stmt::Mma { acc, a, b });
    }
    /// Decode packed MXFP4 words and their E8M0 scales from shared memory into a bf16 register tile (see
    /// [`Stmt::DequantFp4`] for the two layouts and the `fold` / `finite` promises).
    pub fn dequant_fp4(
        &mut self,
        tile: TileId,
        words: SharedRef,
        scales: SharedRef,
        packed: bool,
        fold: bool,
        finite: bool,
    ) {
        self.push(Stmt::DequantFp4 { tile, words, scales, packed, fold, finite });
    }
    /// Decode MXFP4 words and scales straight from global memory into a bf16 register tile (see
    /// [`Stmt::DequantFp4Stream`]).
    pub fn dequant_fp4_stream(
        &mut self,
        tile: TileId,
        words: GlobalView,
        scales: GlobalView,
        packed: bool,
        fold: bool,
        finite: bool,
    ) {
        self.push(Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch: None });
    }
    /// [`Self::dequant_fp4_stream`] that also issues the loads of the next views (see
    /// [`Stmt::DequantFp4Stream`]'s `prefetch`).
    #[allow(clippy::too_many_arguments)]
    pub fn dequant_fp4_stream_prefetch(
        &mut self,
        tile: TileId,
        words: GlobalView,
        scales: GlobalView,
        packed: bool,
        fold: bool,
        finite: bool,
        prefetch: Fp4Prefetch,
    ) {
        self.push(Stmt::DequantFp4Stream {
            tile,
            words,
            scales,
            packed,
            fold,
            finite,
            prefetch: Some(Box::new(prefetch)),
        });
    }
    /// Start `acc += a @ b` on the warpgroup tensor cores (see [`Stmt::MmaAsync`]).
    pub fn mma_async(&mut self, acc: TileId, a: Operand, b: Operand) {
        self.push(Stmt::MmaAsync { acc, a, b, accumulate: Expr::Bool(true) });
    }
    /// `acc = (accumulate ? acc : 0) + a @ b` on the warpgroup tensor cores (see [`Stmt::MmaAsync`]).
    pub fn mma_async_init(&mut self, acc: TileId, a: Operand, b: Operand, accumulate: impl Into<Expr>) {
        self.push(Stmt::MmaAsync { acc, a, b, accumulate: accumulate.into() });
    }
    /// Wait until at most `pending` `mma_async` statements are in flight.
    pub fn mma_wait(&mut self, pending: u32) {
        self.push(Stmt::MmaWait { pending });
    }
    /// Asynchronous global -> shared tile copy.
    pub fn copy_async(&mut self, dst: SharedRef, src: GlobalView) {
        self.push(Stmt::CopyAsync { dst, src });
    }
    /// Commit the pending asynchronous copies as one group.
    pub fn commit(&mut self) {
        self.push(Stmt::AsyncCommit);
    }
    /// Wait until at most `pending` groups are in flight.
    pub fn wait(&mut self, pending: u32) {
        self.push(Stmt::AsyncWait { pending });
    }
    /// Declare `count` shared-memory barriers (see [`crate::tma`]).
    pub fn mbarriers(&mut self, name: &str, count: u32) -> MbarId {
        self.k.mbarriers.push(MbarDecl { name: name.into(), count });
        MbarId(self.k.mbarriers.len() as u32 - 1)
    }
    /// Declare a TMA descriptor over a tensor argument (box dims innermost first).
    pub fn tensor_map(&mut self, name: &str, tensor: TensorId, box_dims: &[u32], swizzle: Swizzle) -> TmapId {
        self.k.tensor_maps.push(TensorMapDecl { name: name.into(), tensor, box_dims: box_dims.to_vec(), swizzle });
        TmapId(self.k.tensor_maps.len() as u32 - 1)
    }
    /// Initialize every barrier of a declaration with `count` expected arrivals (includes a block barrier).
    pub fn mbar_init(&mut self, bar: MbarId, count: u32) {
        self.push(Stmt::MbarInit { bar, count });
    }
    /// Thread 0: expect `bytes` of transactions on `bar[index]` and arrive.
    pub fn mbar_arrive_expect_tx(&mut self, bar: MbarId, index: impl Into<Expr>, bytes: u32) {
        self.push(Stmt::MbarArriveExpectTx { bar: MbarRef { bar, index: index.into() }, bytes });
    }
    /// Every thread arrives on `bar[index]`.
    pub fn mbar_arrive(&mut self, bar: MbarId, index: impl Into<Expr>) {
        self.push(Stmt::MbarArrive { bar: MbarRef { bar, index: index.into() } });
    }
    /// Every thread waits for the phase of parity `parity` of `bar[index]`.
    pub fn mbar_wait(&mut self, bar: MbarId, index: impl Into<Expr>, parity: impl Into<Expr>) {
        self.push(Stmt::MbarWait { bar: MbarRef { bar, index: index.into() }, parity: parity.into(), elected: false });
    }
    /// Thread 0 alone waits for the phase of parity `parity` of `bar[index]` (see [`Stmt::MbarWait`]).
    pub fn mbar_wait_elected(&mut self, bar: MbarId, index: impl Into<Expr>, parity: impl Into<Expr>) {
        self.push(Stmt::MbarWait { bar: MbarRef { bar, index: index.into() }, parity: parity.into(), elected: true });
    }
    /// Thread 0: one TMA box copy into `dst`, completing on `bar[bar_index]` (coords innermost first).
    pub fn tma_load(
        &mut self,
        map: TmapId,
        dst: SharedRef,
        coords: Vec<Expr>,
        bar: MbarId,
        bar_index: impl Into<Expr>,
    ) {
        let bar = MbarRef { bar, index: bar_index.into() };
        self.push(Stmt::TmaLoad(Box::new(TmaLoad { map, dst, coords, bar, multicast: None })));
    }
    /// Thread 0: one TMA box copy multicast into the same place of every cluster CTA of `mask` (see
    /// [`crate::cluster`]), completing on `bar[bar_index]` of each.
    pub fn tma_load_multicast(
        &mut self,
        map: TmapId,
        dst: SharedRef,
        coords: Vec<Expr>,
        bar: MbarId,
        bar_index: impl Into<Expr>,
        mask: impl Into<Expr>,
    ) {
        let bar = MbarRef { bar, index: bar_index.into() };
        self.push(Stmt::TmaLoad(Box::new(TmaLoad { map, dst, coords, bar, multicast: Some(mask.into()) })));
    }
    /// Launch the blocks in thread-block clusters of `dims` blocks (x, y, z).
    pub fn cluster(&mut self, dims: [u32; 3]) {
        self.k.cluster = dims;
    }
    /// The block's rank in its cluster (`%cluster_ctarank`: x fastest), from the block index.
    pub fn cluster_rank(&self) -> Expr {
        crate::cluster::rank_expr(self.k.cluster)
    }
    /// Lane 0 of every warp arrives on `bar[index]` of cluster CTA `cta`.
    pub fn mbar_arrive_cluster(&mut self, bar: MbarId, index: impl Into<Expr>, cta: impl Into<Expr>) {
        self.push(Stmt::MbarArriveCluster { bar: MbarRef { bar, index: index.into() }, cta: cta.into() });
    }
    /// Every thread of the cluster meets at the cluster barrier.
    pub fn cluster_sync(&mut self) {
        self.push(Stmt::ClusterSync);
    }
    /// A programmatic dependent launch statement ([`Stmt::GridDep`]).
    pub fn grid_dep(&mut self, d: GridDep) {
        self.push(Stmt::GridDep(d));
    }
    /// Load a register tile.
    pub fn load(&mut self, tile: TileId, src: Place) {
        self.push(Stmt::Load { tile, src });
    }
    /// Store a register tile.
    pub fn store(&mut self, tile: TileId, dst: Place) {
        self.push(Stmt::Store { tile, dst });
    }
    /// Store columns `col0 .. col0 + dst.cols` of a register tile into a shared window (see [`Stmt::StoreCols`]).
    pub fn store_cols(&mut self, tile: TileId, col0: u32, dst: SharedRef) {
        self.push(Stmt::StoreCols { tile, col0, dst });
    }
    /// Fence, synchronize the consumers, and thread 0 stores one TMA box from `src` (see [`Stmt::TmaStore`]).
    pub fn tma_store(&mut self, map: TmapId, src: SharedRef, coords: Vec<Expr>) {
        self.push(Stmt::TmaStore(Box::new(TmaStore { map, src, coords })));
    }
    /// Thread 0 waits until at most `pending` bulk stores still read shared memory; the consumers synchronize.
    pub fn tma_store_wait(&mut self, pending: u32) {
        self.push(Stmt::TmaStoreWait { pending });
    }
    /// Load a row vector.
    pub fn load_vec(&mut self, vec: VecId, src: VecView) {
        self.push(Stmt::LoadVec { vec, src });
    }
    /// Store a row vector.
    pub fn store_vec(&mut self, vec: VecId, dst: VecView) {
        self.push(Stmt::StoreVec { vec, dst });
    }

    /// Inclusive prefix sum down the rows of each column of an f32 tile, through `scratch` (see [`Stmt::Scan`]).
    pub fn scan_rows(&mut self, tile: TileId, scratch: SharedId) {
        self.scan(tile, scratch, ScanOp::Sum);
    }
    /// Inclusive column scan with any [`ScanOp`].
    pub fn scan(&mut self, tile: TileId, scratch: SharedId, op: ScanOp) {
        self.push(Stmt::Scan { tile, scratch, op });
    }

    /// Let the first thread of warpgroup `w` issue the single-thread operations (see [`Kernel::elected_warpgroup`]).
    pub fn elected_warpgroup(&mut self, w: u32) {
        self.k.elected_warpgroup = w;
    }
    /// Give the block a producer warp (see [`Stmt::Producer`]); its statements come from [`Self::producer`].
    pub fn producer_warp(&mut self) {
        self.k.producer_warp = true;
    }
    /// Statements only the producer warp runs (see [`Stmt::Producer`]; needs [`Self::producer_warp`]).
    pub fn producer(&mut self, f: impl FnOnce(&mut Self)) {
        let body = self.body(f);
        self.push(Stmt::Producer { body });
    }

    /// `f`'s statements in a producer body when `on` (see [`Self::producer`]), else in place.
    pub fn producer_if(&mut self, on: bool, f: impl FnOnce(&mut Self)) {
        if on { self.producer(f) } else { f(self) }
    }

    /// Statements the consumer warpgroups run in turn, one warpgroup at a time (ping-pong; see [`Stmt::InTurn`]).
    pub fn in_turn(&mut self, f: impl FnOnce(&mut Self)) {
        let body = self.body(f);
        self.push(Stmt::InTurn { body });
    }

    /// Statements only the block's first `count` warpgroups run (see [`Stmt::FirstWarpgroups`]).
    pub fn first_warpgroups(&mut self, count: u32, f: impl FnOnce(&mut Self)) {
        let body = self.body(f);
        self.push(Stmt::FirstWarpgroups { count, body });
    }

    /// `f`'s statements in a [`Self::first_warpgroups`] body of `count` when `on`, else in place.
    pub fn first_warpgroups_if(&mut self, on: bool, count: u32, f: impl FnOnce(&mut Self)) {
        if on { self.first_warpgroups(count, f) } else { f(self) }
    }

    /// `f`'s statements in an [`Self::in_turn`] body when `on`, else in place.
    pub fn in_turn_if(&mut self, on: bool, f: impl FnOnce(&mut Self)) {
        if on { self.in_turn(f) } else { f(self) }
    }

    /// A SIMT region: `f` emits statements every thread runs on its own (see [`Stmt::Threads`]). Read the
    /// thread's coordinates with [`Expr::thread_idx`], [`Expr::lane_idx`] and [`Expr::warp_idx`].
    pub fn threads(&mut self, f: impl FnOnce(&mut Self)) {
        let body = self.body(f);
        self.push(Stmt::Threads { body });
    }
    /// Threads regions: `tensor[index] = value` (converted to the tensor's dtype).
    pub fn store_scalar(&mut self, tensor: TensorId, index: impl Into<Expr>, value: impl Into<Expr>) {
        self.push(Stmt::StoreScalar { tensor, index: index.into(), value: value.into() });
    }
    /// Threads regions: element (row, col) of tile `index` of a shared buffer `= value`.
    pub fn shared_store(
        &mut self,
        buf: SharedId,
        index: impl Into<Expr>,
        row: impl Into<Expr>,
        col: impl Into<Expr>,
        value: impl Into<Expr>,
    ) {
        self.push(Stmt::SharedStore {
            buf,
            index: index.into(),
            row: row.into(),
            col: col.into(),
            value: value.into(),
        });
    }
    /// Threads regions: an atomic update of `target` with `op` (no result).
    pub fn atomic(&mut self, target: AtomicTarget, op: AtomicOp, value: impl Into<Expr>) {
        self.push(Stmt::Atomic { target, op, value: value.into(), fetch: None });
    }
    /// Threads regions: an atomic update that also returns the element's previous value (as a new
    /// per-thread variable named `name`).
    pub fn atomic_fetch(&mut self, name: &str, target: AtomicTarget, op: AtomicOp, value: impl Into<Expr>) -> Expr {
        let var = self.new_var(name);
        self.push(Stmt::Atomic { target, op, value: value.into(), fetch: Some(var) });
        Expr::Var(var)
    }
    /// Threads regions: `shared[index][row, col] += value` atomically (histograms).
    pub fn atomic_add_shared(
        &mut self,
        buf: SharedId,
        index: impl Into<Expr>,
        row: impl Into<Expr>,
        col: impl Into<Expr>,
        value: impl Into<Expr>,
    ) {
        let target = AtomicTarget::Shared { buf, index: index.into(), row: row.into(), col: col.into() };
        self.atomic(target, AtomicOp::Add, value);
    }
    /// Threads regions: `tensor[index] += value` atomically.
    pub fn atomic_add_global(&mut self, tensor: TensorId, index: impl Into<Expr>, value: impl Into<Expr>) {
        self.atomic(AtomicTarget::Global { tensor, index: index.into() }, AtomicOp::Add, value);
    }
    /// Threads regions: introduce a per-thread array of `len` elements of type `ty`, all `init` (see
    /// [`Stmt::LetArray`]). Read it with [`Expr::array_get`].
    pub fn let_array(&mut self, name: &str, len: u32, ty: ScalarTy, init: impl Into<Expr>) -> ArrId {
        self.k.arrays.push(ArrayDecl { name: name.into() });
        let arr = ArrId(self.k.arrays.len() as u32 - 1);
        self.push(Stmt::LetArray { arr, len, ty, init: init.into() });
        arr
    }
    /// Threads regions, top level: a warp shuffle or ballot of `value` (see [`Stmt::WarpShuffle`]); returns
    /// the new per-thread variable.
    pub fn warp_shuffle(&mut self, name: &str, op: WarpOp, value: impl Into<Expr>) -> Expr {
        let var = self.new_var(name);
        self.push(Stmt::WarpShuffle { var, op, value: value.into() });
        Expr::Var(var)
    }
    /// Threads regions, top level: `__syncwarp()` (see [`Stmt::WarpSync`]).
    pub fn warp_sync(&mut self) {
        self.push(Stmt::WarpSync);
    }
    /// Threads regions: a GPU-scope memory fence, `__threadfence()` (see [`Stmt::Fence`]).
    pub fn fence(&mut self) {
        self.push(Stmt::Fence);
    }
    /// Threads regions: `arr[index] = value`.
    pub fn array_set(&mut self, arr: ArrId, index: impl Into<Expr>, value: impl Into<Expr>) {
        self.push(Stmt::ArraySet { arr, index: index.into(), value: value.into() });
    }

    /// Threads regions: `arr[at..at + lanes] = tensor[index..index + lanes]` as one wide access (see
    /// [`Stmt::LoadWide`]).
    pub fn load_wide(&mut self, arr: ArrId, at: u32, tensor: TensorId, index: impl Into<Expr>, lanes: u32) {
        self.push(Stmt::LoadWide { arr, at, tensor, index: index.into(), lanes });
    }
    /// Threads regions: `tensor[index..index + lanes] = arr[at..at + lanes]` as one wide access (see
    /// [`Stmt::StoreWide`]).
    pub fn store_wide(&mut self, tensor: TensorId, index: impl Into<Expr>, arr: ArrId, at: u32, lanes: u32) {
        self.push(Stmt::StoreWide { tensor, index: index.into(), arr, at, lanes });
    }
    /// Threads regions: `arr[at..at + lanes] = buf[index](row, col..col + lanes)` as one wide shared access (see
    /// [`Stmt::SharedLoadWide`]).
    #[allow(clippy::too_many_arguments)]
    pub fn shared_load_wide(
        &mut self,
        arr: ArrId,
        at: u32,
        buf: SharedId,
        index: impl Into<Expr>,
        row: impl Into<Expr>,
        col: impl Into<Expr>,
        lanes: u32,
    ) {
        let (index, row, col) = (index.into(), row.into(), col.into());
        self.push(Stmt::SharedLoadWide { arr, at, buf, index, row, col, lanes });
    }
    /// Threads regions: `buf[index](row, col..col + lanes) = arr[at..at + lanes]` as one wide shared access (see
    /// [`Stmt::SharedStoreWide`]).
    #[allow(clippy::too_many_arguments)]
    pub fn shared_store_wide(
        &mut self,
        buf: SharedId,
        index: impl Into<Expr>,
        row: impl Into<Expr>,
        col: impl Into<Expr>,
        arr: ArrId,
        at: u32,
        lanes: u32,
    ) {
        let (index, row, col) = (index.into(), row.into(), col.into());
        self.push(Stmt::SharedStoreWide { buf, index, row, col, arr, at, lanes });
    }

    /// Validate and return the kernel.
    pub fn finish(mut self) -> Result<Kernel, IrError> {
        assert_eq!(self.stack.len(), 1, "unbalanced body stack");
        self.k.body = self.stack.pop().unwrap();
        validate(&self.k)?;
        Ok(self.k)
    }

    /// Return the kernel without validating (for tests of the validator).
    pub fn finish_unchecked(mut self) -> Kernel {
        self.k.body = self.stack.pop().unwrap();
        self.k
    }
}

/// Shorthand for a [`GlobalView`].
pub fn view(
    tensor: TensorId,
    offset: impl Into<Expr>,
    row_stride: impl Into<Expr>,
    rows: impl Into<Expr>,
    cols: impl Into<Expr>,
    vec: u32,
) -> GlobalView {
    GlobalView {
        tensor,
        offset: offset.into(),
        row_stride: row_stride.into(),
        rows: rows.into(),
        cols: cols.into(),
        vec,
    }
}

/// Shorthand for a [`VecView`].
pub fn vec_view(tensor: TensorId, offset: impl Into<Expr>, stride: impl Into<Expr>, rows: impl Into<Expr>) -> VecView {
    VecView { tensor, offset: offset.into(), stride: stride.into(), rows: rows.into() }
}
