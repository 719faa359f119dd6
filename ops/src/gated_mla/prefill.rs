//! The prefill kernel of [`crate::gated_mla`]: [`build_prefill`], its knob space and defaults.

use super::*;

/// What a prefill kernel variant computes (fixed by the problem, not tuned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PrefillSpec {
    /// Bottom-right aligned causal mask (query i sees keys `j <= i + S - T`).
    pub causal: bool,
    /// Fuse the sigmoid output gate (`z: [T, H, DV]` logits).
    pub gate: bool,
    /// Variable length: `cu_seqlens_q / cu_seqlens_k: [N + 1] i32` split the packed rows into sequences.
    pub varlen: bool,
    /// Query/key head dim (192 for K3).
    pub dqk: u32,
    /// Value head dim (128 for K3).
    pub dv: u32,
}

impl PrefillSpec {
    /// The K3 head dims (192 / 128).
    pub fn new(causal: bool, gate: bool, varlen: bool) -> Self {
        PrefillSpec { causal, gate, varlen, dqk: 192, dv: 128 }
    }
}

/// The prefill tuning knobs.
///
/// `MMA` picks the tensor-core path: `sync` is the FlashAttention-2 style kernel on `mma.sync` (`WM` warps,
/// each owning `BM / WM` query rows), `wgmma` the FlashAttention-3 style kernel on the Hopper warpgroup
/// instructions: `BM / 64` warpgroups each owning 64 query rows (so `WM = BM / 16`), `S = Q K^T` from
/// shared memory, `O += P V` with P in registers and V read N-contiguous. `OVERLAP` (wgmma only) issues the
/// product `P V` of the previous KV tile together with the next score product and runs the softmax while it
/// is in flight (the V ring then runs one tile behind the K ring). `QORDER` (causal only) maps the block
/// index to (q-tile, head): `head` walks each head's q-tiles from the last (longest) to the first, head after
/// head; `lpt` walks all the q-tiles of a group of `HGROUP` heads longest first with the heads innermost
/// (FA3's LPT schedule), so the last wave holds only short tiles; `HGROUP` (optional, default 0) is the group
/// size, 0 meaning as many heads as keep 32 MB of K/V. `SOFTMAX=fast` (optional, default `exact`) runs the
/// online softmax on the raw scores: the row max is taken before scaling (the scale is positive), the scale
/// folds into the exponent (`exp2(s * tau log2 e - m * tau log2 e)`, one fused multiply-add), unmasked tiles
/// pay no scaling pass, and the exponentials are `exp2_ftz` (one MUFU.EX2, weights below 2^-126 flushed to 0,
/// where `exp2` adds a range test and two predicated multiplies). Knob sets without `MMA` / `OVERLAP` /
/// `QORDER` / `SOFTMAX` mean `sync` / false / `head` / `exact`. `SMGUARD=true` (`OVERLAP` only; optional, default
/// false) wraps each tile's softmax statistics and exponentials in an always-true guard (`kv0 < n_end`, which
/// holds for every tile of the loop): ptxas schedules the wait for the previous tile's `P V` at the top of the
/// basic block that holds it, which without the guard is the block of the softmax itself (so the softmax ran
/// after `P V`; SASS of the default: `WARPGROUP.DEPBAR.LE gsb0, 0x0` before the first row max), and with it is
/// the block after the softmax, so the exponentials run while `P V` is in flight.
pub fn prefill_knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("MMA", "tensor-core instructions (mma.sync or warpgroup wgmma)", ["sync", "wgmma"])
        .axis("BM", "query rows per block", [64i64, 128])
        .axis("BN", "keys per pipeline stage", [32i64, 64, 128])
        .axis("WM", "warps (each owns BM/WM query rows; wgmma: BM/16)", [4i64, 8])
        .axis("STAGES", "cp.async depth of the K/V ring", [2i64, 3])
        .axis("QK_UNROLL", "unroll the loop over the 64-column chunks of the score product", [true, false])
        .axis("OVERLAP", "wgmma: run the softmax while the previous tile's P V product is in flight", [false, true])
        .axis(
            "QORDER",
            "causal block order: per head, or longest tiles first over L2-sized head groups",
            ["head", "lpt"],
        )
        .axis(
            "SOFTMAX",
            "online softmax: scaled scores and exp2, or raw-score max with the scale in exp2_ftz",
            ["exact", "fast"],
        )
        .axis(
            "SMGUARD",
            "OVERLAP: the softmax in its own basic block, so that the P V wait stays after it",
            [false, true],
        )
        .axis(
            PREFILL_PINGPONG_KNOB,
            "OVERLAP: the warpgroups issue their products in turn (ping-pong), one's softmax under the other's \
             products",
            [false, true],
        )
        .axis(
            PREFILL_LOAD_KNOB,
            "wgmma: Q/K/V tiles by cp.async (every thread, commit groups and a block barrier per KV tile) or by TMA \
             (thread 0 issues bulk tensor copies completing on per-slot mbarriers)",
            ["cp_async", "tma"],
        )
}

/// The prefill knob `LOAD` (`cp_async` | `tma` | `auto`; absent = `cp_async`): how the Q tile and the K/V
/// ring reach shared memory. `tma` (MMA=wgmma only) has thread 0 issue one bulk tensor copy per 64-column
/// chunk (boxes `[64, 1, BM or BN]` over `[d, H, T or S]`, landing 128-byte-swizzled exactly as the wgmma
/// descriptors read them) completing on a full mbarrier per ring slot (separate ones for K and V, so the
/// overlapped schedule's V ring can run one tile behind); every thread arrives on the slot's empty mbarrier
/// once the product that read it has completed, and thread 0 waits for that before refilling the slot (no
/// block barrier in the KV loop). Rows past a sequence's end are loaded from the next sequence (or read as zero
/// past the tensor) and masked exactly like the zero rows of the cp.async path. `auto` (the default) is `tma`
/// for MMA=wgmma with at most two consumer warpgroups (BM <= 128; every such shape qualifies: the rows are
/// 384/256 bytes, the boxes at most 256 rows) and `cp_async` for MMA=sync (whose V tile has 256-byte rows) and
/// for BM=192 (whose TMA kernel spills under the 168-register cap); it is accepted but not an axis of
/// [`prefill_knob_space`] (it would duplicate points).
pub const PREFILL_LOAD_KNOB: &str = "LOAD";

/// The prefill knob `PRODUCER` (`thread` | `warp`; absent = `thread`), for the TMA kernel of at most two consumer
/// warpgroups (ignored elsewhere: cp.async, BM=192); `warp` in [`prefill_default_knobs`] since 2026-12-04 (H200, same
/// run: causal T8192 H96 3.9859 ms vs 4.3065, T32768 H12 6.9094 vs 7.5580; `lab/2026-12-04/
/// 1309-h200-run/`); not an axis of [`prefill_knob_space`] (on the cp.async points, half of the space, it would
/// duplicate kernels). Who issues the Q, K and V copies.
/// `thread`: thread 0, in the consumers' loop (its warp waits there for a slot's release). `warp`: a dedicated
/// producer warpgroup (warp specialization, [`Stmt::Producer`]) that runs the same loads ahead of the consumers as
/// far as the empty barriers let it.
pub const PREFILL_PRODUCER_KNOB: &str = "PRODUCER";

