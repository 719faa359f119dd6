//! The tile program: a kernel's arguments, its register tiles, row vectors and shared buffers, and its body.
//!
//! A kernel runs as a grid of blocks of `threads` threads. Its body is written at *block level*: every
//! statement is executed by the whole block, and tile statements operate on whole tiles whose elements are
//! spread over the block's warps by a fixed layout (see [`RegTileDecl`]). Control flow must be block-uniform:
//! loop bounds and `if` conditions may depend on symbols, variables, block indices, scalar loads and shared
//! loads only. That restriction is what lets one program run on a GPU, in the CPU interpreter and in a CPU JIT
//! alike.
//!
//! The one exception is a [`Stmt::Threads`] region: plain per-thread (SIMT) code, where every thread of the
//! block runs the body on its own, may branch on [`crate::Special::ThreadIdx`], and owns the variables and
//! register arrays it introduces. Regions are how programs write scalars, scatter into shared memory, build
//! histograms with atomics and run per-thread loops; block-level statements (tiles, barriers, async copies)
//! stay outside them.

use crate::dtype::DType;
use crate::dtype::ScalarTy;
use crate::expr::{ArrId, Expr, SharedId, SymId, TensorId, TileId, VarId, VecId};
use crate::fp4_gemv::Fp4Gemv;
use crate::knob::Knobs;
use crate::mx::Fp4Prefetch;
use crate::tma::{MbarDecl, MbarId, MbarRef, TensorMapDecl, TmaLoad, TmaStore};
use serde::{Deserialize, Serialize};

/// How a kernel uses a tensor argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

/// One dimension of a tensor argument: a constant or a shape symbol bound at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Dim {
    Const(i64),
    Sym(SymId),
}

/// A tensor argument: contiguous, row-major, with symbolic dims. Its base must be 16-byte aligned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorParam {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<Dim>,
    pub access: Access,
}

/// What a symbol stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SymKind {
    /// A tensor dimension (bound from the shapes of the tensors at launch).
    Dim,
    /// An integer scalar argument.
    Int,
    /// A float scalar argument (f32).
    Float,
}

/// A named symbol: shape dimension or scalar argument. Each becomes one kernel argument.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SymDecl {
    pub name: String,
    pub kind: SymKind,
}

/// A named variable, introduced by [`Stmt::Let`] or [`Stmt::For`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VarDecl {
    pub name: String,
}

/// A named per-thread register array, introduced by [`Stmt::LetArray`] (which fixes its length and type).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArrayDecl {
    pub name: String,
}

/// A register tile of `rows x cols` elements spread over a `warps[0] x warps[1]` grid of warps.
///
/// Warp (i, j) owns rows `[i*rows/warps[0], (i+1)*rows/warps[0])` and the matching column band. Inside a
/// warp the elements follow the m16n8 accumulator layout of `mma.sync`: lane `l` holds, in each 16x8
/// fragment, rows `l/4` and `l/4 + 8` and columns `2*(l%4)` and `2*(l%4)+1`. When the tile uses fewer warps
/// than the block has, it is replicated over the remaining warps (each replica holds the same values), unless the
/// tile is `solo`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegTileDecl {
    pub name: String,
    /// `F32`, `Bf16`, `F16` or `I32`.
    pub dtype: DType,
    pub rows: u32,
    pub cols: u32,
    pub warps: [u32; 2],
    /// The warps past `warps[0] * warps[1]` hold no replica: the statements that write the tile (maps, loads,
    /// `mma`) do not run on them, and its values leave the tile only through stores (which replicas skip anyway)
    /// or maps and products into other solo tiles of the same warps (the validator checks it). The same results;
    /// on the GPU the replica warps issue none of the tile's work. (`ir::RegTileDecl`, 2026-12-07.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub solo: bool,
}

/// A vector of f32 values, one per row of a register tile with the same `rows` and `warps` (the result of a
/// row reduction, or a per-row scale such as a softmax max or a routing weight).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VecDecl {
    pub name: String,
    pub rows: u32,
    pub warps: [u32; 2],
}

/// Bank-conflict avoidance for shared tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Swizzle {
    /// Plain row-major.
    None,
    /// 16-byte chunk `c` of row `r` is stored at chunk `c ^ (r % min(8, chunks_per_row))`.
    Xor16B,
    /// 16-byte chunk `c` of row `r` is stored at chunk `c ^ (2 (r / p) % min(8, chunks_per_row))`, `p` the rows
    /// per 128-byte bank line (1 for rows of 128 bytes or more): for tiles of 4-byte elements moved as the 8-byte
    /// pairs of the register-tile layout (a half-warp reads 32 bytes of each of 4 consecutive rows), those rows
    /// land on distinct banks, where `Xor16B` maps rows `2i` and `2i + 1` onto the same ones (2-way conflicts). A
    /// layout of the SIMT and `mma.sync` paths only: no copy-engine or `wgmma` tile.
    Xor16BPairs,
}

/// `count` shared-memory tiles of `rows x cols` elements (e.g. the stages of a pipeline).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharedDecl {
    pub name: String,
    pub dtype: DType,
    pub rows: u32,
    pub cols: u32,
    pub count: u32,
    pub swizzle: Swizzle,
    /// Storage shared with an earlier buffer whose live range does not overlap this one's (see
    /// [`SharedAlias`]); `None`: storage of its own.
    #[serde(default)]
    pub alias: Option<SharedAlias>,
}

/// A shared buffer that reuses bytes `byte_offset..byte_offset + bytes()` of an earlier, non-aliased buffer
/// `of` (the *root*), for a program whose phases use the two at different times (e.g. an operand staging area
/// that is dead once a later phase's accumulator tiles are written).
///
/// Semantics: buffers whose byte ranges in the root overlap (the root overlaps all of its aliases) share
/// storage, so a write into one leaves the contents of every overlapping one undefined. The CPU backends model
/// this conservatively and deterministically: the first write into a buffer after an overlapping one was written
/// (or since the block began) fills every overlapping buffer with poison (NaN for floats, [`SHARED_POISON`]
/// wrapped to the dtype for integers), so a program that reads data an aliased write clobbered computes NaN or
/// garbage there instead of the stale value, and fails its comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedAlias {
    pub of: SharedId,
    pub byte_offset: u32,
}

/// What the CPU backends store into an integer shared buffer whose storage an aliased write clobbered.
pub const SHARED_POISON: i64 = 0x5EAD_BEEF_5EAD_BEEF;

