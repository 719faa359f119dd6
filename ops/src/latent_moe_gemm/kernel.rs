//! The kernel builder's entry ([`build_kernel`]) and what every phase shares ([`GemmKernel`]): the interface
//! (dims, tensors, grid), the shared tiles and accumulators, the walk's bounds, the stage ring and the
//! producer's cursor, declared in this order (the order of the IR's declarations and `let`s).

use super::GemmSpec;
use super::config::Config;
use super::epilogue::SLICE;
use super::producer::Producer;
use super::walk::units_of;
use crate::OpError;
use k3k_ir::*;

/// Build the kernel for a variant and a knob set.
pub fn build_kernel(spec: &GemmSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    let c = Config::resolve(spec, knobs)?;
    let glu = spec.epilogue.is_glu();
    let mut b = KernelBuilder::new(&kernel_name(spec, knobs), 32 * c.wm * c.wn);
    b.knobs(knobs.clone());
    if c.producer_warp {
        b.producer_warp();
    }
    let io = Io::declare(&mut b, spec, &c);
    let acc_n = if glu { c.bn / 2 } else { c.bn };
    let tiles = Tiles::declare(&mut b, spec, &c, &io, acc_n);
    let walk = Walk::declare(&mut b, &c, &io, acc_n);
    let ring = Ring::declare(&mut b, spec, &c, &io, &walk);
    let prod = c.ahead.map(|_| Producer::declare(&mut b, &walk));
    let g = GemmKernel { spec, c: &c, glu, acc_n, io, tiles, walk, ring, prod };
    if g.prod.is_some() {
        g.walk_stream(&mut b);
    } else if c.overlap {
        g.walk_overlapped(&mut b);
    } else {
        g.walk_plain(&mut b);
    }
    if c.cluster2 {
        // No CTA exits while its peer may still arrive on its barriers or copy into its shared memory.
        b.cluster_sync();
    }
    Ok(b.finish()?)
}

/// `k3k_gemm_{grouped|dense}[_p]_{epilogue}_{alignment}_{knobs}`: the record as given names the kernel.
fn kernel_name(spec: &GemmSpec, knobs: &Knobs) -> String {
    format!(
        "k3k_gemm_{}{}_{}_{}_{}",
        if spec.grouped { "grouped" } else { "dense" },
        if spec.row_scale { "_p" } else { "" },
        spec.epilogue.name(),
        spec.alignment(),
        knobs.id().to_lowercase()
    )
}

/// What the GEMM's phases share: the variant, the configuration and the declarations below.
pub(super) struct GemmKernel<'a> {
    pub spec: &'a GemmSpec,
    pub c: &'a Config,
    pub glu: bool,
    /// Accumulator columns (BN, or BN/2 with a GLU).
    pub acc_n: u32,
    pub io: Io,
    pub tiles: Tiles,
    pub walk: Walk,
    pub ring: Ring,
    pub prod: Option<Producer>,
}

/// The kernel's interface: dims `M`, `K`, `N` (`G` grouped, `NH` with a GLU), tensors `x [M, K]`, `w [(G,) N,
/// K]`, `offs [G]` (grouped), `p [M]` (row scale) and `y [M, N or NH]`, and the persistent grid.
pub(super) struct Io {
    pub m: Expr,
    pub n: Expr,
    pub kd: Expr,
    /// Output width: N, or N/2 = NH for the GLU forms (the launcher checks N == 2*NH).
    pub n_out: Expr,
    /// Groups: `G`, or 1 for the dense product.
    pub g_count: Expr,
    pub x: TensorId,
    pub w: TensorId,
    pub offs: Option<TensorId>,
    pub p: Option<TensorId>,
    pub y: TensorId,
}

