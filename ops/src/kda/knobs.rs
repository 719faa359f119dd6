//! The knobs of `kda`: their declaration ([`KdaKnobs`]: the knob space, the default record and what a record
//! written before a knob existed means) and [`Launch`], the knobs resolved and checked for one problem.

use super::*;
use crate::typed_knobs::{knob_enum, knob_set};

/// The knob `GSWZ` (`pairs` | `rows`, absent = `pairs`, the default), not an axis of the knob space (so the
/// tuner's samples, which lack it, take the default): see [`Launch::g_pairs`].
pub const GSWZ_KNOB: &str = "GSWZ";

/// The knob `SGRID` (`vb` | `seqs`, absent = `vb`), accepted but not an axis of the knob space: the order of the
/// state pass's blocks, see [`state::StateGrid`]. `vb` is as fast or faster everywhere it was timed (H100,
/// 2026-12-06, same run, ms: B1 T8192 H96 with every in-kernel option 2.035 vs 2.066 `seqs`, B4 T4096 H64 2.742 vs
/// 2.997, varlen 8 x 1024 H96 2.087 vs 2.581): with more state blocks than fit on the GPU at once, `seqs` puts a
/// pair's value blocks in different waves and each reads the pair's scratch from DRAM. Records written before it
/// (codegen 8 or earlier) no longer match their keys, so an absent knob need not mean the old grid.
pub const SGRID_KNOB: &str = "SGRID";

/// The knob `USTATE` (`0` | `1`, absent = `0`), accepted but not an axis of the knob space: where `U = (I + L)^-1
/// Diag(beta) v` is formed, see [`UPlace`].
pub const USTATE_KNOB: &str = "USTATE";

/// The knob `SLOAD` (`cp` | `tma` | `auto`, default `auto`, absent = `cp`), accepted but not an axis of the knob
/// space: how the state pass loads its chunk operands, see [`StateLoads`] (issue 42, 2026-12-07).
pub const SLOAD_KNOB: &str = "SLOAD";

knob_enum! {
    /// `SLOAD`: the state pass's chunk loads.
    pub enum StateLoads: str {
        /// Every block copies all of its chunk's operands with `cp.async` (W, Qbar, Kbar, P and gamma once per value
        /// block: L2 serves the repeats).
        Cp = "cp",
        /// The value blocks of a (sequence, value head) pair form a thread-block cluster; W, Qbar, Kbar and gamma are
        /// copied once for the cluster by TMA and multicast into every block; U and P stay on `cp.async` (see
        /// [`state_tma`]). Needs the two-barrier ring (`STAGES` 2 or 3, `SYNC=2`), `SGRID=vb`,
        /// `USTATE=0`, K a multiple of 64 and at most 8 value blocks a pair.
        Tma = "tma",
        /// `tma` where a pair has two value blocks (BV = V/2) and the pass allows it (`tmau` where those blocks are
        /// 64 columns wide), else `cp`. Measured on an H100 (2026-12-07 09:50 UTC,
        /// `lab/2026-12-07/0950-h100-kda-candidates/`, FlashKDA's options, the state pass alone): clusters of 2
        /// (BV=64) 0.673 -> 0.643 ms at B4 T4096 H64, 0.524 -> 0.514 at varlen 8 x 1024 H96, 0.656 -> 0.622 at the
        /// mixed varlen batch; clusters of 4 (BV=32) 0.600 -> 1.030 at B1 T8192 H96, and BV=32 clusters at the
        /// BV=64 presets 0.898 / 0.682. U by TMA as well (`tmau`, 2026-12-07 22:22 UTC,
        /// `lab/2026-12-07/2221-h100-kda-ab/`): 0.646 -> 0.634, 0.517 -> 0.495 and 0.622 -> 0.596 at those three.
        Auto = "auto",
        /// As `tma`, and each block's U (its C x 64 columns of `[W | U]`) by a TMA box of its own instead of
        /// `cp.async`: no per-thread copy of U a chunk. Needs BV = 64 (one 128-byte-swizzled box a row).
        TmaU = "tmau",
    }
}

knob_enum! {
    /// `ARENA`: the intra-chunk kernel's shared layout.
    pub enum IntraLayout: u32 {
        /// Separate buffers (191 KB at chunk 64, K = V = 128).
        Separate = 0,
        /// The phase-aliased arena with K-chunked level operands (108 KB).
        Arena = 1,
        /// The separate-buffer kernel with its phase-disjoint buffers aliased where that applies (see
        /// [`Launch::slim`]), else as `Separate`.
        Slim = 2,
    }
}

knob_enum! {
    /// `USTATE`: which kernel forms `U = X_u = (I + L)^-1 Diag(beta) v` (issue 42).
    pub enum UPlace: u32 {
        /// The intra kernel: it reads v, runs both halves of the block substitution and writes `[W | U]` to the
        /// scratch (C x (K + V) per chunk and value head), which the state pass reads back.
        Intra = 0,
        /// The state pass: the intra kernel writes W (C x K) and the U substitution's factors instead of U (the
        /// diagonal inverses' `N_ii`, C x 16, and the strictly lower blocks of L, (C - 16) x (C - 16), in the
        /// scratch's 16-bit type, and beta as applied, C f32); each state-pass block reads its value block of v
        /// and forms `X_u` for its BV columns with the same substitution before the chunk's `W S` (see
        /// [`state`](super::state)). The same bits as `Intra` on the CPU backends.
        State = 1,
    }
}

knob_enum! {
    /// `XDIAG`: the exact path's diagonal tiles.
    pub enum ExactDiag: u32 {
        /// Always the level hierarchy.
        Hierarchy = 0,
        /// The safe path's midpoint anchor on every chunk whose gates allow it, else the hierarchy.
        Adaptive = 1,
    }
}

knob_enum! {
    /// `ODIAG`: the chunk-32 off-diagonal tile.
    pub enum OffDiag: u32 {
        /// A level pass.
        Levels = 0,
        /// From the diagonal pass's midpoint-anchored operands (where that applies, see [`Launch::midoff`]).
        Midpoint = 1,
    }
}

knob_enum! {
    /// `SYNC`: the state pass's barriers per chunk with a ring.
    pub enum StateSync: u32 {
        /// Two barriers (rings only).
        Two = 2,
        /// Four barriers (the old order).
        Four = 4,
    }
}

knob_enum! {
    /// `EX2`: the intra kernel's `2^x`.
    pub enum Exp2: str {
        /// One `ex2.approx.ftz` (results below 2^-126 flushed to 0).
        Ftz = "ftz",
        /// `exp2f` (range test and two scalings for subnormal results).
        Exact = "exact",
    }
}

knob_enum! {
    /// `OPDT`, `LVLDT`: a 16-bit operand type.
    pub enum Half: str {
        F16 = "f16",
        Bf16 = "bf16",
    }
}

impl Half {
    /// The IR type.
    pub fn dtype(self) -> DType {
        match self {
            Half::F16 => DType::F16,
            Half::Bf16 => DType::Bf16,
        }
    }
}

knob_enum! {
    /// `GSWZ`: the layout of the intra kernel's f32 G~ buffer.
    pub enum GSwizzle: str {
        /// The 16-bit operands' XOR swizzle (2-way bank conflicts on its 8-byte pair accesses).
        Rows = "rows",
        /// `Swizzle::Xor16BPairs` (no conflicts).
        Pairs = "pairs",
    }
}