impl SharedDecl {
    /// Bytes of one tile.
    pub fn tile_bytes(&self) -> usize {
        self.dtype.storage_bytes((self.rows * self.cols) as usize)
    }
    /// Bytes of all `count` tiles.
    pub fn bytes(&self) -> usize {
        self.tile_bytes() * self.count as usize
    }
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.dtype.storage_bytes(self.cols as usize)
    }
    /// True for the layout `wgmma` reads with its 128-byte swizzle: XOR-swizzled 128-byte rows.
    pub fn is_swizzle_128b(&self) -> bool {
        self.swizzle == Swizzle::Xor16B && self.row_bytes() == 128
    }
}

/// A window of one shared tile: tile `index` of buffer `buf`, rows `row0..row0+rows`, cols `col0..col0+cols`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharedRef {
    pub buf: SharedId,
    pub index: Expr,
    pub row0: u32,
    pub col0: u32,
    pub rows: u32,
    pub cols: u32,
}

/// A 2-D window of a global tensor: element (r, c) is `tensor[offset + r*row_stride + c]`, valid when
/// `r < rows && c < cols`. Loads fill invalid elements with 0; stores skip them. `vec` is the number of
/// consecutive elements moved per access (1, 2, 4 or 8; at most 16 bytes); the program promises that
/// `offset` and `row_stride` are multiples of `vec` (the launcher checks the alignment class).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GlobalView {
    pub tensor: TensorId,
    pub offset: Expr,
    pub row_stride: Expr,
    pub rows: Expr,
    pub cols: Expr,
    pub vec: u32,
}

/// A 1-D strided window of a global tensor for row vectors: row r is `tensor[offset + r*stride]`, valid when
/// `r < rows`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VecView {
    pub tensor: TensorId,
    pub offset: Expr,
    pub stride: Expr,
    pub rows: Expr,
}

/// Where a register tile is loaded from or stored to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Place {
    Global(GlobalView),
    Shared(SharedRef),
}

/// A matrix-product operand. `transpose` reads a shared window as its transpose (stored `[K, M]` for A or
/// `[N, K]` for B); register operands are never transposed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Operand {
    Reg(TileId),
    Shared {
        src: SharedRef,
        transpose: bool,
    },
    /// A B operand read per accumulator row band (a batched, block-diagonal product): the accumulator's warp
    /// row band `w` (`0..acc.warps[0]`) multiplies by the window `src` moved down by `w * src.rows` rows of its
    /// buffer, so `acc[band w] += a[band w] @ b_w`. With an accumulator of 16-row bands and a 16-row window this
    /// computes the 16x16 diagonal tiles of a `[C, C]` product without the off-diagonal work. B only.
    Banded {
        src: SharedRef,
        transpose: bool,
    },
}

/// Row-reduction operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

/// Read-modify-write operators of [`Stmt::Atomic`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AtomicOp {
    /// `*p += v` (integers wrap at the storage width).
    Add,
    /// `*p = max(*p, v)`, compared in the storage type (unsigned for u32/u64; for f32 like `fmaxf`: a NaN
    /// operand is ignored).
    Max,
    /// `*p = min(*p, v)`, as `Max`.
    Min,
}

impl AtomicOp {
    /// The printer's name of the operator.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Max => "max",
            AtomicOp::Min => "min",
        }
    }
}

/// The memory element an atomic statement updates. The storage type must be `I32`, `U32`, `I64`, `U64` or
/// `F32`; the value is an int for the integer types and a float for `F32`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AtomicTarget {
    /// `tensor[index]` (flat element index) of a writable global tensor.
    Global { tensor: TensorId, index: Expr },
    /// Element (row, col) of tile `index` of a shared buffer (the histogram case).
    Shared { buf: SharedId, index: Expr, row: Expr, col: Expr },
}

/// Column-scan operators of [`Stmt::Scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScanOp {
    /// Inclusive prefix sum in f32, row 0 first: `out[r] = out[r-1] + in[r]`.
    Sum,
}