impl Io {
    fn declare(b: &mut KernelBuilder, spec: &GemmSpec, c: &Config) -> Io {
        let m = b.dim("M");
        let kd = b.dim("K");
        let n = b.dim("N");
        let x = b.tensor("x", DType::Bf16, &[m.clone(), kd.clone()], Access::Read);
        let (g_count, w, offs) = if spec.grouped {
            let g = b.dim("G");
            let w = b.tensor("w", DType::Bf16, &[g.clone(), n.clone(), kd.clone()], Access::Read);
            let offs = b.tensor("offs", DType::I32, std::slice::from_ref(&g), Access::Read);
            (g, w, Some(offs))
        } else {
            let w = b.tensor("w", DType::Bf16, &[n.clone(), kd.clone()], Access::Read);
            (Expr::Int(1), w, None)
        };
        let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
        let n_out = if spec.epilogue.is_glu() { b.dim("NH") } else { n.clone() };
        let y = b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write);
        launch_grid(b, c);
        Io { m, n, kd, n_out, g_count, x, w, offs, p, y }
    }
}

/// One block per SM (persistent); CLUSTER=2: whole clusters of two.
fn launch_grid(b: &mut KernelBuilder, c: &Config) {
    let num_sms = b.int_arg(NUM_SMS);
    if c.cluster2 {
        // Whole clusters of two: NUM_SMS (for a cluster kernel the launcher passes the CTAs resident at once in
        // whole clusters, so the persistent grid is one wave) rounded down to even, at least one cluster.
        let clusters = Expr::Bin(BinOp::Max, Box::new(num_sms.clone() / 2i64), Box::new(Expr::Int(1)));
        b.grid(clusters * 2i64, 1i64, 1i64);
        b.cluster([2, 1, 1]);
    } else {
        b.grid(num_sms, 1i64, 1i64);
    }
}

/// The shared operand tiles (a ring of STAGES slots each), the accumulators and the epilogue's buffers.
pub(super) struct Tiles {
    pub sa: SharedId,
    pub sb: SharedId,
    pub acc: TileId,
    /// The up half's accumulator of a GLU.
    pub acc_up: Option<TileId>,
    /// The routing weights of the tile's rows.
    pub pv: Option<VecId>,
    /// STORE=tma: the two staging buffers, `y`'s tensor map and (odd slices per tile) the block's store count.
    pub staging: Option<(SharedId, TmapId, Option<VarId>)>,
}

impl Tiles {
    fn declare(b: &mut KernelBuilder, spec: &GemmSpec, c: &Config, io: &Io, acc_n: u32) -> Tiles {
        let (bm, bn, bk, st) = (c.bm, c.bn, c.bk, c.stages);
        let warps = [c.wm, c.wn];
        let sa = b.shared("sA", DType::Bf16, bm, bk, st, Swizzle::Xor16B);
        let sb = b.shared("sB", DType::Bf16, bn, bk, st, Swizzle::Xor16B);
        let acc = b.tile("acc", DType::F32, bm, acc_n, warps);
        // With an odd number of slices per tile the buffers alternate across tiles too: `y_slices` counts the
        // block's bulk stores, whose parity picks the buffer (a per-tile index would rewrite the buffer of the
        // store just issued: the CPU backends, which read a store's source at its retiring wait, caught it at
        // BN=64). With an even number the slice index within the tile is the same parity.
        let staging = c.tma_store.then(|| {
            let buf = b.shared("sY", DType::Bf16, bm, SLICE, 2, Swizzle::Xor16B);
            let map = b.tensor_map("y_map", io.y, &[SLICE, bm], Swizzle::Xor16B);
            let odd = (acc_n / SLICE) % 2 == 1;
            (buf, map, odd.then(|| b.let_var("y_slices", 0i64)))
        });
        let acc_up = spec.epilogue.is_glu().then(|| b.tile("acc_up", DType::F32, bm, acc_n, warps));
        let pv = spec.row_scale.then(|| b.vec("p_rows", bm, warps));
        Tiles { sa, sb, acc, acc_up, pv, staging }
    }
}

/// The persistent walk's bounds: block b (cluster b/2) takes every grid-th unit of `total`. CLUSTER=2: the walk
/// is over units of two sibling tiles (along M or N); a unit's CTA takes the tile of its cluster rank. Both CTAs
/// of a cluster walk the same units, so they run the same k-steps.
pub(super) struct Walk {
    pub pair_m: bool,
    pub pair_n: bool,
    /// Units per row of tiles.
    pub unit_n: Expr,
    pub rank: Expr,
    pub first: Expr,
    pub step: Expr,
    /// Units over all groups.
    pub total: VarId,
    pub k_tiles: Expr,
}