/// The prefill knob `PERSIST` (bool; absent = false): a persistent grid of one block per SM (`NUM_SMS`) that walks
/// the (q-tile, head) items head after head, each head's longest q-tile paired with its shortest, a pair per step,
/// `gridDim.x` pairs apart, instead of one block per item. The K / V ring and its barrier phases run on across items,
/// so the producer warpgroup loads the next item's first K / V tiles while the consumers finish the current one, and
/// its Q tile (a `q_empty` barrier, released once the item's last score product is complete) during the current
/// item's last softmax, P V product and epilogue, which reads the gate straight from global memory (the Q buffer may
/// already hold the next item's tile). For the overlapped wgmma kernel with `LOAD=tma`, `PRODUCER=warp` and
/// `QORDER=head` (an error elsewhere); varlen problems keep one block per item.
///
/// Measured slower, so neither a default nor an axis of [`prefill_knob_space`]: on the H200 (2026-12-04,
/// same run against the defaults) causal T8192 H96 3.9228 ms vs 3.6674, T32768 H12 7.1403 vs 6.3995 (a plain
/// round robin over the longest-first order was 17% / 32% slower, an earlier run that day). The static walk leaves about 3% imbalance
/// by the arithmetic, and ncu (that day) counted some 10% more instructions issued for the same work; where the rest
/// goes is not known. Kept as the base of a dynamic item scheduler (an atomic item counter, as in FA3), which needs
/// the item index handed from the producer to the consumers through shared memory.
pub const PREFILL_PERSIST_KNOB: &str = "PERSIST";

/// The prefill knob `PINGPONG` (bool; absent = false; `OVERLAP` with two or more consumer warpgroups): the
/// warpgroups issue each tile's products (`S = Q K^T` and the previous tile's `O += P V`) in turn
/// ([`Stmt::InTurn`], FlashAttention-3's ping-pong schedule), so that one warpgroup's products run on the tensor
/// cores while the other runs its softmax. The first KV tile is peeled off the loop (its turn holds the score
/// product only). In [`prefill_default_knobs`] since 2026-12-04 (H200, same run against the earlier defaults of
/// that day: causal T8192 H96 3.7363 ms vs 3.9565, T32768 H12 6.5232 vs 6.9020; with the thread-0 producer 4.1346 vs
/// 4.2651; `lab/2026-12-04/1437-h200-run/`). An error where it cannot apply (knob sets that change
/// `OVERLAP` or `WM` from the defaults say `PINGPONG=false`).
pub const PREFILL_PINGPONG_KNOB: &str = "PINGPONG";

/// The prefill knobs used when no tuning record exists: the wgmma kernel ([`prefill_wgmma_knobs`] with the
/// overlapped schedule, 0 spills at 192 registers; 4.97 ms causal T = 8192 H = 96 on an H200 against 8.73
/// for the mma.sync kernel, whose knobs are [`prefill_sync_knobs`]) with the causal blocks per head
/// (`QORDER=head`: on the H200, 2026-12-01, same run, it measured 4.933 ms at T8192 H96 and 9.229 at T32768 H12
/// against 4.977 / 9.300 for the LPT order, which stays in the knob space).
pub fn prefill_default_knobs() -> Knobs {
    // SOFTMAX=fast measured on the H200 (2026-12-01, same run): causal T8192 H96 4.825 ms against 4.983 exact,
    // T32768 H12 8.797 against 9.057 (SMGUARD=true was slower on both: 5.028 / 9.162).
    // LOAD=auto (TMA for the wgmma kernel) from the H200 (2026-12-01, same run): T8192 H96 4.486
    // ms against 4.812 with cp.async, T32768 H12 7.912 against 8.663 (BN=64 STAGES=3 with TMA: 6.474 / 11.818).
    prefill_wgmma_knobs()
        .with("OVERLAP", true)
        .with("QORDER", "head")
        .with("SOFTMAX", "fast")
        .with(PREFILL_LOAD_KNOB, "auto")
        .with(PREFILL_PRODUCER_KNOB, "warp")
        .with(PREFILL_PINGPONG_KNOB, true)
}

/// The mma.sync prefill knobs (the fastest mma.sync point of a first sweep on an H200: 218 TFLOP/s causal at
/// T = 8192, H = 96; BM = 64 with 4 warps was 202).
pub fn prefill_sync_knobs() -> Knobs {
    Knobs::new()
        .with("MMA", "sync")
        .with("BM", 128i64)
        .with("BN", 64i64)
        .with("WM", 8i64)
        .with("STAGES", 2i64)
        .with("QK_UNROLL", true)
        .with("OVERLAP", false)
}

/// The plain (not overlapped) wgmma prefill knobs: two consumer warpgroups of 64 query rows, 128-key tiles in
/// a 2-deep ring.
pub fn prefill_wgmma_knobs() -> Knobs {
    Knobs::new()
        .with("MMA", "wgmma")
        .with("BM", 128i64)
        .with("BN", 128i64)
        .with("WM", 8i64)
        .with("STAGES", 2i64)
        .with("QK_UNROLL", true)
        .with("OVERLAP", false)
}

/// The `LOAD=tma` tensor maps and mbarriers of the prefill.
struct PrefillTma {
    qm: TmapId,
    km: TmapId,
    vm: TmapId,
    q_full: MbarId,
    /// PERSIST: the consumers release the Q tile after an item's last product.
    q_empty: Option<MbarId>,
    k_full: MbarId,
    k_empty: MbarId,
    v_full: MbarId,
    v_empty: MbarId,
}

struct PrefillCfg {
    bm: u32,
    bn: u32,
    wm: u32,
    stages: u32,
    qk_unroll: bool,
    wgmma: bool,
    overlap: bool,
    /// Causal only: longest-processing-time-first block order over L2-sized head groups (`QORDER=lpt`).
    qorder_lpt: bool,
    /// Heads per LPT group (`HGROUP`; 0: as many as fit [`L2_GROUP_BYTES`] of K/V).
    hgroup: u32,
    /// `SOFTMAX=fast`: max of the raw scores, scale folded into the exponent, `exp2_ftz`.
    fast_softmax: bool,
    /// `SMGUARD`: the overlapped softmax in its own basic block (see [`prefill_knob_space`]).
    smguard: bool,
    /// `LOAD=tma`: Q, K and V tiles by bulk tensor copies on mbarriers (see [`PREFILL_LOAD_KNOB`]).
    tma: bool,
    /// `PRODUCER=warp` (LOAD=tma): the copies come from a dedicated producer warpgroup (see
    /// [`PREFILL_PRODUCER_KNOB`]).
    producer_warp: bool,
    /// `PINGPONG` (OVERLAP, two or more warpgroups): the warpgroups issue their products in turn.
    pingpong: bool,
    /// `PERSIST` (fixed lengths): one block per SM walks the (q-tile, head) items (see [`PREFILL_PERSIST_KNOB`]).
    persist: bool,
}

/// The K/V bytes an LPT head group may keep in L2 (FA3's 32 MB rule).
const L2_GROUP_BYTES: i64 = 32 << 20;