knob_enum! {
    /// `FULLC`: how the intra kernel treats a full chunk (accepted, not an axis; absent = `0`).
    pub enum FullChunks: u32 {
        /// One code path for every chunk, its length a runtime value (every map masks `row < len`, every load
        /// and store checks its rows against it, the midpoint anchors are computed per element).
        Generic = 0,
        /// A chunk of C tokens runs a second copy of the phases with the length the constant C (the masks, the
        /// row bounds and the anchors fold away); partial chunks (a sequence's last) run the generic copy. The
        /// same arithmetic on the same values: the same bits (see [`intra::IntraOpts::full_chunks`]).
        Specialised = 1,
    }
}

knob_enum! {
    /// `GSIG`: the sigmoid of the in-kernel `lb * sigmoid(..)` gate forms (accepted, not an axis; absent = `exact`).
    pub enum GateSigmoid: str {
        /// `1 / (1 + expf(-z))` (IEEE `expf` and division: their slow paths branch per element).
        Exact = "exact",
        /// `rsqrt(1 + 2^(-z log2 e))^2` from `ex2.approx.ftz` and `rsqrt.approx` (five instructions, relative
        /// error ~1e-6, where the check allows 5e-3), with `exp(A_log)` taken once per block.
        Fast = "fast",
    }
}

knob_enum! {
    /// `L2R`: the in-kernel L2 norms' column loop (accepted, not an axis; absent = `loop`).
    pub enum L2Rows: str {
        /// A runtime loop per row (`for i = lane; i < K; i += 32`).
        Loop = "loop",
        /// Unrolled: K/32 independent loads a row and lane, the rows of a warp in straight-line code.
        Unrolled = "unrolled",
    }
}

knob_enum! {
    /// `IMAP`: how the intra kernel's element-wise maps over C x K run (accepted, not an axis; absent = `tiles`).
    pub enum IntraMaps: str {
        /// On MMA-fragment register tiles, one K-chunk of 32 columns at a time: each thread moves 2-element pairs
        /// with a swizzled address per pair and stores Qbar / Kbar as 4-byte pairs; the L2 norms are a pass of
        /// their own (a warp a row).
        Tiles = "tiles",
        /// Qbar, Kbar and the L2 norms in one row-major pass: each thread takes 8 consecutive columns of a row
        /// (16-byte shared loads of q, k and G~, 16-byte global stores of Qbar and Kbar); the norms are summed from
        /// the registers that load q and k (the K/8 lanes of a row reduce by shuffles).
        Rows = "rows",
        /// `rows`, and (safe path with the midpoint off-diagonal tile, `ODIAG=1`, `ARENA` 0 or 2) the diagonal
        /// tiles' operands built in the same pass from the same registers, as 16-byte shared stores.
        Ops = "ops",
        /// `ops`, and the gate form in the same row layout (16-byte global loads of g and the bias, 16-byte stores
        /// of the gate to sG), scanned down the columns in place (2026-12-07, issue 42): the same bits as `ops`.
        Gate = "gate",
    }
}

knob_enum! {
    /// `IFOLD`: per-row and per-block factors of the intra kernel's element-wise maps folded once (issue 42,
    /// 2026-12-07; accepted, not an axis; absent = `0`).
    pub enum IntraFold: u32 {
        /// Each element's expression as written: the norm factor multiplied into each operand, the gate's
        /// `a`, `-log2 e`, `lb` and `log2 e` one at a time.
        Off = 0,
        /// The row pass (`IMAP=rows`/`ops`) multiplies q and k by their rows' norm factors once and builds every
        /// operand from those; the fast gate sigmoid (`GSIG=fast`) takes `-a log2 e` and `lb log2 e` as two
        /// block constants: 4 multiplies an element of the row pass and 2 of the gate fewer, other roundings.
        On = 1,
        /// `1`, and (`IMAP=ops` in the full-chunk copy, `FULLC=1`) the block substitution's `R = beta Gamma k n_k`
        /// built by the row pass from the registers it holds (k n_k, `2^G~` of Qbar) and written over G~ in sG,
        /// which the substitution then reads instead of k, G~, beta and n_k.
        Rows = 2,
    }
}

knob_enum! {
    /// `ISOLVE`: the intra kernel's forward substitution of the diagonal blocks and the segments around it (issue
    /// 42, 2026-12-07; accepted, not an axis; default `1`; absent = `0`). Every value computes the same values in
    /// the same order: the same bits.
    pub enum IntraSolve: u32 {
        /// Each L element by its own 4-byte shared load, each N element by its own 2-byte store.
        Off = 0,
        /// The rows of L by 16-byte shared loads, N stored transposed (a thread's column is a row of 16 values:
        /// two 16-byte stores) and read by the block substitution as a transposed A operand (`USTATE=0`).
        Wide = 1,
        /// `1`, and (safe path, `ODIAG=1`, `ARENA=2`) the off-diagonal tile's products moved into the segment of
        /// the diagonal products (run by two warps while six waited at the barrier): one barrier fewer.
        Early = 2,
    }
}

knob_enum! {
    /// `IREPL`: what the intra kernel's warps past a register tile's warp grid do with it (issue 42, 2026-12-07;
    /// accepted, not an axis; default `1`; absent = `0`). The same bits either way.
    pub enum IntraReplicas: u32 {
        /// They compute a replica of it (the diagonal tiles on 2 of 8 warps at chunk 32: 6 replicas each; the [C, C]
        /// totals on 4: 4 replicas), issuing its loads, maps and products.
        Compute = 0,
        /// The diagonal tiles (P, L, P's exact diagonal) and the [C, C] totals are solo tiles
        /// ([`k3k_ir::RegTileDecl::solo`]): their replica warps skip the statements that write them. With
        /// `ISOLVE=1` the forward substitution moves to the block's last C threads where those own neither (at chunk
        /// 32 on 8 warps: warp 7), beside the off-diagonal products instead of after them on warp 0.
        Idle = 1,
    }
}

knob_enum! {
    /// `MADDR`: how the intra kernel's `mma.sync` products address their `ldmatrix` operand loads (issue 42,
    /// 2026-12-07; accepted, not an axis; default and absent `load`). The same loads and bits either way. `origin`
    /// passes the GPU checks and times the same as `load` (H100, 2026-12-07 19:59 UTC, interleaved runs: 0.995-1.002x
    /// at the two older safe presets and three FlashKDA presets, `lab/2026-12-07/1959-h100-mma-origins/`): the
    /// instructions it saves are not on the kernel's critical path, so the default stays `load`.
    /// (The state pass keeps the per-load form: with origins its registers fell at BV=32, 153-157 -> 127-128, but
    /// its `CHUNK=64,BV=128,W2=16` point spilled 4 bytes; not measured yet.)
    pub enum MmaAddressing: str {
        /// Each load computes its swizzled shared offset (the form every record before the knob was measured with).
        Load = "load",
        /// Each thread computes its offsets once per product and every load adds a constant step
        /// ([`k3k_ir::Kernel::mma_origins`]): at FlashKDA's options (B4 T4096 H64, ptxas 13.0) the intra kernel's
        /// SASS 5,288 -> 5,152 instructions (its four K = 128 products 475 -> 300).
        Origin = "origin",
    }
}