impl Walk {
    fn declare(b: &mut KernelBuilder, c: &Config, io: &Io, acc_n: u32) -> Walk {
        let n_tiles = io.n_out.ceil_div(acc_n as i64);
        let pair_m = c.cluster2 && c.pair_m;
        let pair_n = c.cluster2 && !c.pair_m;
        let unit_n = if pair_n { n_tiles.ceil_div(2i64) } else { n_tiles.clone() };
        let rank = b.cluster_rank();
        let (first, step) = if c.cluster2 {
            (Expr::block_idx(0) / 2i64, Expr::grid_dim(0) / 2i64)
        } else {
            (Expr::block_idx(0), Expr::grid_dim(0))
        };
        let total = b.let_var("total", 0i64);
        b.for_("g", 0i64, io.g_count.clone(), 1i64, |b, g| {
            let rows = super::walk::group_end_of(io.offs, &io.m, &g) - super::walk::group_start_of(io.offs, &g);
            b.assign(total, Expr::Var(total) + units_of(rows, c.bm, pair_m, &unit_n));
        });
        let k_tiles = b.let_("k_tiles", io.kd.ceil_div(c.bk as i64));
        Walk { pair_m, pair_n, unit_n, rank, first, step, total, k_tiles }
    }
}

/// The stage ring: STAGES slots of the shared tiles, and with LOAD=tma the tensor maps, the full and empty
/// barriers of each slot and a running k-step counter.
pub(super) struct Ring {
    /// Stages loaded ahead of the first product: the wgmma ring keeps one product in flight, so STAGES-2.
    pub ahead: u32,
    /// LOAD=tma: tensor maps over x ([K, M], boxes [BK, BM]) and w ([K, N(, G)], boxes [BK, BN or BN/2 (,
    /// 1)]), and one full and one empty barrier per stage.
    pub tma: Option<(TmapId, TmapId, MbarId, MbarId)>,
    /// LOAD=tma: k-steps of earlier tiles of this block, so that stage use `u = kbase + kt` goes to slot `u %
    /// STAGES` and waits for phase parity `(u / STAGES) % 2` whatever the tiles' K-step counts.
    pub kbase: Option<VarId>,
    pub slots: StageRing,
    pub stage_bytes: u32,
}

impl Ring {
    fn declare(b: &mut KernelBuilder, spec: &GemmSpec, c: &Config, io: &Io, walk: &Walk) -> Ring {
        let (bm, bn, bk, st) = (c.bm, c.bn, c.bk, c.stages);
        let threads = 32 * c.wm * c.wn;
        let tma = c.tma.then(|| {
            // CLUSTER=2 along M: each CTA copies half of the weight tile (BN/2 rows: the gate or the up half
            // with a GLU); along N: half of the x tile (BM/2 rows).
            let half_rows = if spec.epilogue.is_glu() || walk.pair_m { bn / 2 } else { bn };
            let x_rows = if walk.pair_n { bm / 2 } else { bm };
            let xm = b.tensor_map("x_map", io.x, &[bk, x_rows], Swizzle::Xor16B);
            let wm = if spec.grouped {
                b.tensor_map("w_map", io.w, &[bk, half_rows, 1], Swizzle::Xor16B)
            } else {
                b.tensor_map("w_map", io.w, &[bk, half_rows], Swizzle::Xor16B)
            };
            let full = b.mbarriers("full", st);
            let empty = b.mbarriers("empty", st);
            (xm, wm, full, empty)
        });
        let kbase = tma.map(|(_, _, full, empty)| {
            b.mbar_init(full, 1);
            if c.cluster2 {
                // A slot is refilled by both CTAs' copies: its release counts one arrival per warp of each CTA,
                // and both CTAs' barriers are initialized before either CTA arrives on or copies into the peer's.
                b.mbar_init(empty, 2 * (threads / 32));
                b.cluster_sync();
            } else if c.warp_release {
                b.mbar_init(empty, threads / 32);
            } else {
                b.mbar_init(empty, threads);
            }
            b.let_var("kbase", 0i64)
        });
        Ring {
            ahead: if c.wgmma { st - 2 } else { st - 1 },
            tma,
            kbase,
            slots: StageRing::new(st, c.ahead.is_some()),
            stage_bytes: 2 * bk * (bm + bn),
        }
    }
}