fn prefill_cfg(spec: &PrefillSpec, k: &Knobs) -> Result<PrefillCfg, OpError> {
    const OP: &str = "gated_mla_prefill";
    let wgmma = opt_choice(OP, k, "MMA", "sync", "wgmma")?;
    let overlap = opt_bool(k, "OVERLAP")?;
    let c = PrefillCfg {
        bm: k.u32("BM")?,
        bn: k.u32("BN")?,
        wm: k.u32("WM")?,
        stages: k.u32("STAGES")?,
        qk_unroll: k.bool("QK_UNROLL")?,
        wgmma,
        overlap,
        qorder_lpt: opt_choice(OP, k, "QORDER", "head", "lpt")?,
        hgroup: opt_u32(k, "HGROUP", 0)?,
        fast_softmax: opt_choice(OP, k, "SOFTMAX", "exact", "fast")?,
        smguard: opt_bool(k, "SMGUARD")?,
        tma: match k.0.get(PREFILL_LOAD_KNOB) {
            None => false,
            Some(_) => match k.str(PREFILL_LOAD_KNOB)? {
                "cp_async" => false,
                "tma" => true,
                // Three consumer warpgroups (BM=192) run under the 168-register cap of 384 threads, where the
                // TMA kernel spills (92 bytes at BN=96, ptxas sm_90a): auto keeps cp.async there.
                "auto" => wgmma && k.u32("BM")? <= 128,
                other => return invalid(OP, k, format!("LOAD={other}: cp_async, tma or auto")),
            },
        },
        producer_warp: opt_choice(OP, k, PREFILL_PRODUCER_KNOB, "thread", "warp")?,
        pingpong: opt_bool(k, PREFILL_PINGPONG_KNOB)?,
        persist: opt_bool(k, PREFILL_PERSIST_KNOB)?,
    };
    // PRODUCER=warp applies to the TMA kernel of one or two consumer warpgroups: cp.async has no copies to hand to a
    // producer warp, and three consumer warpgroups (BM=192) spill under the producer's 512-thread launch (144
    // bytes at BN=64, ptxas sm_90a, even with setmaxnreg); elsewhere it is ignored, as `LOAD=auto` is.
    let c = PrefillCfg { producer_warp: c.producer_warp && c.tma && c.wm * 32 <= 256, ..c };
    if c.producer_warp && !(c.wm * 32).is_multiple_of(128) {
        return invalid(
            OP,
            k,
            format!("PRODUCER=warp needs whole consumer warpgroups (WM a multiple of 4, got {})", c.wm),
        );
    }
    if c.tma && !c.wgmma {
        return invalid(
            OP,
            k,
            "LOAD=tma needs MMA=wgmma (the copy engine writes 128-byte swizzled rows; the mma.sync V tile has 256-byte rows)"
                .into(),
        );
    }
    if c.wm == 0 || c.wm > 16 || c.bm == 0 || !c.bm.is_multiple_of(16 * c.wm) {
        return invalid(OP, k, format!("BM={} must be a positive multiple of 16*WM (WM={} in 1..=16)", c.bm, c.wm));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(16) {
        return invalid(OP, k, format!("BN={} must be a positive multiple of 16", c.bn));
    }
    if c.stages < 2 {
        return invalid(OP, k, "STAGES >= 2".into());
    }
    if !spec.dqk.is_multiple_of(KC) || !spec.dv.is_multiple_of(KC) || spec.dv > spec.dqk {
        return invalid(OP, k, format!("head dims {}/{}: multiples of {KC} with dv <= dqk", spec.dqk, spec.dv));
    }
    if c.overlap && !c.wgmma {
        return invalid(OP, k, "OVERLAP needs MMA=wgmma".into());
    }
    if c.smguard && !c.overlap {
        return invalid(OP, k, "SMGUARD needs OVERLAP=true".into());
    }
    if c.persist && !(c.tma && c.producer_warp && c.overlap && c.wgmma && !c.qorder_lpt) {
        return invalid(
            OP,
            k,
            "PERSIST needs the overlapped wgmma kernel with LOAD=tma, PRODUCER=warp and QORDER=head".into(),
        );
    }
    // Varlen items have per-sequence lengths: the block-per-item grid stays.
    let c = PrefillCfg { persist: c.persist && !spec.varlen, ..c };
    if c.pingpong && !(c.overlap && c.wm >= 8) {
        return invalid(
            OP,
            k,
            format!("PINGPONG needs OVERLAP=true and two or more warpgroups to take turns (WM >= 8, got {})", c.wm),
        );
    }
    let rows = c.bm / c.wm;
    if c.wgmma {
        // One warpgroup per 64 query rows; every warp holds 16 rows of S, P and O.
        if c.bm != 64 * (c.wm / 4) || !c.wm.is_multiple_of(4) {
            return invalid(OP, k, format!("MMA=wgmma: BM={} must be 64 rows per warpgroup (WM = BM/16)", c.bm));
        }
        if c.bn > 256 {
            return invalid(OP, k, format!("MMA=wgmma: BN={} (the score product's N) at most 256", c.bn));
        }
        // S (f32), P (bf16 pairs) and O: with one warpgroup per 64 rows ptxas needs roughly another 60 for
        // addresses, descriptors and the row statistics.
        let regs = rows * c.bn / 32 + rows * c.bn / 64 + rows * spec.dv / 32;
        if regs > 176 {
            return invalid(OP, k, format!("{regs} tile registers per thread (max 176 for wgmma)"));
        }
    } else {
        // Per-thread registers of the score tile (f32), P (bf16 pairs) and the accumulators: ptxas needs about
        // as many again for fragments and addresses (measured: 112 tile registers assemble to ~254).
        let regs = rows * c.bn / 32 + rows * c.bn / 64 + rows * spec.dv / 32;
        if regs > 128 {
            return invalid(OP, k, format!("{regs} tile registers per thread (max 128)"));
        }
    }
    // LOAD=tma adds the mbarriers: one for Q, full and empty ones per K and per V slot.
    let mbar_bytes = if c.tma { 8 * (1 + 4 * c.stages as usize) } else { 0 };
    let smem = 2 * (c.bm * spec.dqk + c.stages * c.bn * (spec.dqk + spec.dv)) as usize + mbar_bytes;
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, k, format!("{smem} bytes of shared memory"));
    }
    Ok(c)
}