knob_enum! {
    /// `IWU` (accepted, not an axis; default `wide`, absent `auto`): how the intra kernel stores W and U to the
    /// scratch. The ncu profile of the H100 (2026-12-07 21:47 UTC, B4 T4096 H64, FlashKDA's options) counted 35%
    /// of the intra kernel's L2 sectors as excess, from 4-byte stores that fill a sector each in parts; the pair
    /// stores of W and U are half of those. `wide` took the intra kernel 0.746 -> 0.719 ms at B1 T8192 H96,
    /// 1.005 -> 0.971 at B4 T4096 H64, 0.746 -> 0.720 at varlen 8 x 1024 H96 (H100, 2026-12-07 22:22 UTC,
    /// `lab/2026-12-07/2221-h100-kda-ab/`, the same bits).
    pub enum IntraWuStores: str {
        /// Vector stores (fragments regrouped across a quad: 16 bytes a lane, or 8 where a warp's tile is 16
        /// columns wide, as at 8 warps; either way a quad writes whole 32-byte sectors) on the plain variants
        /// (precomputed gates, no in-kernel norms or beta sigmoid); 4-byte pair stores with the in-kernel options,
        /// where the regrouping's temporaries spilled under the 80-register cap when they were measured
        /// (2026-12-04).
        Auto = "auto",
        /// Those vector stores on every variant (no spill at FlashKDA's options with ptxas 13.0, 2026-12-07).
        Wide = "wide",
        /// `wide`, and every 16-byte row store of the intra kernel (Qbar and Kbar, `Stmt::StoreWide`) by one
        /// `st.global.v4` in inline PTX ([`k3k_ir::Kernel::pinned_wide_stores`]): with the plain `uint4` store the
        /// compiler split one of each two unrolled rows into four 4-byte stores (ptxas 13.0, FlashKDA's options).
        /// (W and U go through the register-tile stores, whose vector stores are inline PTX already.)
        Pinned = "pinned",
    }
}