/// A statement. Every statement is block-level (executed by the whole block) except inside a
/// [`Stmt::Threads`] region, whose statements each thread executes on its own. Which statements are valid
/// where is checked by [`crate::validate()`]:
/// - anywhere: `Let`, `Assign`, `For`, `If`;
/// - block level only: `Threads`, `Producer`, `InTurn`, `FirstWarpgroups`, `Barrier`, the async copies, the
///   tile and vector statements, `Scan`, `DequantFp4`;
/// - inside regions only: `StoreScalar`, `SharedStore`, `Atomic`, `LetArray`, `ArraySet`, `Fence`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Stmt {
    /// Introduce a scalar variable (mutable through [`Stmt::Assign`]).
    Let { var: VarId, value: Expr },
    /// Update a variable introduced by `Let`.
    Assign { var: VarId, value: Expr },
    /// `for var in (start..end).step_by(step)`; `step > 0`.
    For { var: VarId, start: Expr, end: Expr, step: Expr, body: Vec<Stmt>, unroll: bool },
    /// Block-uniform conditional.
    If { cond: Expr, then_body: Vec<Stmt>, else_body: Vec<Stmt> },
    /// `__syncthreads()`: orders shared-memory accesses of the whole block.
    Barrier,
    /// `tile[r, c] = value` for every element (element context).
    Map { tile: TileId, value: Expr },
    /// `vec[r] = value` for every row (row context: `RowVal`, `RowIdx` and scalars).
    VecMap { vec: VecId, value: Expr },
    /// `vec[r] = op_c tile[r, c]` (or `op(vec[r], ...)` when `accumulate`).
    Reduce { vec: VecId, tile: TileId, op: ReduceOp, accumulate: bool },
    /// `acc += a @ b` with f32 accumulation; a is `[M, K]`, b is `[K, N]`, acc is `[M, N]`, K a multiple of 16.
    /// E4M3 form (`mma.sync m16n8k32 .e4m3.e4m3`, sm_89+): both operands shared windows of **u32** words, each
    /// word four E4M3 codes (byte j = element 4c + j of the row), K-contiguous: A `[M, K/4]` not transposed, B
    /// `[N, K/4]` read transposed, K a multiple of 32 (8 words); read by `ldmatrix` on their b16 view (8 rows of
    /// 16 codes are one 8-bit fragment). Products of E4M3 values are exact in f32.
    Mma { acc: TileId, a: Operand, b: Operand },
    /// Start `acc += a @ b` on the warpgroup tensor cores (Hopper `wgmma`), asynchronously. A is either a shared
    /// window stored K-contiguous in 128-byte rows (a 64-element bf16/f16 K slice, `Swizzle::Xor16B`) `[M, K]`,
    /// not transposed, or a 16-bit register tile on the accumulator's row bands, warps `[4*g, 1]` (any K, a
    /// multiple of 16: the accumulator layout of a score tile converted to bf16 is the register A fragment of
    /// `m64nNk16`). B is a shared window of such rows stored either `[N, K]` (K-contiguous, read transposed,
    /// K <= 64) or `[K, N]` with N = 64 (N-contiguous, the `wgmma` transpose mode: e.g. V tiles as they lie in
    /// global memory, keys x values; K any multiple of 16). The accumulator sits on warps `[4*g, 1]`, one
    /// warpgroup per 64 rows, replicated over the block's further warpgroups if it has more (each replica computes
    /// the same product), or on warps `[4*g, 2]` using every warp of the block, where the second g warpgroups
    /// hold the right half of the columns (N/2 each; B stored `[K, N]` only: two warpgroups sharing one register
    /// A and one shared stage, each multiplying half of its columns). Until an [`Stmt::MmaWait`] covers this
    /// statement, neither `acc`, a register A operand, nor the operands' shared memory may be touched (loads of
    /// *other* shared tiles may proceed, which is the point). Shared data written by ordinary stores must be followed by an
    /// `AsyncWait` (which fences the async proxy) and a barrier before this statement reads it.
    /// `accumulate` (a block-uniform bool) false means `acc = a @ b`: the way to start a tile, since zeroing the
    /// accumulator registers with ordinary instructions would serialize the tensor-core pipeline.
    /// FP8 form (`wgmma ... .e4m3.e4m3`): both operands shared windows of **u32** words, each word four E4M3 codes
    /// (byte j = element 4c + j), in Xor16B 128-byte rows (32 words = 128 codes of K); A `[M, K]` not transposed,
    /// B `[N, K]` read transposed (8-bit operands have no transpose mode), K = 4 x the words, a multiple of 32 up
    /// to 128; accumulator on warps `[4*g, 1]`. Products of E4M3 values are exact in f32.
    MmaAsync { acc: TileId, a: Operand, b: Operand, accumulate: Expr },
    /// Wait until at most `pending` [`Stmt::MmaAsync`] statements of this warpgroup are still in flight.
    MmaWait { pending: u32 },
    /// Start an asynchronous global -> shared copy of a tile (invalid elements become 0).
    CopyAsync { dst: SharedRef, src: GlobalView },
    /// Close the current group of asynchronous copies.
    AsyncCommit,
    /// Wait until at most `pending` committed groups are still in flight (this thread's copies; follow with a
    /// barrier before reading what other threads copied).
    AsyncWait { pending: u32 },
    /// Initialize every barrier of declaration `bar` with an arrival count of `count` (see [`crate::tma`]):
    /// thread 0 initializes, fences the initialization for the async proxy, and the block synchronizes.
    MbarInit { bar: MbarId, count: u32 },
    /// Thread 0 adds `bytes` to the barrier's transaction count and arrives on it (one arrival).
    MbarArriveExpectTx { bar: MbarRef, bytes: u32 },
    /// Every thread of the block arrives on the barrier (`threads` arrivals).
    MbarArrive { bar: MbarRef },
    /// Every thread waits until the barrier's phase of parity `parity` (an int, 0 or 1) has completed; with
    /// `elected`, only thread 0 waits (a producer waiting for a slot to be released before refilling it, while
    /// the other threads go on; the CPU backends, which run the block as one, check the same wait).
    MbarWait {
        bar: MbarRef,
        parity: Expr,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        elected: bool,
    },
    /// Thread 0 starts a bulk tensor copy of one box (see [`TmaLoad`], [`crate::tma`]); it completes the
    /// box's bytes on its barrier. Reading the destination is only valid after a wait on that barrier's phase.
    TmaLoad(Box<TmaLoad>),
    /// A bulk tensor store of one box, shared -> global (see [`TmaStore`]): the consumer threads make their
    /// earlier shared writes visible to the copy engine (`fence.proxy.async`) and synchronize, then thread 0
    /// starts the copy and commits it as one bulk group. Box elements outside the tensor are not written. The
    /// copy reads the source asynchronously: the program must not overwrite it before a [`Stmt::TmaStoreWait`]
    /// has seen the store's group read. The CPU backends read the source at the latest moment allowed (the wait
    /// that retires the store, or the block's end), so a source rewritten too early stores its new contents and
    /// fails the program's check.
    TmaStore(Box<TmaStore>),
    /// Thread 0 waits until at most `pending` of its most recent bulk stores ([`Stmt::TmaStore`]) still read
    /// shared memory, then the consumer threads synchronize: the sources of the others may be overwritten.
    /// Every kernel with bulk stores also waits for all of them to complete before it exits (implicitly).
    TmaStoreWait { pending: u32 },
    /// Store columns `col0 .. col0 + dst.cols` of a register tile into the shared window `dst` (`dst.rows` =
    /// the tile's rows; `col0` and `dst.cols` multiples of 8, within the tile), converting to the buffer's
    /// dtype: an epilogue staging a wide accumulator through a narrower buffer, one column slice at a time.
    StoreCols { tile: TileId, col0: u32, dst: SharedRef },
    /// Lane 0 of every warp arrives once on barrier `bar` of CTA `cta` (an int, the rank in the cluster) of
    /// the block's thread-block cluster (`warps` arrivals, after the warp's lanes converge; release at CTA scope,
    /// so it orders the warp's completed reads, not its writes, for the peer): how a consumer releases a slot a
    /// peer's multicast refills (see [`crate::cluster`]).
    MbarArriveCluster { bar: MbarRef, cta: Expr },
    /// Every thread of every CTA of the cluster arrives at and waits on the cluster barrier (release/acquire
    /// at cluster scope; see [`crate::cluster`]).
    ClusterSync,
    /// Programmatic dependent launch (Hopper's `griddepcontrol`; see [`GridDep`]): every thread waits for the grid
    /// launched before this one on the stream to complete (`Wait`), or lets the grid launched after this one start
    /// early (`LaunchDependents`). A kernel with a `Wait` is launched with the stream's programmatic serialization
    /// (`k3k_runtime`), so its blocks may start while the previous grid runs: everything before the `Wait` must not
    /// read what that grid writes, nor write what it reads. The CPU interpreter and the JIT run launches one after
    /// another, where both are no-ops.
    GridDep(GridDep),
    /// Load a register tile (converting to the tile's dtype).
    Load { tile: TileId, src: Place },
    /// Store a register tile (converting to the destination's dtype; invalid elements skipped).
    Store { tile: TileId, dst: Place },
    /// Load a row vector from global memory (invalid rows get 0).
    LoadVec { vec: VecId, src: VecView },
    /// Store a row vector to global memory (invalid rows skipped).
    StoreVec { vec: VecId, dst: VecView },
    /// Inclusive scan down the rows of every column of an f32 register tile (row r becomes `op` over rows
    /// `0..=r` of its column). `scratch` is an f32 shared buffer of at least the tile's rows and cols; the scan
    /// goes through its tile 0, which holds the scanned tile afterwards. The statement orders itself against
    /// earlier accesses of the scratch (it begins with a barrier); a later write to the scratch by the program
    /// needs a barrier first.
    Scan { tile: TileId, scratch: SharedId, op: ScanOp },
    /// A SIMT region: every thread of the block runs `body` independently, like plain CUDA code.
    ///
    /// Inside, [`crate::Special::ThreadIdx`] / `LaneIdx` / `WarpIdx` are valid, control flow may diverge,
    /// and variables and arrays introduced in the body are per-thread. Variables from outside may be read but
    /// not assigned (each thread would end up with its own value of a block-uniform variable). Block-level
    /// statements (barriers, async copies, tile and vector statements, nested regions) are not allowed.
    ///
    /// Memory ordering: the CPU interpreter runs the threads one after another, so it sees every earlier
    /// thread's writes; a GPU does not. A program must put a [`Stmt::Barrier`] between a region that writes
    /// shared memory and any statement (including a later region) that reads what other threads wrote, and
    /// must not read, in one region, shared data other threads of that region write.
    Threads { body: Vec<Stmt> },
    /// The producer warp's statements (kernels with [`Kernel::producer_warp`] only; warp specialization).
    ///
    /// A producer-warp kernel launches one warpgroup (128 threads) more than [`Kernel::threads`] (a multiple of
    /// 128): the *producer warpgroup* after the `threads` consumer threads, whose first warp is the producer warp
    /// (a whole warpgroup, so that the GPU code can move registers from it to the consumers with `setmaxnreg`;
    /// its other warps run the same code and issue nothing). Both roles run the program's control skeleton
    /// (block-level `let`, `assign`, `for`, `if`, and the top-level barriers, barrier initializations and cluster
    /// barriers, with the same block-uniform values); besides it, the producer warpgroup runs the `Producer`
    /// bodies only, and the consumer threads everything but them. The roles meet only through mbarriers, so the producer warp runs
    /// ahead of the consumers as far as the barriers let it: its waits for released slots are the only brake, and
    /// no consumer warp ever waits for a copy to be issued. The producer's elected thread (its lane 0) issues
    /// the copies, the `expect_tx` arrivals and the elected waits.
    ///
    /// Semantics: the statements take effect in program order (what the CPU backends run). The GPU run is one of
    /// the interleavings the mbarriers allow, so a program must order every exchange between the roles through
    /// them (a refill waits for the release of the slot's previous use; a consumer waits for the slot's full
    /// phase), as it must for a producer thread inside a consumer warp. The validator enforces what program order
    /// alone cannot: a body holds only scalar control, elected waits, `expect_tx` arrivals and TMA copies; those
    /// three appear nowhere else; variables assigned in a body are read only in bodies; and the skeleton both roles
    /// run reads no shared memory and no tensor the kernel writes. Barriers nested in loops or conditionals (and
    /// those inside tile statements) synchronize the consumer threads only.
    Producer { body: Vec<Stmt> },
    /// Ping-pong scheduling of the consumer warpgroups: they run `body` in turn, one warpgroup at a time, in a
    /// fixed ring (0, 1, .., n-1, 0, 1, ..; `n = threads / 128`, at least 2). Warpgroup w's k-th entry into any
    /// `InTurn` of the kernel waits until warpgroup w-1 has left its k-th (warpgroup 0: until warpgroup n-1 has
    /// left its (k-1)-th), so the bodies of different warpgroups never run at the same time. What it is for:
    /// the body issues a warpgroup's asynchronous tensor-core products ([`Stmt::MmaAsync`]), so that one
    /// warpgroup's products keep the tensor cores busy while another runs its softmax or epilogue, instead of
    /// every warpgroup issuing at once and then waiting at once (FlashAttention-3's ping-pong schedule).
    ///
    /// Semantics: a pure scheduling constraint. It orders no memory access (the products it issues complete
    /// at their `MmaWait`s as ever), and the CPU backends run the body in program order. Every consumer
    /// warpgroup runs the block-level statements alike, so each enters every `InTurn` the same number of times.
    /// The validator keeps what could deadlock a warpgroup that holds the turn out of the body: block and
    /// consumer barriers (also the ones inside `Scan` and `Fp4Gemv`), barrier initializations, cluster
    /// barriers, elected mbarrier waits outside producer bodies, and nested `InTurn`s. A producer warpgroup
    /// (see [`Stmt::Producer`]) takes no turns: it runs the body's control skeleton and producer bodies as
    /// anywhere else. On the GPU the turns are named barriers `2 + w` (256 threads: warpgroup w's sync and its
    /// predecessor's arrival), and warpgroup 0 holds the first turn.
    InTurn { body: Vec<Stmt> },
    /// Warp specialization of the consumers: only the block's first `count` warpgroups (threads
    /// `0..128 * count`) run `body`; the others skip it and go on to the next statement. What it is for: work
    /// one warpgroup does for all, whose result the others then read from shared memory (FlashMLA's decode: one
    /// warpgroup computes the scores and the softmax and stores the probabilities, and every warpgroup multiplies
    /// them by its half of the value columns), instead of every warpgroup repeating it on a replicated tile.
    ///
    /// Semantics: the CPU backends run the body in program order, once, as they run the whole block. On the GPU,
    /// the tiles and row vectors the body touches hold their values in the running warps only (the replicas in
    /// the skipping warpgroups keep stale values), so the validator requires that every tile and vector the body
    /// mentions is mentioned *only* inside such bodies of the same `count`, and lies on at most `4 * count`
    /// warps. What crosses to the other warpgroups goes through shared memory: a store in the body, then (outside
    /// it) an [`Stmt::AsyncWait`] when a `wgmma` reads it, and a [`Stmt::Barrier`]. The body holds scalar control
    /// (`let`, `for`, `if`; no assignment of variables from outside it, which the skipping warps would not see)
    /// and tile statements that a warpgroup runs on its own: `map`, `vec_map`, `reduce`, `mma`, `mma_async`,
    /// `mma_wait`, tile and vector loads and stores, `store_cols`. Not: barriers, copies and anything that
    /// spreads its work over the whole block (`copy_async`, TMA, mbarriers, `scan`, `fp4_gemv`, threads
    /// regions), `in_turn`, or another such body. The `mma_async` products the body starts complete inside it (a
    /// `mma_wait(0)` at its top level after the last): ptxas serializes every `wgmma` of a kernel whose products
    /// stay in flight across the branch. The kernel has at least `count + 1` whole warpgroups and no producer
    /// warp. Rendered as `if (threadIdx.x < 128 * count) { .. }`.
    FirstWarpgroups { count: u32, body: Vec<Stmt> },
    /// Threads regions only: `tensor[index] = value` (flat element index; the value converts to the tensor's
    /// dtype: floats round to nearest even, E4M3 saturates, ints wrap).
    StoreScalar { tensor: TensorId, index: Expr, value: Expr },
    /// Threads regions only: element (row, col) of tile `index` of a shared buffer `= value` (converted to the
    /// buffer's dtype as by `StoreScalar`).
    SharedStore { buf: SharedId, index: Expr, row: Expr, col: Expr, value: Expr },
    /// Threads regions only: an atomic read-modify-write of one element. With `fetch`, the statement also
    /// introduces that (per-thread) variable holding the element's value before the update.
    Atomic { target: AtomicTarget, op: AtomicOp, value: Expr, fetch: Option<VarId> },
    /// Threads regions only: introduce a per-thread array of `len` elements of type `ty`, all set to `init`.
    /// On the GPU it is a local C array (`float a[len]`): it stays in registers only when every index is a
    /// compile-time constant after unrolling (use unrolled loops with constant bounds), else it lives in
    /// local memory (slow, reported as stack frame by ptxas).
    LetArray { arr: ArrId, len: u32, ty: ScalarTy, init: Expr },
    /// Threads regions only: `arr[index] = value`.
    ArraySet { arr: ArrId, index: Expr, value: Expr },
    /// Threads regions only: `arr[at + j] = tensor[index + j]` for `j in 0..lanes`, as ONE global access of
    /// `lanes` elements (8 or 16 bytes: f32/i32/u32 x 2 or 4, bf16/f16 x 4 or 8, u8 x 8 or 16, i64/u64 x 2; on the
    /// GPU one `ld.global.v2/v4`). The array has the tensor's expression type (floats for float tensors, ints
    /// for int ones) and `at + lanes` elements at least; `at` is a constant, so the array stays in registers.
    /// Alignment: tensor bases are 16-byte aligned (checked at launch), so the access is aligned exactly when
    /// `index` is a multiple of `lanes`. The validator rejects an index it can prove is not; the CPU backends
    /// check every access (a typed error), where a GPU faults with a misaligned address.
    LoadWide { arr: ArrId, at: u32, tensor: TensorId, index: Expr, lanes: u32 },
    /// Threads regions only: `tensor[index + j] = arr[at + j]` for `j in 0..lanes` (converted to the tensor's
    /// dtype as by `StoreScalar`), as one 8- or 16-byte global store; the rules of [`Stmt::LoadWide`].
    StoreWide { tensor: TensorId, index: Expr, arr: ArrId, at: u32, lanes: u32 },
    /// Threads regions only: `arr[at + j] = buf[index](row, col + j)` for `j in 0..lanes`, as ONE shared access of
    /// 8 or 16 bytes (f32/i32 x 2 or 4, bf16/f16 x 4 or 8; on the GPU one `ld.shared.v2/v4`). The swizzles
    /// permute whole 16-byte chunks, so the access is contiguous when the buffer's rows are whole chunks (row
    /// bytes a multiple of 16) and `col` is a multiple of `lanes`; the validator rejects a `col` it can prove is
    /// not, the CPU backends check every access (a typed error). The array has the buffer's expression type and
    /// `at + lanes` elements at least (`at` a constant).
    SharedLoadWide { arr: ArrId, at: u32, buf: SharedId, index: Expr, row: Expr, col: Expr, lanes: u32 },
    /// Threads regions only: `buf[index](row, col + j) = arr[at + j]` for `j in 0..lanes` (converted to the
    /// buffer's dtype as by `SharedStore`), as one 8- or 16-byte shared store; the rules of
    /// [`Stmt::SharedLoadWide`].
    SharedStoreWide { buf: SharedId, index: Expr, row: Expr, col: Expr, arr: ArrId, at: u32, lanes: u32 },
    /// Threads regions only, at the region's top level (not inside its loops or conditionals, so every lane of
    /// every warp executes it): a warp shuffle or vote. Every thread evaluates `value` (after every thread of
    /// the block has run the region's preceding statements), then introduces the per-thread variable `var`
    /// holding the value of another lane of its warp (see [`WarpOp`]). `value` is an int or a float for the
    /// shuffles (the variable has its type), a bool for `Ballot` (the variable is an int). Rendered with
    /// `__shfl_*_sync` / `__ballot_sync` over the full warp.
    WarpShuffle { var: VarId, op: WarpOp, value: Expr },
    /// Threads regions only, at the region's top level: `__syncwarp()`. Orders the shared-memory accesses of a
    /// warp's lanes before it against those of the same warp's lanes after it (a write before it is visible to
    /// every lane of the warp after it; a read before it is done before any lane writes after it). The CPU
    /// interpreter runs the preceding statements for every thread first.
    WarpSync,
    /// Threads regions only: a GPU-scope memory fence (`__threadfence()`, PTX `fence.sc.gpu`). Orders this
    /// thread's global-memory accesses before it against those after it as every thread of the grid sees them,
    /// and (fences are cumulative) what this thread has observed before it, e.g. other threads' stores ordered
    /// before it by a [`Stmt::Barrier`]. The pattern it exists for: a block's threads store partial results, a
    /// barrier, then one thread fences and bumps a global counter with [`Stmt::Atomic`] (fetch); the block that
    /// sees the last count fences again and reads every block's partials. The CPU interpreter and the JIT run
    /// blocks and threads one after another, where it is a no-op.
    Fence,
    /// Decode MXFP4 weights from shared memory into a bf16 register tile `[R, C]` (C a multiple of 32, each
    /// warp's column band too): `tile[r, c] = e2m1(q) * 2^(s - 127)`, where `s = scales[r, c / 32]` (an E8M0
    /// byte; 255 gives NaN) and `q` is the nibble of column `c % 32` of block `c / 32` of row r in `words`
    /// (u32 `[R, C / 8]`, four words per block). With `packed` (the `mx::pack` layout, which puts each
    /// thread's eight values of a block in one word): word `4 (c / 32) + (c % 8) / 2`, value
    /// `2 ((c / 8) % 4) + c % 2` of it, at the bits [`crate::fp4`] gives; else (the bytes of SEMANTICS.md section 1.3 read as little-endian
    /// words): word `4 (c / 32) + (c % 32) / 8`, nibble `c % 8`. The value is exact in bf16 (or overflows to inf
    /// like the f32 product). `scales` is a u8 window `[R, C / 32]`.
    ///
    /// Two promises about the scale bytes let the GPU code drop work (the program must keep them; when one is
    /// broken the result is what the GPU computes, which the interpreter reproduces): `fold`, every byte is at
    /// most 128 or is 255 (one bf16x2 multiply by `2^(s-1)` per pair of values), and `finite`, no byte is 255.
    DequantFp4 { tile: TileId, words: SharedRef, scales: SharedRef, packed: bool, fold: bool, finite: bool },
    /// [`Stmt::DequantFp4`] with the words and scales read straight from global memory (streamed into
    /// registers, no shared staging): the same tile, column order, layouts (`packed`: the `mx::pack` layout, else
    /// the bytes of SEMANTICS.md section 1.3 as little-endian words) and `fold` / `finite` promises. `words` is a u32 view `[R, C / 8]`
    /// (four words per block) with `vec` 4 (its offset and row stride are multiples of four words: every block
    /// starts on 16 bytes), `scales` a u8 view `[R, C / 32]`. Element `[r, c]` is 0 when `r` is not below both
    /// views' `rows`, or its block `c / 32` is not below `words.cols / 4` or not below `scales.cols`. Every load of
    /// the tile is issued before the first value is decoded, so a thread has all of them in flight at once.
    ///
    /// With `prefetch`, a software pipeline over a loop of such statements: the GPU code decodes this
    /// statement's words and scales from registers that the previous execution of a prefetching stream statement
    /// into the same tile (with the same `packed`) filled from *its* prefetch views (or, when `prefetch.first`
    /// is true, loads them itself first), then issues the loads of this statement's prefetch views into those
    /// registers, so they are in flight during whatever follows (the product of the decoded tile, the next
    /// iteration's waits). The tile's value is always the decode of `words` and `scales`; the program promises
    /// that, whenever `first` is false, the previous prefetching execution's prefetch views covered the same
    /// valid elements with the same data (e.g. the views of the next K slice, next iteration) — the CPU
    /// backends, which always read `words` and `scales`, cannot see a broken promise. The prefetch views are
    /// bounds-checked like the others (a masked element, e.g. of a slice past K, is never read).
    DequantFp4Stream {
        tile: TileId,
        words: GlobalView,
        scales: GlobalView,
        packed: bool,
        fold: bool,
        finite: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefetch: Option<Box<Fp4Prefetch>>,
    },
    /// The product of streamed MXFP4 weights with a few bf16 activation rows, into shared memory (`out[r, t] =
    /// sum_c w[r, c] * x[t, c]`): an operator-specific statement, kept in an extension module of its own at every
    /// stage. Its semantics, schedule and fields: [`crate::fp4_gemv`].
    Fp4Gemv(Box<Fp4Gemv>),
}