/// Build a prefill kernel.
///
/// Tensor arguments, in order: `q [T, H, DQK]`, `k [S, H, DQK]`, `v [S, H, DV]` (bf16), then for varlen
/// `cu_seqlens_q [N1]`, `cu_seqlens_k [N1]` (i32, N1 = sequences + 1; T and S are then the packed totals TQ
/// and TK), then `z [T, H, DV]` bf16 when gated, then the outputs `o [T, H, DV]` bf16 and `lse [H, T]` f32.
/// Scalars: `scale` (float, tau) and for varlen `MAX_SEQLEN_Q` (int, the longest query sequence).
/// Grid: `(ceil(T / BM), H, 1)`, or `(ceil(MAX_SEQLEN_Q / BM), H, N1 - 1)`; q-tiles are walked from the last
/// to the first so that the longest causal tiles start first (per head, or across head groups: `QORDER`).
pub fn build_prefill(spec: &PrefillSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    let c = prefill_cfg(spec, knobs)?;
    let (bm, bn, st) = (c.bm, c.bn, c.stages);
    let (dqk, dv) = (spec.dqk, spec.dv);
    let name = format!(
        "k3k_mla_prefill_{}{}{}_d{}_{}_{}",
        if spec.causal { "causal" } else { "full" },
        if spec.gate { "_gated" } else { "" },
        if spec.varlen { "_varlen" } else { "" },
        dqk,
        dv,
        knobs.id().to_lowercase()
    );
    let mut b = KernelBuilder::new(&name, 32 * c.wm);
    b.knobs(knobs.clone());
    if c.producer_warp {
        b.producer_warp();
    }
    let (tq, tk) = if spec.varlen { (b.dim("TQ"), b.dim("TK")) } else { (b.dim("T"), b.dim("S")) };
    let h = b.dim("H");
    let q = b.tensor("q", DType::Bf16, &[tq.clone(), h.clone(), Expr::from(dqk)], Access::Read);
    let k = b.tensor("k", DType::Bf16, &[tk.clone(), h.clone(), Expr::from(dqk)], Access::Read);
    let v = b.tensor("v", DType::Bf16, &[tk.clone(), h.clone(), Expr::from(dv)], Access::Read);
    let cu = if spec.varlen {
        let n1 = b.dim("N1");
        let cq = b.tensor("cu_seqlens_q", DType::I32, std::slice::from_ref(&n1), Access::Read);
        let ck = b.tensor("cu_seqlens_k", DType::I32, std::slice::from_ref(&n1), Access::Read);
        Some((cq, ck, n1))
    } else {
        None
    };
    let z = spec.gate.then(|| b.tensor("z", DType::Bf16, &[tq.clone(), h.clone(), Expr::from(dv)], Access::Read));
    let o = b.tensor("o", DType::Bf16, &[tq.clone(), h.clone(), Expr::from(dv)], Access::Write);
    let lse = b.tensor("lse", DType::F32, &[h.clone(), tq.clone()], Access::Write);
    let scale = b.float_arg("scale");
    match &cu {
        Some((_, _, n1)) => {
            let max_q = b.int_arg("MAX_SEQLEN_Q");
            b.grid(max_q.ceil_div(bm as i64), h.clone(), n1.clone() - 1i64);
        }
        None if c.persist => {
            // One block per SM (at least one, at most one per pair of items).
            let items = (tq.ceil_div(bm as i64) * h.clone()).ceil_div(2i64);
            let num_sms = b.int_arg(NUM_SMS);
            b.grid(num_sms.min(items).max(1i64), 1i64, 1i64);
        }
        None => b.grid(tq.ceil_div(bm as i64), h.clone(), 1i64),
    }

    let warps = [c.wm, 1];
    // Q and K are stored as KC-column chunks so that the score product can walk them in a rolled loop.
    let (nqk, nv) = (dqk / KC, dv / KC);
    let sq = b.shared("sQ", DType::Bf16, bm, KC, nqk, Swizzle::Xor16B);
    let sk = b.shared("sK", DType::Bf16, bn, KC, st * nqk, Swizzle::Xor16B);
    // wgmma reads V N-contiguous in 64-column slices of 128-byte rows (tile `slot * nv + c`); mma.sync reads
    // a whole [BN, DV] stage.
    let sv = if c.wgmma {
        b.shared("sV", DType::Bf16, bn, KC, st * nv, Swizzle::Xor16B)
    } else {
        b.shared("sV", DType::Bf16, bn, dv, st, Swizzle::Xor16B)
    };
    // LOAD=tma: maps over q / k / v ([d, H, T or S] innermost first) with boxes of one 64-column chunk of one
    // head's BM or BN rows, a barrier for the Q tile, and full / empty barriers per K and per V ring slot.
    let tma = c.tma.then(|| PrefillTma {
        qm: b.tensor_map("q_map", q, &[KC, 1, bm], Swizzle::Xor16B),
        km: b.tensor_map("k_map", k, &[KC, 1, bn], Swizzle::Xor16B),
        vm: b.tensor_map("v_map", v, &[KC, 1, bn], Swizzle::Xor16B),
        q_full: b.mbarriers("q_full", 1),
        q_empty: c.persist.then(|| b.mbarriers("q_empty", 1)),
        k_full: b.mbarriers("k_full", st),
        k_empty: b.mbarriers("k_empty", st),
        v_full: b.mbarriers("v_full", st),
        v_empty: b.mbarriers("v_empty", st),
    });
    let s = b.tile("s", DType::F32, bm, bn, warps);
    let p = b.tile("p", DType::Bf16, bm, bn, warps);
    let accs: Vec<TileId> = (0..nv).map(|c| b.tile(&format!("acc{c}"), DType::F32, bm, KC, warps)).collect();
    let zt = spec.gate.then(|| b.tile("zt", DType::Bf16, bm, KC, warps));
    let sm = OnlineSoftmax::new(&mut b, bm, warps, warps);
    let inv_l = b.vec("inv_l", bm, warps);
    let lse_v = b.vec("lse_rows", bm, warps);

    let (q_start, t_n, k_start, s_n) = match &cu {
        Some((cq, ck, _)) => {
            let n = Expr::block_idx(2);
            let q0 = b.let_("q_start", load(*cq, n.clone()));
            let t_n = b.let_("t_n", load(*cq, n.clone() + 1i64) - q0.clone());
            let k0 = b.let_("k_start", load(*ck, n.clone()));
            let s_n = b.let_("s_n", load(*ck, n + 1i64) - k0.clone());
            (q0, t_n, k0, s_n)
        }
        None => (Expr::Int(0), tq.clone(), Expr::Int(0), tk.clone()),
    };
    // PERSIST: the items' coordinates come inside the walk; the ring's running stage count `kbase` (K / V tiles of
    // earlier items of this block) and the item count (the Q barriers' phases) carry across items.
    let walk = c.persist.then(|| {
        let scale_log2 = b.let_("scale_log2", scale.clone() * LOG2_E);
        (scale_log2, b.let_var("kbase", 0i64), b.let_var("item", 0i64))
    });
    // One block per item (no PERSIST): the item's first query row and head from the block index.
    let block_item = walk.is_none().then(|| {
        let (mt, hh) = if spec.causal && c.qorder_lpt {
            // Longest tiles first over groups of `g` heads (FA3's LPT order): the linear block index walks the
            // q-tiles from the last to the first with the heads of a group innermost, so the tail wave holds only
            // the shortest tiles; a group's K/V (g heads of `s_n` keys) is sized to stay in L2.
            let g = if c.hgroup > 0 {
                h.clone().min(c.hgroup as i64)
            } else {
                let per_head = s_n.clone().max(1i64) * (2 * (dqk + dv)) as i64;
                (Expr::Int(L2_GROUP_BYTES) / per_head).min(h.clone()).max(1i64)
            };
            let g = b.let_("hgroup", g);
            let nq = Expr::grid_dim(0);
            let lin = b.let_("lin", Expr::block_idx(0) + nq.clone() * Expr::block_idx(1));
            let per_group = g.clone() * nq.clone();
            let h0 = b.let_("h0", lin.clone() / per_group.clone() * g.clone());
            let within = b.let_("within", lin % per_group);
            let hig = b.let_("heads_in_group", g.min(h.clone() - h0.clone()));
            let mt = b.let_("mt", nq - 1i64 - within.clone() / hig.clone());
            let hh = b.let_("head", h0 + within % hig);
            (mt, hh)
        } else {
            let mt = b.let_("mt", Expr::grid_dim(0) - 1i64 - Expr::block_idx(0));
            let hh = b.let_("head", Expr::block_idx(1));
            (mt, hh)
        };
        (b.let_("m0", mt * bm as i64), hh)
    });
    let scale_log2 = match &walk {
        Some((sl, _, _)) => sl.clone(),
        None => b.let_("scale_log2", scale * LOG2_E),
    };
    let pk = PrefillKernel {
        spec,
        c: &c,
        q,
        k,
        v,
        z,
        o,
        lse,
        h: h.clone(),
        tq: tq.clone(),
        nqk,
        nv,
        sq,
        sk,
        sv,
        tma,
        s,
        p,
        accs,
        zt,
        sm,
        inv_l,
        lse_v,
        q_start,
        t_n: t_n.clone(),
        k_start,
        s_n,
        walk,
        scale_log2,
        ring: StageRing::new(st, c.persist),
    };
    match &pk.walk {
        Some(_) => {
            // PERSIST: the barriers are initialized once. The items, head after head, pair each head's longest
            // q-tile with its shortest (the last with the first, the next-to-last with the second, ...: items 2i
            // and 2i + 1 of a head hold about nq + 1 KV tiles together), and block b takes pairs b, b +
            // gridDim.x, ...: equal work per pair, so a static walk balances (a plain round robin over the
            // longest-first order left 17% more work on the busiest block at T32768 H12).
            if let Some(m) = &pk.tma {
                pk.init_barriers(&mut b, m);
            }
            let nq = b.let_("n_qtiles", tq.ceil_div(bm as i64));
            let items = b.let_("items", nq.clone() * h.clone());
            b.for_("pair", Expr::block_idx(0), items.clone().ceil_div(2i64), Expr::grid_dim(0), |b, pair| {
                b.for_("half", 0i64, 2i64, 1i64, |b, half| {
                    let w = b.let_("w", pair.clone() * 2i64 + half);
                    b.if_(w.clone().lt(items.clone()), |b| {
                        let i = b.let_("i", w.clone() % nq.clone());
                        let mt = b.let_(
                            "mt",
                            Expr::select(
                                (i.clone() % 2i64).eq(0i64),
                                nq.clone() - 1i64 - i.clone() / 2i64,
                                i.clone() / 2i64,
                            ),
                        );
                        let hh = b.let_("head", w / nq.clone());
                        let m0 = b.let_("m0", mt * bm as i64);
                        pk.item(b, m0, hh);
                    });
                });
            });
        }
        None => {
            let (m0, hh) = block_item.expect("a block per item without PERSIST");
            if spec.varlen {
                b.if_(m0.lt(t_n.clone()), |b| pk.item(b, m0.clone(), hh.clone()));
            } else {
                pk.item(&mut b, m0, hh);
            }
        }
    }
    Ok(b.finish()?)
}