knob_set! {
    /// The knobs of `kda`, read from a record by [`KdaKnobs::from_knobs`] and resolved for a problem by
    /// [`Launch::resolve`]. `absent` is what a record written before the knob existed means.
    ///
    /// The default record: chunk and intra warps automatic (see [`Launch::resolve`]). `ARENA=2` (the slim intra
    /// layout, three blocks per SM where it applies, else the separate buffers) measured faster on every safe preset
    /// of the H200 (2026-12-01, same run: T8192 H96 1.685 vs 1.790 ms, T65536 H32 5.795 vs 6.111, T16384 H32 1.461
    /// vs 1.543, B4 T4096 H64 2.329 vs 2.477).
    pub struct KdaKnobs for "kda" {
        /// `CHUNK`: tokens per chunk (0: automatic).
        chunk: u32 = "CHUNK" => {
            axis: "chunk size (tokens per chunk); 0 = auto: 32 at K = V = 128 (measured fastest), else 64" [0, 64, 32],
            accepts: "16: FlashKDA's chunk (one 16x16 diagonal tile a chunk: no off-diagonal tile and no block \
             substitution in the intra kernel, twice the state pass's steps; W1 auto 8; not with USTATE=1)"
                [16],
            default: 0,
        },
        /// `W1`: warps of the intra-chunk kernel (0: automatic).
        w1: u32 = "W1" => {
            axis: "warps of the intra-chunk kernel; 0 = auto: 8 at chunk 32 with K = V = 128, else 16" [0, 16, 8, 4],
            default: 0,
        },
        /// `ARENA` (absent: the separate buffers).
        arena: IntraLayout = "ARENA" => {
            axis: "intra-chunk shared layout: 0 separate buffers (191 KB at chunk 64, K = V = 128), 1 phase-aliased arena \
             with K-chunked level operands (108 KB; two blocks per SM at W1 <= 8), 2 the separate-buffer kernel with \
             its phase-disjoint buffers aliased (safe path, chunk 32, ODIAG=1, W1 <= 8, V <= K: 71 KB, three blocks per SM; \
             elsewhere as 0)"
                [IntraLayout::Separate, IntraLayout::Arena, IntraLayout::Slim],
            default: IntraLayout::Slim,
            absent: IntraLayout::Separate,
        },
        /// `XDIAG` (absent: the hierarchy).
        xdiag: ExactDiag = "XDIAG" => {
            axis: "exact path's diagonal tiles: 1 per chunk the safe path's midpoint anchor when every |G~_r - G~_anchor| is \
             within 48 (log2 units), else the level hierarchy, all tile operands bf16; 0 always the hierarchy with \
             LVLDT operands (the old path)"
                [ExactDiag::Adaptive, ExactDiag::Hierarchy],
            default: ExactDiag::Adaptive,
            absent: ExactDiag::Hierarchy,
        },
        /// `BV`: value columns per state-pass block (0: automatic).
        bv: u32 = "BV" => {
            axis: "value columns per state-pass block (0: chosen from the problem)" [0, 16, 32, 64],
            accepts: "128: one state-pass block per (sequence, value head), reading each chunk's operands once (with W2=16)"
                [128],
            default: 0,
        },
        /// `W2`: warps of the state-pass kernel (0: automatic).
        w2: u32 = "W2" => {
            axis: "warps of the state-pass kernel (0: chosen from the problem)" [0, 4, 8, 16],
            default: 0,
        },
        /// `STAGES` (absent: 1, the single-buffer pass): the state pass's operand ring (0: automatic).
        stages: u32 = "STAGES" => {
            axis: "state-pass operand buffers: 1 (two load groups, each refilled after its last reader), 2 (double-buffered \
             chunks), 3 (a ring of three: loads two chunks ahead), 0 (the deepest that keeps the resident blocks the \
             grid needs, see Launch::resolve)"
                [0, 1, 2, 3],
            default: 0,
            absent: 1,
        },
        /// `ODIAG` (absent: the level pass).
        odiag: OffDiag = "ODIAG" => {
            axis: "chunk 32 with ARENA=0, safe path and XDIAG chunks within the bound: 1 the off-diagonal 16x16 tile from the \
             diagonal pass's midpoint-anchored operands plus one 16-row key operand (no level pass), 0 the level pass"
                [OffDiag::Midpoint, OffDiag::Levels],
            default: OffDiag::Midpoint,
            absent: OffDiag::Levels,
        },
        /// `EX2` (absent: exp2f).
        ex2: Exp2 = "EX2" => {
            axis: "intra-chunk 2^x: ftz (one ex2.approx.ftz, results below 2^-126 flushed to 0) or exact (exp2f: range test \
             and two scalings for subnormal results)"
                [Exp2::Ftz, Exp2::Exact],
            default: Exp2::Ftz,
            absent: Exp2::Exact,
        },
        /// `SYNC` (absent: four barriers).
        sync: StateSync = "SYNC" => {
            axis: "state-pass barriers per chunk with a ring (STAGES >= 2): 2 (wait, S store, one barrier, loads of chunk j + \
             S - 1; Vt barrier) or 4 (the old order: barriers after the wait, the S store, Vt and at the end)"
                [StateSync::Two, StateSync::Four],
            default: StateSync::Two,
            absent: StateSync::Four,
        },
        /// `OPDT`: the scratch and the tensor-core operands built from it.
        op_dt: Half = "OPDT" => {
            axis: "16-bit type of the scratch and of the tensor-core operands built from it" [Half::F16, Half::Bf16],
            default: Half::F16,
        },
        /// `LVLDT`: the off-diagonal and exact-diagonal tile operands.
        lvl_dt: Half = "LVLDT" => {
            axis: "16-bit type of the off-diagonal and exact-diagonal tile operands" [Half::F16, Half::Bf16],
            default: Half::F16,
        },
        /// `SGRID` (accepted, not an axis; absent: `vb`, see [`SGRID_KNOB`]).
        state_grid: state::StateGrid = SGRID_KNOB => {
            accepts: "state-pass block order: vb (absent: grid V/BV x N x HV, a pair's value blocks consecutive, so they \
             share its chunk operands in L2 also when the grid takes several waves) or seqs (N x HV x V/BV)"
                [state::StateGrid::ValueBlocks, state::StateGrid::Seqs],
            absent: state::StateGrid::ValueBlocks,
        },
        /// `FULLC` (accepted, not an axis; default `1`; absent: one code path for every chunk). `FULLC=1`,
        /// `GSIG=fast` and `L2R=unrolled` became the defaults on the H100 measurement of 2026-12-07 03:01 UTC
        /// (commit 409f816, same run as FlashKDA): the intra kernel 1.250 -> 1.146 ms at B1 T8192 H96 with the
        /// first two (the whole plan 1.872 -> 1.755), 3.409 -> 3.125 at B1 T65536 H32, 1.668 -> 1.533 at B4 T4096
        /// H64, and L2R=unrolled another 1.065 -> 1.042 (measured beside USTATE=1); same errors against f64.
        full_chunks: FullChunks = "FULLC" => {
            accepts: "intra kernel: 1 full chunks run a copy of the phases with the chunk length a constant (masks, row \
             bounds and anchors folded; partial chunks the generic copy) where W1 >= 8, EX2=ftz and USTATE=0 (elsewhere \
             the copy spills and the generic path runs), 0 one path for every chunk"
                [FullChunks::Generic, FullChunks::Specialised],
            default: FullChunks::Specialised,
            absent: FullChunks::Generic,
        },
        /// `GSIG` (accepted, not an axis; default `fast`, see `FULLC`; absent: `exact`).
        gate_sigmoid: GateSigmoid = "GSIG" => {
            accepts: "intra kernel, lb*sigmoid gate forms: fast (rsqrt(1 + ex2.approx(-z log2 e))^2, exp(A_log) once per \
             block; with USTATE=0, beside USTATE=1 it spills and the exact one runs) or exact (1 / (1 + expf(-z)))"
                [GateSigmoid::Exact, GateSigmoid::Fast],
            default: GateSigmoid::Fast,
            absent: GateSigmoid::Exact,
        },
        /// `L2R` (accepted, not an axis; default `unrolled`, see `FULLC`; absent: `loop`).
        l2_rows: L2Rows = "L2R" => {
            accepts: "intra kernel, in-kernel L2 norms: unrolled (K/32 independent loads a row and lane; with USTATE=0, \
             beside USTATE=1 it spills and the loop runs) or loop (a runtime loop per row)"
                [L2Rows::Loop, L2Rows::Unrolled],
            default: L2Rows::Unrolled,
            absent: L2Rows::Loop,
        },
        /// `IMAP` (accepted, not an axis; default `gate`; absent: `tiles`): see [`IntraMaps`]. Measured on an H100,
        /// FlashKDA's options, each kernel timed alone: `ops` took the intra kernel 1.107 -> 0.912 ms at B1 T8192
        /// H96, 1.486 -> 1.240 at B4 T4096 H64, 1.119 -> 0.928 at varlen 8 x 1024 H96 (2026-12-07 09:05 UTC, main
        /// 598f659, `lab/2026-12-07/0905-h100-imap-mx/`; `rows`: 0.953, 1.262, 0.945); `gate` (the same bits as
        /// `ops`) another 0.915 -> 0.885, 1.222 -> 1.181, 0.920 -> 0.897; `gate` with `IFOLD=1` (other roundings,
        /// 0-2% more at those three, not a default) 0.623 -> 0.601 at B1 T8192 H64, 0.942 -> 0.901 at the mixed
        /// varlen batch, 0.314 -> 0.303 at B1 T65536 H32 (09:50 UTC, main 5f50dfd,
        /// `lab/2026-12-07/0950-h100-kda-candidates/`). The earlier presets: faster than `tiles` everywhere (B1 T8192
        /// H96 plain safe 0.909 -> 0.832 with `ops`, 0.849 with `gate,IFOLD=1`).
        maps: IntraMaps = "IMAP" => {
            accepts: "intra kernel element-wise maps: tiles (MMA-fragment tiles, 4-byte pairs), rows (Qbar, Kbar and the \
             L2 norms in one row-major pass of 16-byte accesses, K/8 lanes a row), ops (rows, and on the safe path with \
             ODIAG=1 the diagonal tiles' operands in the same pass), gate (ops, and the gate form in the row layout)"
                [IntraMaps::Tiles, IntraMaps::Rows, IntraMaps::Ops, IntraMaps::Gate],
            default: IntraMaps::Gate,
            absent: IntraMaps::Tiles,
        },
        /// `USTATE` (accepted, not an axis; absent: `0`, see [`USTATE_KNOB`]).
        u_place: UPlace = USTATE_KNOB => {
            accepts: "where U = (I + L)^-1 Diag(beta) v is formed: 0 (absent) the intra kernel, which writes [W | U]; 1 the \
             state pass, from v and the factors the intra kernel writes instead of U (N_ii, the strictly lower blocks \
             of L, beta)"
                [UPlace::Intra, UPlace::State],
            absent: UPlace::Intra,
        },
        /// `IFOLD` (accepted, not an axis; absent: `0`): see [`IntraFold`].
        fold: IntraFold = "IFOLD" => {
            accepts: "intra kernel: 1 folds the row pass's norm factors into q and k once and the fast gate sigmoid's \
             constants (-a log2 e, lb log2 e) into two per block (fewer multiplies, other roundings), 2 also builds the \
             block substitution's R = beta Gamma k in the row pass (IMAP=ops, full chunks), 0 (absent) each element's \
             expression as written"
                [IntraFold::Off, IntraFold::On, IntraFold::Rows],
            absent: IntraFold::Off,
        },
        /// `ISOLVE` (accepted, not an axis; default `1`; absent: `0`): see [`IntraSolve`]. Made the default with
        /// `IREPL=1` on the H100 measurement of 2026-12-07 14:34 UTC (`lab/2026-12-07/1434-h100-intra3-pdl/`, the same
        /// bits): at FlashKDA's options the intra kernel 0.898 -> 0.760 ms at B1 T8192 H96, 1.188 -> 1.024 at B4 T4096
        /// H64, 0.898 -> 0.766 at varlen 8 x 1024 H96 (the whole plan 8-10% faster at all six FlashKDA presets);
        /// `ISOLVE=1` alone 0.861, 1.132, 0.856; `IREPL=1` alone 0.788, 1.042, 0.792.
        solve: IntraSolve = "ISOLVE" => {
            accepts: "intra kernel forward substitution: 1 loads L's rows by 16-byte shared loads and stores N transposed \
             by 16-byte stores (USTATE=0), 2 also moves the off-diagonal tile's products into the diagonal products' \
             segment (safe path, ODIAG=1, ARENA=2; one barrier fewer), 0 (absent) element by element; the same bits"
                [IntraSolve::Off, IntraSolve::Wide, IntraSolve::Early],
            default: IntraSolve::Wide,
            absent: IntraSolve::Off,
        },
        /// `IREPL` (accepted, not an axis; default `1`, see `ISOLVE`; absent: `0`): see [`IntraReplicas`].
        replicas: IntraReplicas = "IREPL" => {
            accepts: "intra kernel register tiles on fewer warps than the block: 0 (absent) the other warps compute \
             replicas, 1 the diagonal tiles and the [C, C] totals are solo (the replica warps skip their loads, maps \
             and products; with ISOLVE=1 the forward substitution runs on the last C threads, idle replicas); the same \
             bits"
                [IntraReplicas::Compute, IntraReplicas::Idle],
            default: IntraReplicas::Idle,
            absent: IntraReplicas::Compute,
        },
        /// `MADDR` (accepted, not an axis; default and absent: `load`): see [`MmaAddressing`].
        mma_addr: MmaAddressing = "MADDR" => {
            accepts: "mma.sync operand loads of the intra kernel: origin (each thread's shared offsets computed once per \
             product, a constant step per load), load (absent) each load's offset computed; the same bits"
                [MmaAddressing::Load, MmaAddressing::Origin],
            default: MmaAddressing::Load,
            absent: MmaAddressing::Load,
        },
        /// `IWU` (accepted, not an axis; default `wide`, absent `auto`): see [`IntraWuStores`].
        wu_stores: IntraWuStores = "IWU" => {
            accepts: "intra kernel's stores of W and U: auto (absent) vector stores (8 or 16 bytes a lane, fragments \
             regrouped across a quad) on the plain variants, 4-byte pairs with the in-kernel gate, norm or beta options; \
             wide vector stores on every variant; pinned wide, and the kernel's 16-byte row stores of Qbar and Kbar by \
             one st.global.v4 each, which the compiler cannot split"
                [IntraWuStores::Auto, IntraWuStores::Wide, IntraWuStores::Pinned],
            default: IntraWuStores::Wide,
            absent: IntraWuStores::Auto,
        },
        /// `SLOAD` (accepted, not an axis; default `auto`; absent: `cp`, see [`SLOAD_KNOB`]).
        state_loads: StateLoads = SLOAD_KNOB => {
            accepts: "state-pass chunk loads: cp (absent) every block copies its operands by cp.async; tma the value blocks \
             of a pair form a cluster and W, Qbar, Kbar and gamma are copied once for it by TMA multicast (needs STAGES 2 \
             or 3 with SYNC=2, SGRID=vb, USTATE=0, K a multiple of 64); auto (the default) tma where a pair has two value \
             blocks and the pass allows it (tmau where they are 64 wide), else cp; tmau as tma, and each block's U by a \
             TMA box of its own (BV=64)"
                [StateLoads::Cp, StateLoads::Tma, StateLoads::Auto, StateLoads::TmaU],
            default: StateLoads::Auto,
            absent: StateLoads::Cp,
        },
        /// `GSWZ` (neither an axis nor accepted; absent: `pairs`, see [`GSWZ_KNOB`]).
        g_swizzle: GSwizzle = GSWZ_KNOB => {
            default: GSwizzle::Pairs,
            absent: GSwizzle::Pairs,
        },
        /// `TSPLIT` (a plan knob, see `Kda::plan_knobs`; absent: 1, the one-part plan; 0: [`auto_tsplit`]).
        tsplit: u32 = "TSPLIT" => {
            default: 0,
            absent: 1,
        },
    }
}