/// The lane exchanges of [`Stmt::WarpShuffle`]; lane `l` of a warp receives:
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WarpOp {
    /// the value of lane `l ^ mask` (`mask` in 1..=31);
    ShflXor(u32),
    /// the value of lane `src` (a broadcast; `src` in 0..=31);
    ShflIdx(u32),
    /// the value of lane `l - delta`, or its own value when `l < delta` (`delta` in 1..=31);
    ShflUp(u32),
    /// the 32-bit mask (an int in `0..2^32`) whose bit `j` is lane `j`'s bool value.
    Ballot,
}

impl WarpOp {
    /// The printer's name of the exchange.
    pub fn name(self) -> String {
        match self {
            WarpOp::ShflXor(m) => format!("shfl_xor[{m}]"),
            WarpOp::ShflIdx(l) => format!("shfl_idx[{l}]"),
            WarpOp::ShflUp(d) => format!("shfl_up[{d}]"),
            WarpOp::Ballot => "ballot".into(),
        }
    }
    /// The lane whose value lane `lane` receives (None for `Ballot`).
    pub fn source_lane(self, lane: u32) -> Option<u32> {
        match self {
            WarpOp::ShflXor(m) => Some((lane ^ m) & 31),
            WarpOp::ShflIdx(l) => Some(l & 31),
            WarpOp::ShflUp(d) => Some(if lane >= d { lane - d } else { lane }),
            WarpOp::Ballot => None,
        }
    }
}

