//! The prefill kernel of [`crate::gated_mla`]: [`build_prefill`] and the state its parts read. Where the parts
//! live: the knob space and defaults (`knobs`), the resolved configuration (`cfg`), the TMA rings, barriers and
//! loads (`pipeline`), the score scaling, masking, softmax and the tensor-core products (`scores`), and one work
//! item's KV loop and epilogue (`tiles`).

use super::*;

mod cfg;
mod knobs;
mod pipeline;
mod scores;
mod tiles;

use cfg::*;
pub use knobs::*;

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
        let (mt, hh) = block_coords(&mut b, spec, &c, &h, &s_n);
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
            pk.walk_pairs(&mut b, &tq, &h);
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
pub(super) struct PrefillKernel<'a> {
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
pub(super) struct PrefillItem {
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

/// One block per item (no PERSIST): the item's q-tile and head from the block index, the q-tiles longest first
/// (`QORDER=lpt`: over groups of heads; else head after head).
fn block_coords(b: &mut KernelBuilder, spec: &PrefillSpec, c: &PrefillCfg, h: &Expr, s_n: &Expr) -> (Expr, Expr) {
    if spec.causal && c.qorder_lpt {
        // Longest tiles first over groups of `g` heads (FA3's LPT order): the linear block index walks the
        // q-tiles from the last to the first with the heads of a group innermost, so the tail wave holds only
        // the shortest tiles; a group's K/V (g heads of `s_n` keys) is sized to stay in L2.
        let g = if c.hgroup > 0 {
            h.clone().min(c.hgroup as i64)
        } else {
            let per_head = s_n.clone().max(1i64) * (2 * (spec.dqk + spec.dv)) as i64;
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
    }
}

impl PrefillKernel<'_> {
    /// PERSIST: the items of a block's pairs, after the barriers' one initialization.
    fn walk_pairs(&self, b: &mut KernelBuilder, tq: &Expr, h: &Expr) {
        let bm = self.c.bm;
        if let Some(m) = &self.tma {
            self.init_barriers(b, m);
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
                    self.item(b, m0, hh);
                });
            });
        });
    }
}