/// The tuning knobs of `kda` (see [`KdaKnobs`]).
pub fn knob_space() -> KnobSpace {
    KdaKnobs::space()
}

/// The knobs used when nothing is tuned (see [`KdaKnobs`]).
pub fn default_knobs() -> Knobs {
    KdaKnobs::defaults()
}

/// Knobs resolved for one problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub chunk: u32,
    pub w1: u32,
    /// The intra-chunk kernel's phase-aliased shared layout (knob `ARENA`).
    pub arena: bool,
    /// The separate-buffer intra kernel with its phase-disjoint buffers aliased (knob `ARENA=2`).
    pub slim: bool,
    /// The exact path's adaptive diagonal tiles (knob `XDIAG`).
    pub xdiag: bool,
    /// The intra kernel's `2^x` as one `ex2.approx.ftz` (knob `EX2=ftz`).
    pub ex2_ftz: bool,
    /// The chunk-32 off-diagonal tile from the midpoint-anchored operands (knob `ODIAG=1`; safe path or
    /// `XDIAG=1`, `ARENA=0` only).
    pub midoff: bool,
    /// Two barriers per state-pass chunk instead of four (knob `SYNC=2`; rings only).
    pub two_bars: bool,
    /// The intra kernel's f32 gate-cumsum buffer in the pair-friendly swizzle (knob `GSWZ=pairs`).
    pub g_pairs: bool,
    pub bv: u32,
    pub w2: u32,
    /// Operand buffers of the state pass (1 or 2).
    pub stages: u32,
    pub op_dt: DType,
    pub lvl_dt: DType,
    /// Parts of the chunk sequence along time (knob `TSPLIT`; 1 = one intra launch and one state pass), see
    /// [`chunk_plan`].
    pub tsplit: u32,
    /// The state pass's block order (knob `SGRID`).
    pub state_grid: state::StateGrid,
    /// The intra kernel's full chunks on their own code path with a constant length (knob `FULLC=1`).
    pub full_chunks: bool,
    /// The intra kernel's gate sigmoid from `ex2.approx` and `rsqrt` (knob `GSIG=fast`).
    pub fast_gate_sigmoid: bool,
    /// The intra kernel's L2-norm column loop unrolled (knob `L2R=unrolled`).
    pub l2_unrolled: bool,
    /// U formed in the state pass from v and the intra kernel's factors (knob `USTATE=1`).
    pub u_state: bool,
    /// The intra kernel's row-major maps (knob `IMAP`): Qbar, Kbar and the norms (`rows`, `ops`) and the diagonal
    /// operands (`ops`).
    pub rows_qk: bool,
    pub rows_ops: bool,
    pub rows_gate: bool,
    /// The intra kernel's per-row and per-block factors folded once (knob `IFOLD=1`), and (`IFOLD=2`) R built by
    /// the row pass.
    pub fold: bool,
    pub r_rows: bool,
    /// The intra kernel's forward substitution by 16-byte rows with N stored transposed (knob `ISOLVE=1`), and
    /// (`ISOLVE=2`) the off-diagonal products in the diagonal products' segment.
    pub solve_wide: bool,
    pub solve_early: bool,
    /// The intra kernel's diagonal tiles and [C, C] totals solo: no replica work (knob `IREPL=1`).
    pub solo: bool,
    /// The state pass's K-wide chunk operands by TMA multicast in clusters of value blocks (knob `SLOAD=tma`).
    pub tma_loads: bool,
    /// With `tma_loads`, each block's U by a TMA box of its own (knob `SLOAD=tmau`).
    pub u_tma: bool,
    /// The intra kernel's `mma.sync` loads addressed from per-thread origins (knob `MADDR=origin`).
    pub mma_origins: bool,
    /// The intra kernel's W and U by vector stores also with the in-kernel options (knob `IWU=wide`).
    pub wide_wu: bool,
    /// The intra kernel's 16-byte row stores (Qbar, Kbar) by one `st.global.v4` each (knob `IWU=pinned`).
    pub pinned_stores: bool,
}

/// `TSPLIT=0`: the parts along time for a problem. The overlap pays where the state pass is the long pole, i.e.
/// few (sequence, value head) pairs over many chunks: measured on the H200 (2026-12-02, same
/// run), B1 H32 gains at T16384 (1.450 -> 1.353 ms at 4 parts; 8 parts 1.636) and T65536 (5.746 -> 4.958 at 4,
/// 4.910 at 8), while B1 H96 T8192 (1.669 -> 1.686 at 4) and B4 H64 T4096 (2.317 -> 2.544) lose: their intra
/// kernel is the long pole and their state pass already fills the GPU. So: one part per 128 chunks (a power of
/// two, at most 8) when there are at most 32 pairs, else one part.
pub fn auto_tsplit(pb: &KdaProblem, chunk: u32) -> u32 {
    if pb.num_seqs() * pb.hv > 32 {
        return 1;
    }
    let nch = pb.chunk_tables(chunk as usize).0.len() / 2;
    let parts = (nch / 128).clamp(1, 8) as u32;
    1 << parts.ilog2()
}

/// The values knob `TSPLIT` takes.
pub const TSPLIT_VALUES: [u32; 5] = [1, 2, 4, 8, 16];

/// Streaming multiprocessors assumed by the automatic value-block choice (H100/H200).
const ASSUMED_SMS: usize = 132;

/// Dynamic shared memory one block may use (sm_90: 227 KB).
const MAX_SHARED_BYTES: u32 = 232448;