/// A complete kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    /// Threads per block (a multiple of 32).
    pub threads: u32,
    pub tensors: Vec<TensorParam>,
    pub syms: Vec<SymDecl>,
    /// Grid size; expressions over symbols only (plus [`Expr::Sym`] of the launcher-provided `NUM_SMS`
    /// symbol when the program declares one).
    pub grid: [Expr; 3],
    pub vars: Vec<VarDecl>,
    pub tiles: Vec<RegTileDecl>,
    pub vecs: Vec<VecDecl>,
    pub shared: Vec<SharedDecl>,
    /// Per-thread register arrays (declared by [`Stmt::LetArray`] inside threads regions).
    #[serde(default)]
    pub arrays: Vec<ArrayDecl>,
    pub body: Vec<Stmt>,
    /// The knob values this kernel was built with (for printing, hashing and results).
    pub knobs: Knobs,
    /// Blocks per SM the GPU code is compiled to fit (`__launch_bounds__(threads, min_blocks_per_sm)`: ptxas caps the
    /// registers per thread at what that many blocks leave); 0: no cap beyond the thread count. No effect on
    /// the CPU backends.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_blocks_per_sm: u32,
    /// Shared-memory barriers ([`crate::tma`]), placed after the shared buffers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mbarriers: Vec<MbarDecl>,
    /// TMA descriptors: one `CUtensorMap` kernel argument each, after the symbols.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_maps: Vec<TensorMapDecl>,
    /// Thread-block cluster shape (blocks per cluster along x, y, z; see [`crate::cluster`]); `[1, 1, 1]`: none.
    #[serde(default = "crate::cluster::no_cluster", skip_serializing_if = "crate::cluster::is_no_cluster")]
    pub cluster: [u32; 3],
    /// Warp specialization: a producer warpgroup past the `threads` consumer threads runs the [`Stmt::Producer`]
    /// bodies (see there); the block is launched with [`Kernel::launch_threads`] threads.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub producer_warp: bool,
    /// Kernels without a producer warp: the warpgroup whose first thread is the *elected* thread (thread
    /// `128 * elected_warpgroup`) that issues the single-thread operations (TMA copies, `expect_tx` arrivals,
    /// elected mbarrier waits, barrier initialization); 0: thread 0. A kernel whose warpgroup 0 carries the
    /// critical path (e.g. a [`Stmt::FirstWarpgroups`] body of 1) moves that work to a warpgroup that waits
    /// anyway. No effect on the CPU backends, which run the block as one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elected_warpgroup: u32,
    /// How the GPU code of [`Stmt::Mma`] (16-bit `mma.sync`) addresses its `ldmatrix` operand loads: false, each
    /// load computes its swizzled shared offset; true, each thread computes its offsets once per product and every
    /// load adds a constant step (the prelude's `mma_origins.cuh`: the same loads and results, fewer instructions).
    /// A kernel choice rather than the renderer's so that kernels whose tuned records were measured with the
    /// per-load form keep their source. No effect on the CPU backends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mma_origins: bool,
    /// How the GPU code of a 16-byte [`Stmt::StoreWide`] (global) stores: false, through a `uint4` store that the
    /// compiler may split into narrower stores (seen: four 4-byte stores on one of two unrolled rows, each filling a
    /// 32-byte sector in parts); true, by one `st.global.v4.b32` in inline PTX (the prelude's `st_wide_v.cuh`),
    /// which it cannot split. The same values in the same places. A kernel choice rather than the renderer's so that
    /// kernels whose tuned records were measured with the plain form keep their source. No effect on the CPU
    /// backends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned_wide_stores: bool,
}