/// What the prefill's per-item code shares ([`build_prefill`]): the problem, the knobs, the tensors, the Q tile
/// and K/V stages, the score, P and value tiles, the online softmax and the sequence bounds.
struct PrefillKernel<'a> {
    spec: &'a PrefillSpec,
    c: &'a PrefillCfg,
    q: TensorId,
    k: TensorId,
    v: TensorId,
    z: Option<TensorId>,
    o: TensorId,
    lse: TensorId,
    h: Expr,
    tq: Expr,
    /// 64-column chunks of a Q / K row and of a V row.
    nqk: u32,
    nv: u32,
    sq: SharedId,
    sk: SharedId,
    sv: SharedId,
    tma: Option<PrefillTma>,
    s: TileId,
    p: TileId,
    accs: Vec<TileId>,
    zt: Option<TileId>,
    sm: OnlineSoftmax,
    inv_l: VecId,
    lse_v: VecId,
    /// The sequence's first query and key rows and its query and key counts (varlen: from `cu_seqlens`).
    q_start: Expr,
    t_n: Expr,
    k_start: Expr,
    s_n: Expr,
    /// PERSIST: the scale in the log2 domain, the ring's running stage count and the item count.
    walk: Option<(Expr, VarId, VarId)>,
    scale_log2: Expr,
    ring: StageRing,
}

/// One (q-tile, head) item of the prefill: its first query row `m0` and head `hh`, and what follows from them.
struct PrefillItem {
    m0: Expr,
    hh: Expr,
    rows_q: Expr,
    /// Keys this q-tile may see, and their tiles.
    n_end: Expr,
    n_tiles: Expr,
    /// The last key row 0 of the tile may see (causal); tiles ending after it need the mask.
    diag: Expr,
    row_stride_qk: Expr,
    row_stride_v: Expr,
}