/// Shared memory of one SM (sm_90: 228 KB, of which each resident block reserves 1 KB).
const SM_SHARED_BYTES: u32 = 233472;

/// Shared bytes of the state pass (16-bit operands): per stage W, Qbar, Kbar (C x K), U (C x BV), P (C x C) and
/// gamma (K f32); once S (K x BV) and Vt (C x BV).
pub fn state_shared_bytes(dk: u32, chunk: u32, bv: u32, stages: u32) -> u32 {
    stages * (2 * chunk * (3 * dk + bv + chunk) + 4 * dk) + 2 * (dk + chunk) * bv
}

/// [`state_shared_bytes`] of the pass that forms U (`USTATE=1`): per stage v (C x BV bf16) instead of U, plus
/// N (C x 16), the lower blocks of L (C x 16 at chunk 32, C x C at 64) and beta (C f32); once T (C x BV).
pub fn state_shared_bytes_u(dk: u32, chunk: u32, bv: u32, stages: u32) -> u32 {
    let lcols = (chunk - 16).next_power_of_two();
    state_shared_bytes(dk, chunk, bv, stages) + stages * (2 * chunk * (16 + lcols) + 4 * chunk) + 2 * chunk * bv
}

impl Launch {
    /// Read and check the knobs for a problem. `STAGES = 0` picks the deepest operand ring (3, 2 or 1 chunks)
    /// with which the resident blocks the grid needs still fit on an SM (a knob set without `STAGES`, from
    /// before it existed, means 1). `XDIAG` (exact path; missing: 0) picks the adaptive diagonal tiles.
    /// `BV = 0` picks 32 value columns per state-pass block, 16 when
    /// that would leave more than half the SMs idle (fewer than ~66 blocks), 64 when 64 still makes two blocks per
    /// SM; every value block re-reads the chunk's W, Qbar, Kbar and P, so narrower blocks cost L2 bandwidth. `W2 = 0` picks 8 warps for BV > 32,
    /// else 4.
    pub fn resolve(knobs: &Knobs, pb: &KdaProblem) -> Result<Launch, OpError> {
        let invalid = |why: String| OpError::InvalidKnobs { op: "kda", knobs: knobs.to_string(), why };
        let t = KdaKnobs::from_knobs(knobs)?;
        // CHUNK = 0 / W1 = 0: chunk 32 on 8 warps at K = V = 128, the fastest point of the H200 run of
        // 2026-12-01 on every preset it timed (B1 T8192 H96 safe 2.045 ms vs 2.687 at chunk 64 on 16 warps; B1
        // T16384 H32 exact 2.396 vs 2.708; B4 T4096 H64 safe 2.854 vs 3.900; FLA chunk_kda 2.417 / 1.955 /
        // 3.105 in the same lease); chunk 64 on 16 warps for other head dims (not timed; chunk 32 on 8 warps
        // spills 4 bytes at K = 64, V = 128 on the exact path).
        let wide = pb.dk == 128 && pb.dv == 128;
        let chunk = match t.chunk {
            0 if wide => 32,
            0 => 64,
            c => c,
        };
        let w1 = match t.w1 {
            0 if chunk == 32 && wide => 8,
            // Chunk 16 (accepted, not an axis): 16 rows do not split over 16 warps.
            0 if chunk == 16 => 8,
            0 => 16,
            w => w,
        };
        if !matches!(chunk, 16 | 32 | 64) {
            return Err(invalid(format!("CHUNK={chunk}: 0 (auto), 16, 32 or 64")));
        }
        if !matches!(w1, 4 | 8 | 16) {
            return Err(invalid(format!("W1={w1}: 0 (auto), 4, 8 or 16")));
        }
        if w1 == 4 && chunk == 64 && pb.dk.max(pb.dv) >= 128 {
            return Err(invalid("W1=4 with CHUNK=64 and head dim 128 runs out of registers (spills): use W1=8".into()));
        }
        let u_state = t.u_place == UPlace::State;
        if u_state && chunk == 16 {
            // The U substitution's factors are N_ii and the strictly lower blocks of L from row 16: none at chunk 16.
            return Err(invalid(
                "USTATE=1 needs CHUNK=32 or 64 (at chunk 16 there is no lower block of L to pass)".into(),
            ));
        }
        let StatePass { bv, w2, stages, two_bars, tma_loads, u_tma } = state_pass(&t, pb, chunk, u_state, &invalid)?;
        // Knob sets written before ARENA, XDIAG, EX2, ODIAG, SYNC, GSWZ, TSPLIT or SGRID existed read as the
        // separate buffers, the hierarchy, exp2f, the level pass, four barriers, pairs, one part and vb (the
        // `absent` values of [`KdaKnobs`]).
        let arena = t.arena == IntraLayout::Arena;
        let xdiag = t.xdiag == ExactDiag::Adaptive;
        let ex2_ftz = t.ex2 == Exp2::Ftz;
        let midoff = t.odiag == OffDiag::Midpoint && (pb.safe || xdiag) && chunk == 32 && !arena;
        // ARENA=2: the slim layout of the separate-buffer kernel (see `intra::IntraOpts::slim`) where it applies
        // (safe path, chunk 32, ODIAG=1, W1 <= 8, V <= K); elsewhere the separate buffers, as ODIAG does.
        // (The phase-B buffers fit in sQ + sOp's bytes for V <= K.)
        let slim = t.arena == IntraLayout::Slim && pb.safe && midoff && w1 <= 8 && pb.dv <= pb.dk;
        // GSWZ (not an axis of the knob space; absent = pairs: knob sets written before it were made at codegen
        // v8 or earlier, whose records no longer match their keys): the layout of the intra kernel's f32 G~ buffer.
        // `rows`: the 16-bit operands' XOR swizzle, 2-way bank conflicts on its 8-byte pair accesses (13.4 M of the
        // kernel's 132.5 M shared wavefronts at B1 T8192 H96, ncu, 2026-12-02). `pairs`: Swizzle::Xor16BPairs, no
        // conflicts: faster on every preset (H200, 2026-12-04, same run, with W and U regrouped into 8-byte
        // stores as the kernel does on its plain variants: T8192 H96 1.545 vs 1.577 ms, T65536 H32 4.483 vs 4.581,
        // T16384 safe 1.176 vs 1.198, exact 1.351 vs 1.379, B4 T4096 H64 2.153 vs 2.195).
        let g_pairs = t.g_swizzle == GSwizzle::Pairs;
        // TSPLIT 0 (the default) is the automatic choice of [`auto_tsplit`].
        let tsplit = match t.tsplit {
            0 => auto_tsplit(pb, chunk),
            parts => parts,
        };
        if !TSPLIT_VALUES.contains(&tsplit) {
            return Err(invalid(format!("TSPLIT={tsplit}: 0 (auto) or one of {TSPLIT_VALUES:?}")));
        }
        Ok(Launch {
            chunk,
            w1,
            arena,
            slim,
            xdiag,
            ex2_ftz,
            midoff,
            two_bars,
            g_pairs,
            bv,
            w2,
            stages,
            op_dt: t.op_dt.dtype(),
            lvl_dt: t.lvl_dt.dtype(),
            tsplit,
            state_grid: t.state_grid,
            // The full-chunk copy doubles the phases' code: at W1 >= 8 with EX2=ftz and U in the intra kernel it costs
            // no spill; elsewhere it spills (ptxas 13.0, 2026-12-07: 52 bytes at W1=4, 28 with EX2=exact, 72 beside
            // USTATE=1), so those points keep the generic path.
            full_chunks: t.full_chunks == FullChunks::Specialised && w1 >= 8 && ex2_ftz && !u_state,
            // (Beside USTATE=1 the fast sigmoid spills too, 20 bytes: USTATE keeps the exact one. USTATE=1's intra kernel
            // is the one measured on 2026-12-07 without these three options' copies: the state pass it feeds lost more
            // than the intra kernel won, 0.600 -> 0.798 ms at B1 T8192 H96 on the H100.)
            fast_gate_sigmoid: t.gate_sigmoid == GateSigmoid::Fast && !u_state,
            // (Beside USTATE=1 the unrolled norms spill, 28 bytes: there the loop.)
            l2_unrolled: t.l2_rows == L2Rows::Unrolled && !u_state,
            u_state,
            // (Beside USTATE=1 the row maps spill, 36 bytes at FlashKDA's options: there the tile maps.)
            rows_qk: t.maps != IntraMaps::Tiles && !u_state,
            rows_ops: matches!(t.maps, IntraMaps::Ops | IntraMaps::Gate) && !u_state,
            // (`gate` with a precomputed gate is `ops`: no gate form to move, and its row scan spilled 32 bytes at the
            // plain safe preset, B1 T8192 H96, where `ops` measured 2% faster; H100, 2026-12-07 09:50 UTC.)
            rows_gate: t.maps == IntraMaps::Gate && pb.gate != GateForm::Pre && !u_state,
            fold: t.fold != IntraFold::Off,
            r_rows: t.fold == IntraFold::Rows,
            // (`USTATE=1` reads N row by row from shared memory for its factor output: there the element stores.)
            solve_wide: t.solve != IntraSolve::Off && !u_state,
            solve_early: t.solve == IntraSolve::Early && !u_state,
            solo: t.replicas == IntraReplicas::Idle,
            tma_loads,
            u_tma,
            mma_origins: t.mma_addr == MmaAddressing::Origin,
            wide_wu: matches!(t.wu_stores, IntraWuStores::Wide | IntraWuStores::Pinned),
            pinned_stores: t.wu_stores == IntraWuStores::Pinned,
        })
    }
}