pub(crate) fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// Threads of the producer warpgroup of a producer-warp kernel (see [`Stmt::Producer`]).
pub const PRODUCER_THREADS: u32 = 128;

/// Shared buffers start at multiples of this many bytes.
pub const SHARED_ALIGN: usize = 128;
/// Swizzled buffers with 128-byte rows start at multiples of this (the `wgmma` 128-byte swizzle atom: 8 rows).
pub const SWIZZLE_ATOM_ALIGN: usize = 1024;

impl Kernel {
    /// Warps per block.
    pub fn warps(&self) -> u32 {
        self.threads / 32
    }

    /// Threads a block is launched with: the consumer `threads`, plus the producer warpgroup's 128 (see
    /// [`Stmt::Producer`]).
    pub fn launch_threads(&self) -> u32 {
        self.threads + if self.producer_warp { PRODUCER_THREADS } else { 0 }
    }

    /// Blocks per cluster (1 without a cluster shape).
    pub fn cluster_size(&self) -> u32 {
        self.cluster.iter().product()
    }

    /// Byte offset of each shared buffer in the block's dynamic shared memory, and the total (barriers
    /// included).
    pub fn shared_layout(&self) -> (Vec<usize>, usize) {
        let (offsets, end) = self.buffer_layout();
        let bars: u32 = self.mbarriers.iter().map(|m| m.count).sum();
        let total = if bars > 0 { end.next_multiple_of(SHARED_ALIGN) + 8 * bars as usize } else { end };
        (offsets, total)
    }