impl PrefillKernel<'_> {
    /// The ring use of K / V tile `kt` of the item (PERSIST: after the earlier items' tiles).
    fn u(&self, kt: Expr) -> Expr {
        match &self.walk {
            Some((_, kbase, _)) => Expr::Var(*kbase) + kt,
            None => kt,
        }
    }

    /// The slot of ring use `u` and the parity of its phase (PERSIST's uses are never negative: a mask and a shift
    /// at a power-of-two STAGES).
    fn slot_of(&self, u: Expr) -> Expr {
        self.ring.slot(u)
    }

    fn phase_of(&self, u: Expr) -> Expr {
        self.ring.phase(u)
    }

    fn init_barriers(&self, b: &mut KernelBuilder, m: &PrefillTma) {
        let wm = self.c.wm;
        b.mbar_init(m.q_full, 1);
        if let Some(qe) = m.q_empty {
            b.mbar_init(qe, 32 * wm);
        }
        b.mbar_init(m.k_full, 1);
        b.mbar_init(m.k_empty, 32 * wm);
        b.mbar_init(m.v_full, 1);
        b.mbar_init(m.v_empty, 32 * wm);
    }

    /// Stage `kt` of a K or V ring (`t` is `k` or `v`): the tile's 64-column chunks of a `[S, H, d]` tensor into
    /// its slot.
    fn load_chunks(&self, b: &mut KernelBuilder, it: &PrefillItem, kt: Expr, t: TensorId) {
        let (d, n, buf) =
            if t == self.k { (self.spec.dqk, self.nqk, self.sk) } else { (self.spec.dv, self.nv, self.sv) };
        let bn = self.c.bn;
        let slot = self.slot_of(self.u(kt.clone()));
        let kv0 = kt.clone() * bn as i64;
        if let Some(m) = &self.tma {
            let (map, full, empty) =
                if t == self.k { (m.km, m.k_full, m.k_empty) } else { (m.vm, m.v_full, m.v_empty) };
            // Thread 0 waits until every thread has released the slot's previous use (tile kt - STAGES, phase
            // kt / STAGES - 1 of its empty barrier; a fresh barrier passes parity 1 at once), then announces
            // the stage's bytes (whole boxes: rows past the tensor's end arrive as zeros) and issues the copies.
            // Rows past the sequence's end come from the next sequence: masked like the cp.async zeros.
            b.mbar_wait_elected(empty, slot.clone(), self.ring.empty_parity(self.u(kt.clone())));
            b.mbar_arrive_expect_tx(full, slot.clone(), 2 * bn * d);
            for cc in 0..n {
                let dst = b.slot(buf, slot.clone() * n as i64 + cc as i64);
                let coords = vec![Expr::from((cc * KC) as i64), it.hh.clone(), self.k_start.clone() + kv0.clone()];
                b.tma_load(map, dst, coords, full, slot.clone());
            }
            return;
        }
        let h = &self.h;
        for c in 0..n {
            let src = view(
                t,
                ((self.k_start.clone() + kv0.clone()) * h.clone() + it.hh.clone()) * d as i64 + (c * KC) as i64,
                h.clone() * d as i64,
                self.s_n.clone() - kv0.clone(),
                KC as i64,
                8,
            );
            let dst = b.slot(buf, slot.clone() * n as i64 + c as i64);
            b.copy_async(dst, src);
        }
    }

    fn load_k(&self, b: &mut KernelBuilder, it: &PrefillItem, kt: Expr) {
        self.load_chunks(b, it, kt, self.k);
    }

    fn load_v(&self, b: &mut KernelBuilder, it: &PrefillItem, kt: Expr) {
        if self.c.wgmma {
            self.load_chunks(b, it, kt, self.v);
        } else {
            let (bn, st, dv) = (self.c.bn, self.c.stages, self.spec.dv);
            let slot = kt.clone() % st as i64;
            let kv0 = kt * bn as i64;
            let vsrc = view(
                self.v,
                ((self.k_start.clone() + kv0.clone()) * self.h.clone() + it.hh.clone()) * dv as i64,
                it.row_stride_v.clone(),
                self.s_n.clone() - kv0,
                dv as i64,
                8,
            );
            let vd = b.slot(self.sv, slot);
            b.copy_async(vd, vsrc);
        }
    }

    fn load_stage(&self, b: &mut KernelBuilder, it: &PrefillItem, kt: Expr) {
        self.load_k(b, it, kt.clone());
        self.load_v(b, it, kt);
    }

    /// The Q tile: one box per 64-column chunk (rows past the sequence's end are never stored); PERSIST: once
    /// the consumers have released the previous item's.
    fn load_q(&self, b: &mut KernelBuilder, it: &PrefillItem, m: &PrefillTma) {
        let (bm, dqk, nqk) = (self.c.bm, self.spec.dqk, self.nqk);
        b.producer_if(self.c.producer_warp, |b| {
            if let (Some(qe), Some((_, _, item))) = (m.q_empty, &self.walk) {
                b.mbar_wait_elected(qe, 0i64, Expr::Var(*item).bitand(1i64).bitxor(1i64));
            }
            b.mbar_arrive_expect_tx(m.q_full, 0i64, 2 * bm * dqk);
            for cc in 0..nqk {
                let dst = b.slot(self.sq, cc as i64);
                let coords = vec![Expr::from((cc * KC) as i64), it.hh.clone(), self.q_start.clone() + it.m0.clone()];
                b.tma_load(m.qm, dst, coords, m.q_full, 0i64);
            }
        });
    }

    /// Scale the raw scores into the log2 domain; mask only the tiles that cross the diagonal or the end of the
    /// keys.
    fn scale_mask(&self, b: &mut KernelBuilder, it: &PrefillItem, kv0: Expr) {
        let (causal, bn) = (self.spec.causal, self.c.bn);
        let tile_end = kv0.clone() + bn as i64;
        let need_mask = if causal {
            tile_end.clone().gt(self.s_n.clone()).or((tile_end - 1i64).gt(it.diag.clone()))
        } else {
            tile_end.gt(self.s_n.clone())
        };
        let key = kv0 + Expr::ColIdx;
        let mut visible = key.lt(self.s_n.clone());
        if causal {
            visible = visible.and(key.le(it.m0.clone() + Expr::RowIdx + self.s_n.clone() - self.t_n.clone()));
        }
        mask_scores(b, self.s, need_mask, visible, &self.scale_log2, self.c.fast_softmax);
    }

    fn softmax_scores(&self, b: &mut KernelBuilder) {
        step_scores(b, &self.sm, self.s, &self.scale_log2, self.c.fast_softmax);
    }

    /// wgmma: S = Q K^T over the three 64-column chunks (the first starts the tile).
    fn qk_async(&self, b: &mut KernelBuilder, slot: Expr) {
        let nqk = self.nqk;
        let chunk = |b: &mut KernelBuilder, cc: Expr| {
            let qa = Operand::Shared { src: b.slot(self.sq, cc.clone()), transpose: false };
            let kb = Operand::Shared { src: b.slot(self.sk, slot.clone() * nqk as i64 + cc.clone()), transpose: true };
            b.mma_async_init(self.s, qa, kb, cc.gt(0i64));
        };
        if self.c.qk_unroll {
            b.for_unrolled("chunk", 0i64, nqk as i64, 1i64, chunk);
        } else {
            b.for_("chunk", 0i64, nqk as i64, 1i64, chunk);
        }
    }

    /// The score product as three statements (no loop): inside a turn (PINGPONG), so that the renderer sees
    /// which products the following wait leaves in flight.
    fn qk_flat(&self, b: &mut KernelBuilder, slot: Expr) {
        for cc in 0..self.nqk as i64 {
            let qa = Operand::Shared { src: b.slot(self.sq, cc), transpose: false };
            let kb = Operand::Shared { src: b.slot(self.sk, slot.clone() * self.nqk as i64 + cc), transpose: true };
            b.mma_async_init(self.s, qa, kb, Expr::Bool(cc > 0));
        }
    }

    /// wgmma: O += P V per 64-column value slice (B stored [keys, values]).
    fn pv_async(&self, b: &mut KernelBuilder, slot: Expr) {
        for (cv, &acc) in self.accs.iter().enumerate() {
            let vb =
                Operand::Shared { src: b.slot(self.sv, slot.clone() * self.nv as i64 + cv as i64), transpose: false };
            b.mma_async(acc, Operand::Reg(self.p), vb);
        }
    }

    /// One (q-tile, head) item: its Q tile, its K/V tiles through the ring, and its outputs.
    fn item(&self, b: &mut KernelBuilder, m0: Expr, hh: Expr) {
        let (spec, c) = (self.spec, self.c);
        let (bm, bn) = (c.bm, c.bn);
        let rows_q = b.let_("rows_q", self.t_n.clone() - m0.clone());
        // Keys this q-tile may see: all, or up to the last row's diagonal (bottom-right aligned).
        let n_end = if spec.causal {
            let last = (m0.clone() + bm as i64).min(self.t_n.clone()) + self.s_n.clone() - self.t_n.clone();
            b.let_("n_end", last.min(self.s_n.clone()).max(0i64))
        } else {
            self.s_n.clone()
        };
        let n_tiles = b.let_("n_tiles", n_end.ceil_div(bn as i64));
        let diag = b.let_("diag", m0.clone() + self.s_n.clone() - self.t_n.clone());
        let it = PrefillItem {
            m0,
            hh,
            rows_q,
            n_end,
            n_tiles,
            diag,
            row_stride_qk: self.h.clone() * spec.dqk as i64,
            row_stride_v: self.h.clone() * spec.dv as i64,
        };
        if let Some(m) = &self.tma
            && self.walk.is_none()
        {
            self.init_barriers(b, m);
            self.load_q(b, &it, m);
        }
        // Q tile (first commit group, with KV stage 0).
        for cc in (0..self.nqk).filter(|_| self.tma.is_none()) {
            let qsrc = view(
                self.q,
                ((self.q_start.clone() + it.m0.clone()) * self.h.clone() + it.hh.clone()) * spec.dqk as i64
                    + (cc * KC) as i64,
                it.row_stride_qk.clone(),
                it.rows_q.clone(),
                KC as i64,
                8,
            );
            let qd = b.slot(self.sq, cc as i64);
            b.copy_async(qd, qsrc);
        }
        if !c.wgmma || !c.overlap {
            self.tiles_in_order(b, &it);
        } else {
            self.tiles_overlapped(b, &it);
        }
        self.epilogue(b, &it);
    }

    /// The K/V tiles one after the other: the ring prefetches STAGES - 1 tiles ahead; each tile's scores, softmax
    /// and P V (mma.sync, or wgmma without OVERLAP).
    fn tiles_in_order(&self, b: &mut KernelBuilder, it: &PrefillItem) {
        let c = self.c;
        let (bn, st) = (c.bn, c.stages);
        for i in 0..st - 1 {
            b.producer_if(c.producer_warp, |b| {
                b.if_(Expr::Int(i as i64).lt(it.n_tiles.clone()), |b| self.load_stage(b, it, Expr::Int(i as i64)))
            });
            if self.tma.is_none() {
                b.commit();
            }
        }
        self.sm.init(b);
        for &acc in &self.accs {
            b.map(acc, 0.0f64);
        }
        if let Some(m) = &self.tma {
            b.mbar_wait(m.q_full, 0i64, 0i64);
        }
        b.for_("kt", 0i64, it.n_tiles.clone(), 1i64, |b, kt| {
            if self.tma.is_none() {
                b.wait(st - 2);
                b.barrier();
            }
            // (LOAD=tma: thread 0 waits for the refilled slot's empty barriers instead.)
            let next = &kt + (st - 1) as i64;
            b.producer_if(c.producer_warp, |b| {
                b.if_(next.lt(it.n_tiles.clone()), |b| self.load_stage(b, it, next.clone()))
            });
            if self.tma.is_none() {
                b.commit();
            }
            let slot = if c.wgmma { b.let_("slot", &kt % st as i64) } else { &kt % st as i64 };
            let parity = (&kt / st as i64) % 2i64;
            let kv0 = b.let_("kv0", &kt * bn as i64);
            if c.wgmma {
                if let Some(m) = &self.tma {
                    b.mbar_wait(m.k_full, slot.clone(), parity.clone());
                }
                self.qk_async(b, slot.clone());
                b.mma_wait(0);
                // The score product is complete: release the K slot to the producer.
                if let Some(m) = &self.tma {
                    b.mbar_arrive(m.k_empty, slot.clone());
                }
            } else {
                b.map(self.s, 0.0f64);
                qk_chunks(b, self.s, self.sq, self.sk, slot.clone() * self.nqk as i64, self.nqk, c.qk_unroll);
            }
            self.scale_mask(b, it, kv0);
            self.softmax_scores(b);
            self.sm.step_finish(b, self.s, self.p, &self.accs);
            if c.wgmma {
                if let Some(m) = &self.tma {
                    b.mbar_wait(m.v_full, slot.clone(), parity);
                }
                self.pv_async(b, slot.clone());
                b.mma_wait(0);
                if let Some(m) = &self.tma {
                    b.mbar_arrive(m.v_empty, slot);
                }
            } else {
                for (cv, &acc) in self.accs.iter().enumerate() {
                    let vb = Operand::Shared {
                        src: b.window(self.sv, slot.clone(), 0, cv as u32 * KC, bn, KC),
                        transpose: false,
                    };
                    b.mma(acc, Operand::Reg(self.p), vb);
                }
            }
        });
    }

    /// Overlapped wgmma: iteration kt issues S(kt) = Q K(kt)^T and then O += P(kt-1) V(kt-1), waits for S only,
    /// runs the softmax of tile kt while P V is in flight, then waits for it and rescales O and writes P(kt).
    /// V(kt-1) is still read during iteration kt, so the ring runs V one tile behind K: commit group j holds K(j)
    /// and V(j-1), and iteration kt loads group kt + STAGES - 1 (K into the slot of K(kt-1), read by S(kt-1); V into
    /// the slot of V(kt-2), read by P V in iteration kt-1), both finished by every thread at the top barrier.
    fn tiles_overlapped(&self, b: &mut KernelBuilder, it: &PrefillItem) {
        let c = self.c;
        let (bn, st, nv) = (c.bn, c.stages, self.nv);
        let n_tiles = &it.n_tiles;
        // Group j >= 1 (group 0 holds K(0) and the Q tile).
        let load_group = |b: &mut KernelBuilder, j: Expr| {
            b.if_(j.clone().lt(n_tiles.clone()), |b| self.load_k(b, it, j.clone()));
            b.if_((j.clone() - 1i64).lt(n_tiles.clone()), |b| self.load_v(b, it, j.clone() - 1i64));
        };
        // LOAD=tma: the same schedule without commit groups or the block barrier: K(j) and V(j) complete on
        // the full barriers of slot j % STAGES; S(kt) waits for K(kt) and V(kt-1) (issued together), every
        // thread releases K(kt) once S(kt) is complete and V(kt-1) once P V(kt-1) is, and thread 0 waits for
        // those releases before loading K(kt + STAGES - 1) / V(kt + STAGES - 2) into the same slots.
        let commit = |b: &mut KernelBuilder| {
            if self.tma.is_none() {
                b.commit();
            }
        };
        b.producer_if(c.producer_warp, |b| {
            b.if_(Expr::Int(0).lt(n_tiles.clone()), |b| self.load_k(b, it, Expr::Int(0)))
        });
        commit(b);
        // PERSIST: the next item's first K tile may load while the consumers still read this item's Q tile.
        if let Some(m) = &self.tma
            && self.walk.is_some()
        {
            self.load_q(b, it, m);
        }
        for j in 1..st - 1 {
            b.producer_if(c.producer_warp, |b| load_group(b, Expr::Int(j as i64)));
            commit(b);
        }
        self.sm.init(b);
        for &acc in &self.accs {
            b.map(acc, 0.0f64);
        }
        // The Q tile's phase: the item's (PERSIST), else the only one.
        let q_parity = match &self.walk {
            Some((_, _, item)) => Expr::Var(*item).bitand(1i64),
            None => Expr::Int(0),
        };
        if let Some(m) = &self.tma {
            b.mbar_wait(m.q_full, 0i64, q_parity);
        }
        // One KV tile. `later`: whether kt > 0 is known statically (PINGPONG peels the first tile, so that a
        // turn holds straight-line products and the P V wait knows which it leaves in flight), or tested.
        let iteration = |b: &mut KernelBuilder, kt: Expr, later: Option<bool>| {
            let if_later = |b: &mut KernelBuilder, f: &dyn Fn(&mut KernelBuilder)| match later {
                None => b.if_(kt.clone().gt(0i64), |b| f(b)),
                Some(true) => f(b),
                Some(false) => {}
            };
            if self.tma.is_none() {
                b.wait(st - 2);
                b.barrier();
            }
            b.producer_if(c.producer_warp, |b| load_group(b, &kt + (st - 1) as i64));
            commit(b);
            let slot = b.let_("slot", self.slot_of(self.u(kt.clone())));
            let kv0 = b.let_("kv0", &kt * bn as i64);
            let prev = self.slot_of(self.u(kt.clone()) + (st - 1) as i64);
            if let Some(m) = &self.tma {
                b.mbar_wait(m.k_full, slot.clone(), self.phase_of(self.u(kt.clone())));
                if_later(b, &|b| b.mbar_wait(m.v_full, prev.clone(), self.phase_of(self.u(kt.clone()) - 1i64)));
            }
            match later {
                None => {
                    self.qk_async(b, slot.clone());
                    b.if_else(
                        kt.clone().gt(0i64),
                        |b| {
                            self.pv_async(b, prev.clone());
                            // The score product's groups were committed first: at most the P V ones remain.
                            b.mma_wait(nv);
                        },
                        |b| b.mma_wait(0),
                    );
                }
                Some(later) => {
                    b.in_turn_if(c.pingpong, |b| {
                        self.qk_flat(b, slot.clone());
                        if later {
                            self.pv_async(b, prev.clone());
                        }
                    });
                    b.mma_wait(if later { nv } else { 0 });
                }
            }
            if let Some(m) = &self.tma {
                b.mbar_arrive(m.k_empty, slot.clone());
                // PERSIST: the item's last score product is complete: release the Q tile, so that the next
                // item's Q tile loads while this one finishes.
                if let Some(qe) = m.q_empty {
                    b.if_(kt.clone().eq(n_tiles.clone() - 1i64), |b| b.mbar_arrive(qe, 0i64));
                }
            }
            if c.smguard {
                // Always true (kv0 < n_tiles * BN and n_tiles = ceil(n_end / BN)); see SMGUARD.
                self.scale_mask(b, it, kv0.clone());
                b.if_(kv0.lt(it.n_end.clone()), |b| self.softmax_scores(b));
            } else {
                self.scale_mask(b, it, kv0);
                self.softmax_scores(b);
            }
            b.mma_wait(0);
            if let Some(m) = &self.tma {
                if_later(b, &|b| b.mbar_arrive(m.v_empty, prev.clone()));
            }
            self.sm.step_finish(b, self.s, self.p, &self.accs);
        };
        if c.pingpong {
            b.if_(Expr::Int(0).lt(n_tiles.clone()), |b| iteration(b, Expr::Int(0), Some(false)));
            b.for_("kt", 1i64, n_tiles.clone(), 1i64, |b, kt| iteration(b, kt, Some(true)));
        } else {
            b.for_("kt", 0i64, n_tiles.clone(), 1i64, |b, kt| iteration(b, kt, None));
        }
        // The last tile's P V: its V is in group n_tiles, issued during the last iteration.
        b.if_(n_tiles.clone().gt(0i64), |b| {
            let last = self.slot_of(self.u(n_tiles.clone()) + (st - 1) as i64);
            match &self.tma {
                Some(m) => b.mbar_wait(m.v_full, last.clone(), self.phase_of(self.u(n_tiles.clone()) - 1i64)),
                None => {
                    b.wait(0);
                    b.barrier();
                }
            }
            self.pv_async(b, last.clone());
            b.mma_wait(0);
            // PERSIST: the ring runs on into the next item.
            if let Some(m) = self.tma.as_ref().filter(|_| self.walk.is_some()) {
                b.mbar_arrive(m.v_empty, last);
            }
        });
        // PERSIST: an item without keys releases its Q tile here.
        if let Some(qe) = self.tma.as_ref().and_then(|m| m.q_empty) {
            b.if_(n_tiles.clone().le(0i64), |b| b.mbar_arrive(qe, 0i64));
        }
    }

    /// o = acc / l (* sigmoid(z)), lse = ln(sum exp(tau q k)); PERSIST: the ring's count and the item count
    /// advance.
    fn epilogue(&self, b: &mut KernelBuilder, it: &PrefillItem) {
        let (sm, h, dv) = (&self.sm, &self.h, self.spec.dv);
        if self.tma.is_none() {
            b.wait(0);
        }
        if self.c.fast_softmax {
            // The running max is in raw score units; the LSE wants it in the log2 domain (-inf stays -inf).
            b.vec_map(sm.m, rv(sm.m) * self.scale_log2.clone());
        }

        b.vec_map(self.inv_l, sm.inv_l());
        let out_off = ((self.q_start.clone() + it.m0.clone()) * h.clone() + it.hh.clone()) * dv as i64;
        // (PERSIST: the Q buffer may already hold the next item's tile; the gate comes from global memory.)
        if let Some(z) = self.z.filter(|_| self.walk.is_none()) {
            // Stage the gate tile through the Q chunks (no longer read) with coalesced 16-byte copies.
            b.barrier();
            for c in 0..self.nv {
                let zsrc = view(
                    z,
                    out_off.clone() + (c * KC) as i64,
                    it.row_stride_v.clone(),
                    it.rows_q.clone(),
                    KC as i64,
                    8,
                );
                let zd = b.slot(self.sq, c as i64);
                b.copy_async(zd, zsrc);
            }
            b.commit();
            b.wait(0);
            b.barrier();
        }
        for (c, &acc) in self.accs.iter().enumerate() {
            match self.zt {
                Some(zt) => {
                    let src = match (self.z, &self.walk) {
                        (Some(z), Some(_)) => Place::Global(view(
                            z,
                            out_off.clone() + (c * KC as usize) as i64,
                            it.row_stride_v.clone(),
                            it.rows_q.clone(),
                            KC as i64,
                            8,
                        )),
                        _ => Place::Shared(b.slot(self.sq, c as i64)),
                    };
                    b.load(zt, src);
                    b.map(acc, el(acc) * rv(self.inv_l) * el(zt).sigmoid());
                }
                None => b.map(acc, el(acc) * rv(self.inv_l)),
            }
            let dst = view(
                self.o,
                out_off.clone() + (c as u32 * KC) as i64,
                it.row_stride_v.clone(),
                it.rows_q.clone(),
                KC as i64,
                8,
            );
            b.store(acc, Place::Global(dst));
        }
        b.vec_map(self.lse_v, sm.lse_nat());
        b.store_vec(
            self.lse_v,
            vec_view(
                self.lse,
                it.hh.clone() * self.tq.clone() + self.q_start.clone() + it.m0.clone(),
                1i64,
                it.rows_q.clone(),
            ),
        );
        if let Some((_, kbase, item)) = &self.walk {
            b.assign(*kbase, Expr::Var(*kbase) + it.n_tiles.clone());
            b.assign(*item, Expr::Var(*item) + 1i64);
        }
    }
}