/// The state pass's value blocks, warps, operand ring and loads (see [`Launch::resolve`]).
struct StatePass {
    bv: u32,
    w2: u32,
    stages: u32,
    two_bars: bool,
    tma_loads: bool,
    u_tma: bool,
}

/// [`Launch::resolve`]'s state-pass half: `BV`, `W2`, `STAGES` (0 = automatic), `SYNC` and `SLOAD` for a chunk
/// size, checked against the registers and the shared memory of a block.
fn state_pass(
    t: &KdaKnobs,
    pb: &KdaProblem,
    chunk: u32,
    u_state: bool,
    invalid: &dyn Fn(String) -> OpError,
) -> Result<StatePass, OpError> {
    let mut bv = t.bv;
    let mut w2 = t.w2;
    // Knob sets written before STAGES existed mean the single-buffer pass (see [`KdaKnobs`]).
    let mut stages = t.stages;
    if stages > 3 {
        return Err(invalid(format!("STAGES={stages}: 0, 1, 2 or 3")));
    }
    let dv = pb.dv as u32;
    if bv == 0 {
        // 16 when 32 would leave more than half the SMs idle; 64 when even 64 gives two blocks per SM (every
        // value block re-reads its pair's chunk operands: wider blocks read fewer bytes from L2). Measured on the
        // H100 (2026-12-06, same run, with SGRID=vb): BV=64 on 8 warps with 2 stages 2.576 ms vs 2.742 at BV=32
        // (B4 T4096 H64, 512 blocks of 64) and 1.957 vs 2.087 (varlen 8 x 1024 H96, 1536 blocks), while B1 T8192
        // H96 (192 blocks of 64) took 2.100 vs 2.035: there BV=32 stays.
        let heads = pb.num_seqs() * pb.hv;
        bv = if 2 * heads * pb.dv / 32 < ASSUMED_SMS {
            16
        } else if pb.dv.is_multiple_of(64) && heads * pb.dv / 64 >= 2 * ASSUMED_SMS {
            64
        } else {
            32
        };
    }
    if !matches!(bv, 16 | 32 | 64 | 128) || bv > dv || !dv.is_multiple_of(bv) {
        return Err(invalid(format!("BV={bv} must be 16, 32, 64 or 128 and divide V={dv}")));
    }
    if w2 == 0 {
        // 8 warps for value blocks wider than 32, else 4: a chunk-32 x 32 output tile does not split over 8
        // warps (half of them duplicate its products). Measured on the H200 (2026-12-01, same run, chunk 32,
        // 3 stages, where 8 warps had been picked because the 128 blocks fit on the SMs at once): W2=4 took
        // 6.819 ms at B1 T65536 H32 (8 warps 7.340), 1.879 at T16384 H32 safe (1.945), 1.980 exact (2.114).
        w2 = if bv > 32 { 8 } else { 4 };
    }
    if !matches!(w2, 4 | 8 | 16) {
        return Err(invalid(format!("W2={w2}: 0, 4, 8 or 16")));
    }
    // (`auto`: the clusters of two value blocks; `tma_loads` falls back to `cp` below where the pass does not
    // allow them.)
    let tma_auto = t.state_loads == StateLoads::Auto;
    let named_u = t.state_loads == StateLoads::TmaU;
    let mut tma_loads =
        matches!(t.state_loads, StateLoads::Tma | StateLoads::TmaU) || (tma_auto && pb.dv == 2 * bv as usize);
    let shared_of = |tma_loads: bool, s: u32| {
        if tma_loads {
            state_tma::state_shared_bytes_tma(pb.dk as u32, chunk, bv, s)
        } else if u_state {
            state_shared_bytes_u(pb.dk as u32, chunk, bv, s)
        } else {
            state_shared_bytes(pb.dk as u32, chunk, bv, s)
        }
    };
    // More operand stages multiply the chunk buffers (38 -> 67 -> 96 KB at chunk 32, K = V = 128, BV = 32) and
    // let chunk j + S - 1's loads overlap S - 1 chunks of work instead of half of one; they are free as long as
    // they cost none of the resident blocks the grid needs. So: the deepest ring (3, 2, 1) with which
    // `min(ceil(blocks / SMs), blocks per SM by registers)` blocks still fit on an SM, the registers taken as 128
    // a thread (ptxas: 123-128 at 1 and 3 stages; 153 for 2 stages on 4 warps, i.e. 3 blocks per SM, which
    // shared memory caps at anyway: 3 x 67 KB) -- e.g. 3 stages at H32 (128 blocks, one per SM), 2 at H96 (384
    // blocks: 3 per SM, 3 x 67 KB), 1 at B4 H64 (1024 blocks: 4 per SM by registers at 4 warps, 4 x 38 KB).
    // 64 columns on 8 warps: 2 stages (ptxas, 2026-12-06: 128 registers, two blocks per SM; 3 stages take 154
    // registers, one block per SM, which the register model does not see).
    let auto_stages = stages == 0;
    let ring_depth = |tma_loads: bool| -> u32 {
        if bv == 64 && w2 == 8 {
            return 2;
        }
        let blocks = pb.num_seqs() * pb.hv * pb.dv / bv as usize;
        let want = blocks.div_ceil(ASSUMED_SMS).min(65536 / (128 * 32 * w2 as usize)).max(1) as u32;
        let fits = |s: u32| want * (shared_of(tma_loads, s) + 1024) <= SM_SHARED_BYTES;
        [3, 2].into_iter().find(|&s| fits(s)).unwrap_or(1)
    };
    if auto_stages {
        stages = ring_depth(tma_loads);
    }
    // f32 accumulator registers per thread: the state and the two chunk accumulators.
    let regs = (pb.dk as u32 + 2 * chunk) * bv / (32 * w2);
    if regs > 64 {
        return Err(invalid(format!(
            "state K={} x BV={bv} and two {chunk} x {bv} accumulators on {w2} warps: {regs} registers a thread (max 64)",
            pb.dk
        )));
    }
    let two_bars_at = |s: u32| t.sync == StateSync::Two && s >= 2;
    if tma_loads {
        let why = if u_state {
            Some("USTATE=1 forms U in the state pass".to_string())
        } else if !two_bars_at(stages) {
            Some("the TMA loads need the two-barrier ring (STAGES 2 or 3 with SYNC=2)".to_string())
        } else if t.state_grid != state::StateGrid::ValueBlocks {
            Some("the clusters are a pair's consecutive value blocks (SGRID=vb)".to_string())
        } else {
            state_tma::tma_unsupported(pb.dk, pb.dv, bv, stages)
        };
        match why {
            Some(_) if tma_auto => tma_loads = false,
            Some(why) => {
                let word = if named_u { "tmau" } else { "tma" };
                return Err(invalid(format!("SLOAD={word}: {why}")));
            }
            None => {}
        }
        if !tma_loads && auto_stages {
            // `auto` fell back to cp: the ring depth for the cp pass's buffers (their bytes differ by the
            // barriers and the alignment).
            stages = ring_depth(false);
        }
    }
    let two_bars = two_bars_at(stages);
    if shared_of(tma_loads, stages) > MAX_SHARED_BYTES {
        return Err(invalid(format!(
            "STAGES={stages} at chunk {chunk}, BV={bv}: {} bytes of shared memory (max {MAX_SHARED_BYTES})",
            shared_of(tma_loads, stages)
        )));
    }
    // (`auto`: U by TMA too where its box fits, BV = 64.)
    let u_tma = tma_loads && (named_u || (tma_auto && state_tma::u_box_fits(bv)));
    if named_u && !state_tma::u_box_fits(bv) {
        return Err(invalid(format!("SLOAD=tmau: U's TMA box is 64 columns of 16 bits, so BV must be 64 (got {bv})")));
    }
    Ok(StatePass { bv, w2, stages, two_bars, tma_loads, u_tma })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(safe: i64) -> KdaProblem {
        KdaProblem::from_preset(&Preset::new("p", &[("B", 1), ("T", 256), ("H", 2), ("K", 128), ("safe", safe)]))
            .unwrap()
    }

    /// The default record as it was written out before the declaration (2026-12-06), plus the intra-kernel options
    /// made defaults on 2026-12-07 (FULLC, GSIG, L2R; then IMAP; then ISOLVE and IREPL; then IWU).
    #[test]
    fn the_default_record_is_the_old_one() {
        let old = Knobs::new()
            .with("ARENA", 2i64)
            .with("CHUNK", 0i64)
            .with("W1", 0i64)
            .with("BV", 0i64)
            .with("W2", 0i64)
            .with("STAGES", 0i64)
            .with("XDIAG", 1i64)
            .with(GSWZ_KNOB, "pairs")
            .with("ODIAG", 1i64)
            .with("EX2", "ftz")
            .with("SYNC", 2i64)
            .with("OPDT", "f16")
            .with("LVLDT", "f16")
            .with("TSPLIT", 0i64);
        // A record without the three keeps its kernels (their absent meanings are the paths of before).
        let pb = problem(1);
        let before = Launch::resolve(&old, &pb).unwrap();
        let old = old
            .with("FULLC", 1i64)
            .with("GSIG", "fast")
            .with("L2R", "unrolled")
            .with("IMAP", "gate")
            .with("ISOLVE", 1i64)
            .with("IREPL", 1i64)
            .with("SLOAD", "auto")
            .with("MADDR", "load")
            .with("IWU", "wide");
        assert_eq!(default_knobs(), old);
        assert!(!before.full_chunks && !before.fast_gate_sigmoid && !before.l2_unrolled);
        assert!(!before.rows_qk && !before.rows_ops && !before.fold && !before.r_rows && !before.rows_gate);
        let now = Launch::resolve(&default_knobs(), &pb).unwrap();
        assert!(now.full_chunks && now.fast_gate_sigmoid && now.l2_unrolled);
        let space = knob_space();
        let names: Vec<&str> = space.axes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            ["CHUNK", "W1", "ARENA", "XDIAG", "BV", "W2", "STAGES", "ODIAG", "EX2", "SYNC", "OPDT", "LVLDT"]
        );
        let accepted: Vec<&str> = space.accepted.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            accepted,
            [
                "CHUNK",
                "BV",
                SGRID_KNOB,
                "FULLC",
                "GSIG",
                "L2R",
                "IMAP",
                USTATE_KNOB,
                "IFOLD",
                "ISOLVE",
                "IREPL",
                "MADDR",
                "IWU",
                SLOAD_KNOB
            ]
        );
        assert!(now.rows_qk && now.rows_ops && !now.mma_origins && !before.wide_wu);
        // (`IWU=wide` is read here; it applies to the variants with in-kernel options, not to this plain problem.)
        assert!(now.wide_wu);
    }

    /// A record from before the optional knobs reads with their legacy meanings; the required ones are named when
    /// missing; words and numbers outside a knob's values are refused naming the knob.
    #[test]
    fn old_records_and_bad_values() {
        let pb = problem(1);
        let old = Knobs::new()
            .with("CHUNK", 32i64)
            .with("W1", 8i64)
            .with("BV", 32i64)
            .with("W2", 4i64)
            .with("OPDT", "f16")
            .with("LVLDT", "bf16");
        let l = Launch::resolve(&old, &pb).unwrap();
        assert_eq!((l.stages, l.tsplit, l.lvl_dt), (1, 1, DType::Bf16));
        assert!(!l.arena && !l.slim && !l.xdiag && !l.ex2_ftz && !l.midoff && !l.two_bars && l.g_pairs);
        assert_eq!(l.state_grid, state::StateGrid::ValueBlocks);
        let mut no_chunk = old.clone();
        no_chunk.0.remove("CHUNK");
        assert!(matches!(Launch::resolve(&no_chunk, &pb), Err(OpError::Knob(KnobError::Missing { .. }))));
        for (k, v) in [("ARENA", 3i64), ("XDIAG", 2), ("ODIAG", 2), ("SYNC", 3)] {
            let e = Launch::resolve(&default_knobs().with(k, v), &pb).unwrap_err().to_string();
            assert!(e.contains(&format!("{k} must be")) && e.ends_with(&format!("got {v}")), "{e}");
        }
        for (k, v) in [("EX2", "fast"), ("OPDT", "f32"), (GSWZ_KNOB, "cols"), (SGRID_KNOB, "rows")] {
            let e = Launch::resolve(&default_knobs().with(k, v), &pb).unwrap_err().to_string();
            assert!(e.contains(&format!("{k} must be")) && e.ends_with(&format!("got {v}")), "{e}");
        }
        let e = Launch::resolve(&default_knobs().with("CHUNK", 24i64), &pb).unwrap_err().to_string();
        assert!(e.contains("CHUNK") && e.contains("24"), "{e}");
        // Chunk 16 is accepted (not an axis) and takes 8 intra warps when W1 is automatic.
        let c16 = Launch::resolve(&default_knobs().with("CHUNK", 16i64), &pb).unwrap();
        assert_eq!((c16.chunk, c16.w1), (16, 8));
        let d = Launch::resolve(&default_knobs(), &problem(0)).unwrap();
        assert!(d.xdiag && d.ex2_ftz && d.two_bars && d.g_pairs && d.midoff && !d.slim && !d.arena);
        assert_eq!((d.chunk, d.w1, d.op_dt, d.lvl_dt), (32, 8, DType::F16, DType::F16));
    }
}