    /// Byte offset of each barrier declaration in dynamic shared memory (8 bytes per barrier, after the
    /// buffers).
    pub fn mbar_layout(&self) -> Vec<usize> {
        let mut at = self.buffer_layout().1.next_multiple_of(SHARED_ALIGN);
        self.mbarriers
            .iter()
            .map(|m| {
                let o = at;
                at += 8 * m.count as usize;
                o
            })
            .collect()
    }

    /// The shared buffers' offsets and where they end.
    fn buffer_layout(&self) -> (Vec<usize>, usize) {
        let mut offsets = Vec::with_capacity(self.shared.len());
        let mut at = 0usize;
        for (i, s) in self.shared.iter().enumerate() {
            if let Some(a) = s.alias {
                // Roots are earlier buffers (checked by `validate`; a bad one is placed at 0 here).
                let root = offsets.get(a.of.0 as usize).copied().unwrap_or(0);
                offsets.push(root + a.byte_offset as usize);
                continue;
            }
            // A root may hold 128-byte-swizzled aliases: it starts on a swizzle atom too.
            let is_root = self.shared.iter().any(|t| t.alias.is_some_and(|a| a.of.0 as usize == i));
            if s.is_swizzle_128b() || is_root {
                at = at.next_multiple_of(SWIZZLE_ATOM_ALIGN);
            }
            offsets.push(at);
            at += s.bytes().next_multiple_of(SHARED_ALIGN);
        }
        (offsets, at)
    }

    /// For each shared buffer, the other buffers whose storage overlaps its own ([`SharedAlias`]); empty for
    /// a buffer without aliases.
    pub fn shared_overlaps(&self) -> Vec<Vec<usize>> {
        let (offsets, _) = self.shared_layout();
        let root = |i: usize| self.shared[i].alias.map_or(i, |a| a.of.0 as usize);
        let range = |i: usize| (offsets[i], offsets[i] + self.shared[i].bytes());
        (0..self.shared.len())
            .map(|i| {
                (0..self.shared.len())
                    .filter(|&j| {
                        let (a, b) = (range(i), range(j));
                        j != i && root(j) == root(i) && a.0 < b.1 && b.0 < a.1
                    })
                    .collect()
            })
            .collect()
    }

    /// Dynamic shared memory the kernel needs per block.
    pub fn shared_bytes(&self) -> usize {
        self.shared_layout().1
    }

    /// Look up a symbol by name.
    pub fn sym(&self, name: &str) -> Option<SymId> {
        self.syms.iter().position(|s| s.name == name).map(|i| SymId(i as u32))
    }

    /// Look up a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<TensorId> {
        self.tensors.iter().position(|t| t.name == name).map(|i| TensorId(i as u32))
    }

    /// Whether any statement (nested ones included) satisfies `pred`.
    pub fn any_stmt(&self, pred: impl Fn(&Stmt) -> bool) -> bool {
        let mut any = false;
        self.visit_stmts(&mut |s| any |= pred(s));
        any
    }

    /// Visit every statement, parents before children.
    pub fn visit_stmts(&self, f: &mut impl FnMut(&Stmt)) {
        self.body.iter().for_each(|s| s.visit(f));
    }

    /// Whether the kernel waits for the grid before it ([`Stmt::GridDep`] `Wait`): the runtime then launches it with
    /// programmatic stream serialization.
    pub fn waits_on_prior_grid(&self) -> bool {
        self.any_stmt(|s| matches!(s, Stmt::GridDep(GridDep::Wait)))
    }

    /// This kernel with `deps` put first in its body (a programmatic dependent launch, [`Stmt::GridDep`]) and
    /// `suffix` added to its name (the statements change the kernel, so its name must too).
    pub fn with_grid_deps(mut self, deps: &[GridDep], suffix: &str) -> Kernel {
        self.body.splice(0..0, deps.iter().map(|&d| Stmt::GridDep(d)));
        self.name.push_str(suffix);
        self
    }
}

/// The two halves of a programmatic dependent launch ([`Stmt::GridDep`]), PTX `griddepcontrol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GridDep {
    /// `griddepcontrol.wait`: wait until the prerequisite grid (the one launched before on the stream) has
    /// completed and its memory operations are visible.
    Wait,
    /// `griddepcontrol.launch_dependents`: the dependent grid may launch once every block of this one has said so
    /// or exited (before the first block of a grid has run it, none of the dependent grid runs: no deadlock).
    LaunchDependents,
}

/// The statement families. Each stage (validator, printer, interpreter, JIT, CUDA renderer) keeps a family's
/// statements in one file of its own, so a new statement touches one file per stage; [`Stmt::family`] says
/// which family a statement belongs to. The stages' folders: `ir/src/validate/stmts/`, `ir/src/print/`,
/// `codegen/src/cpu/interp/` (`tiles.rs`, `tma.rs`, `mx.rs`, `threads.rs`), the JIT's lowering
/// `codegen/src/cpu/jit/lower/stmts/` and its runtime `codegen/src/cpu/jit/rt/`, and
/// `codegen/src/cuda/render/` (`control.rs`, `sync.rs`, `tiles.rs`, `mma.rs`, `mx.rs`, `threads.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StmtFamily {
    /// Scalar control and nested bodies: `Let`, `Assign`, `For`, `If`, `InTurn`, `FirstWarpgroups`, `Producer`.
    Control,
    /// Barriers and copies: block and cluster barriers, `cp.async` copies and their commit and wait, mbarriers,
    /// the TMA's bulk loads and stores.
    Sync,
    /// Register tiles and row vectors: maps, reductions, scans, loads and stores.
    Tiles,
    /// Tensor-core products and their wait: `Mma`, `MmaAsync`, `MmaWait`.
    Mma,
    /// The MXFP4 statements: `DequantFp4`, `DequantFp4Stream`, `Fp4Gemv`.
    Mx,
    /// Threads regions and the statements of threads: per-thread stores, atomics, arrays, wide accesses, warp
    /// shuffles and syncs, fences.
    Threads,
}

impl Stmt {
    /// The family of this statement (see [`StmtFamily`]).
    pub fn family(&self) -> StmtFamily {
        match self {
            Stmt::Let { .. }
            | Stmt::Assign { .. }
            | Stmt::For { .. }
            | Stmt::If { .. }
            | Stmt::InTurn { .. }
            | Stmt::FirstWarpgroups { .. }
            | Stmt::Producer { .. } => StmtFamily::Control,
            Stmt::Barrier
            | Stmt::AsyncCommit
            | Stmt::AsyncWait { .. }
            | Stmt::CopyAsync { .. }
            | Stmt::MbarInit { .. }
            | Stmt::MbarArriveExpectTx { .. }
            | Stmt::MbarArrive { .. }
            | Stmt::MbarWait { .. }
            | Stmt::TmaLoad(_)
            | Stmt::TmaStore(_)
            | Stmt::TmaStoreWait { .. }
            | Stmt::MbarArriveCluster { .. }
            | Stmt::ClusterSync
            | Stmt::GridDep(_) => StmtFamily::Sync,
            Stmt::Map { .. }
            | Stmt::VecMap { .. }
            | Stmt::Reduce { .. }
            | Stmt::Load { .. }
            | Stmt::Store { .. }
            | Stmt::StoreCols { .. }
            | Stmt::LoadVec { .. }
            | Stmt::StoreVec { .. }
            | Stmt::Scan { .. } => StmtFamily::Tiles,
            Stmt::Mma { .. } | Stmt::MmaAsync { .. } | Stmt::MmaWait { .. } => StmtFamily::Mma,
            Stmt::DequantFp4 { .. } | Stmt::DequantFp4Stream { .. } | Stmt::Fp4Gemv(_) => StmtFamily::Mx,
            Stmt::Threads { .. }
            | Stmt::StoreScalar { .. }
            | Stmt::SharedStore { .. }
            | Stmt::Atomic { .. }
            | Stmt::LetArray { .. }
            | Stmt::ArraySet { .. }
            | Stmt::LoadWide { .. }
            | Stmt::StoreWide { .. }
            | Stmt::SharedLoadWide { .. }
            | Stmt::SharedStoreWide { .. }
            | Stmt::WarpShuffle { .. }
            | Stmt::WarpSync
            | Stmt::Fence => StmtFamily::Threads,
        }
    }

    /// The statement lists nested in this statement (a loop's or region's body, both branches of an `if`; none
    /// for the others), in program order.
    pub fn bodies(&self) -> Vec<&[Stmt]> {
        match self {
            Stmt::For { body, .. }
            | Stmt::Threads { body }
            | Stmt::Producer { body }
            | Stmt::InTurn { body }
            | Stmt::FirstWarpgroups { body, .. } => vec![body],
            Stmt::If { then_body, else_body, .. } => vec![then_body, else_body],
            _ => vec![],
        }
    }

    /// Visit this statement and every statement nested in it, parents before children.
    pub fn visit(&self, f: &mut impl FnMut(&Stmt)) {
        f(self);
        for body in self.bodies() {
            body.iter().for_each(|s| s.visit(f));
        }
    }
}
