//! Kernel 1 of [`crate::hist_quantile`]: alpha, the (k+1)-th largest biased score of each token row (four builders).

use super::*;

/// What the alpha kernel's program depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AlphaSpec {
    /// Elements per lane, `ceil(E / 32)`.
    pub epl: u32,
    /// alpha is the (k+1)-th largest.
    pub k: u32,
    /// `E == 32 epl` (no masking).
    pub full: bool,
}

impl AlphaSpec {
    /// The variant for `E` experts and `k`.
    pub fn for_shape(e: usize, k: usize) -> Self {
        let epl = e.div_ceil(32).max(1) as u32;
        AlphaSpec { epl, k: k as u32, full: e == 32 * epl as usize }
    }
    /// Lane groups whose maxima bound alpha from below: `ceil((k+1)/32)`.
    pub fn groups(&self) -> u32 {
        (self.k + 1).div_ceil(32)
    }
}

/// The interface every alpha kernel shares: dims T and E, the scores `s: [T, E]`, the bias `b: [E]`, the output
/// `alpha: [T]`, and a grid of one block per `rows_per_block` tokens, at most `abps` blocks per SM.
struct AlphaIo {
    t_dim: Expr,
    e_dim: Expr,
    s: TensorId,
    bias: TensorId,
    alpha: TensorId,
}

fn alpha_io(b: &mut KernelBuilder, rows_per_block: i64, abps: u32) -> AlphaIo {
    let t_dim = b.dim("T");
    let e_dim = b.dim("E");
    let s = b.tensor("s", DType::F32, &[t_dim.clone(), e_dim.clone()], Access::Read);
    let bias = b.tensor("b", DType::F32, std::slice::from_ref(&e_dim), Access::Read);
    let alpha = b.tensor("alpha", DType::F32, std::slice::from_ref(&t_dim), Access::Write);
    let nsm = b.int_arg(NUM_SMS);
    b.grid(t_dim.ceil_div(rows_per_block).min(nsm * abps as i64), 1i64, 1i64);
    AlphaIo { t_dim, e_dim, s, bias, alpha }
}

/// The bias, once per block: `sb[0, i] = b[i]` for `i < E`, 0 up to the padded width `ep`, then a barrier.
fn stage_bias(b: &mut KernelBuilder, bias: TensorId, sb: SharedId, e_dim: &Expr, ep: u32, threads: u32) {
    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), ep as i64, threads as i64, |b, i| {
            let v = Expr::select(i.lt(e_dim.clone()), Expr::load(bias, i.clone()), 0.0f64);
            b.shared_store(sb, 0i64, 0i64, i, v);
        });
    });
    b.barrier();
}

/// Build the alpha kernel: `s [T, E]`, `b [E]` -> `alpha [T]`.
pub fn build_alpha(spec: &AlphaSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let (w, epl, k) = (c.aw, spec.epl, spec.k);
    let g = spec.groups();
    if g > epl || g > 2 {
        return Err(OpError::Internal(format!("alpha: k = {k} needs {g} lane groups of {epl} elements")));
    }
    let ep = 32 * epl;
    let threads = 32 * w;
    let name = format!("k3k_hq_alpha_epl{epl}_k{k}{}_aw{}_abps{}", if spec.full { "_full" } else { "" }, c.aw, c.abps);
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(Knobs::new().with("AW", c.aw as i64).with("ABPS", c.abps as i64));
    let AlphaIo { t_dim, e_dim, s, bias, alpha } = alpha_io(&mut b, w as i64, c.abps);

    let sb = b.shared("bias", DType::F32, 1, ep, 1, Swizzle::None);
    let vals = b.shared("vals", DType::F32, w, ep, 1, Swizzle::None);
    let mx = b.shared("gmax", DType::F32, w, 32 * g, 1, Swizzle::None);
    let lval = b.shared("lbound", DType::F32, 1, w, 1, Swizzle::None);
    let cnt = b.shared("ncand", DType::I32, 1, w, 1, Swizzle::None);
    let cand = b.shared("cand", DType::F32, w, CAND_CAP, 1, Swizzle::None);

    let in_row = |e: &Expr| -> Expr { if spec.full { Expr::Bool(true) } else { e.lt(e_dim.clone()) } };

    stage_bias(&mut b, bias, sb, &e_dim, ep, threads);
    let step = Expr::grid_dim(0) * w as i64;
    b.for_("tok0", Expr::block_idx(0) * w as i64, t_dim.clone(), step, |b, tok0| {
        // 1: s + b into the row buffer, group maxima.
        b.threads(|b| {
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            b.if_(t.lt(t_dim.clone()), |b| {
                let base = b.let_("base", &t * e_dim.clone());
                let gm: Vec<VarId> = (0..g).map(|i| b.let_var(&format!("gmax{i}"), neg_inf())).collect();
                // All row loads first (EPL coalesced 128-byte lines in flight per warp), then bias, store, maxima.
                let raws = lane_loads(b, spec, s, &base, &in_row);
                for (j, raw) in raws.into_iter().enumerate() {
                    let j = j as u32;
                    let e = b.let_("e", Expr::lane_idx() + (32 * j) as i64);
                    let v = raw + Expr::shared_load(sb, 0i64, 0i64, e.clone());
                    let v = if spec.full { v } else { Expr::select(in_row(&e), v, neg_inf()) };
                    let v = b.let_("v", v);
                    b.shared_store(vals, 0i64, Expr::warp_idx(), e, v.clone());
                    let gi = (j * g / epl) as usize;
                    b.assign(gm[gi], ival(gm[gi]).max(v));
                }
                for (i, m) in gm.iter().enumerate() {
                    b.shared_store(mx, 0i64, Expr::warp_idx(), Expr::lane_idx() + (32 * i) as i64, ival(*m));
                }
                b.if_(Expr::lane_idx().eq(0i64), |b| b.shared_store(cnt, 0i64, 0i64, Expr::warp_idx(), 0i64));
            });
        });
        b.barrier();
        // 2: the (k+1)-th largest group maximum (rank by counting, ties by position) is the lower bound L.
        b.threads(|b| {
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            b.if_(t.lt(t_dim.clone()), |b| {
                for gi in 0..g {
                    let me = b.let_("me", Expr::lane_idx() + (32 * gi) as i64);
                    let m = b.let_("m", Expr::shared_load(mx, 0i64, Expr::warp_idx(), me.clone()));
                    let rank = b.let_var("rank", 0i64);
                    b.for_unrolled("i", 0i64, (32 * g) as i64, 1i64, |b, i| {
                        let x = Expr::shared_load(mx, 0i64, Expr::warp_idx(), i.clone());
                        let before = x.gt(m.clone()).or(x.eq(m.clone()).and(i.lt(me.clone())));
                        b.assign(rank, ival(rank) + Expr::select(before, 1i64, 0i64));
                    });
                    b.if_(ival(rank).eq(k as i64), |b| b.shared_store(lval, 0i64, 0i64, Expr::warp_idx(), m.clone()));
                }
            });
        });
        b.barrier();
        // 3: compact the candidates >= L.
        b.threads(|b| {
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            b.if_(t.lt(t_dim.clone()), |b| {
                let l = b.let_("l", Expr::shared_load(lval, 0i64, 0i64, Expr::warp_idx()));
                for j in 0..epl {
                    let e = b.let_("e", Expr::lane_idx() + (32 * j) as i64);
                    let v = b.let_("v", Expr::shared_load(vals, 0i64, Expr::warp_idx(), e.clone()));
                    let keep = if spec.full { v.ge(l.clone()) } else { in_row(&e).and(v.ge(l.clone())) };
                    b.if_(keep, |b| {
                        let tgt = AtomicTarget::Shared {
                            buf: cnt,
                            index: Expr::Int(0),
                            row: Expr::Int(0),
                            col: Expr::warp_idx(),
                        };
                        let pos = b.atomic_fetch("pos", tgt, AtomicOp::Add, 1i64);
                        b.if_(pos.lt(CAND_CAP as i64), |b| {
                            b.shared_store(cand, 0i64, Expr::warp_idx(), pos.clone(), v.clone())
                        });
                    });
                }
            });
        });
        b.barrier();
        // 4: the candidate of rank k is alpha.
        b.threads(|b| {
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            b.if_(t.lt(t_dim.clone()), |b| {
                let n = b.let_("n", Expr::shared_load(cnt, 0i64, 0i64, Expr::warp_idx()));
                b.if_else(
                    n.le(CAND_CAP as i64),
                    |b| {
                        store_rank_k(b, "v", (cand, Expr::Int(0), Expr::warp_idx()), &n, k, alpha, &t);
                    },
                    |b| {
                        // Too many candidates (ties): rank against the whole row (values below L never count).
                        let l = b.let_("l", Expr::shared_load(lval, 0i64, 0i64, Expr::warp_idx()));
                        b.for_("i", Expr::lane_idx(), e_dim.clone(), 32i64, |b, i| {
                            let v = b.let_("v", Expr::shared_load(vals, 0i64, Expr::warp_idx(), i.clone()));
                            b.if_(v.ge(l.clone()), |b| {
                                let rank = b.let_var("rank", 0i64);
                                b.for_("j", 0i64, e_dim.clone(), 1i64, |b, j| {
                                    let x = Expr::shared_load(vals, 0i64, Expr::warp_idx(), j.clone());
                                    let before = x.gt(v.clone()).or(x.eq(v.clone()).and(j.lt(i.clone())));
                                    b.assign(rank, ival(rank) + Expr::select(before, 1i64, 0i64));
                                });
                                b.if_(ival(rank).eq(k as i64), |b| b.store_scalar(alpha, t.clone(), v.clone()));
                            });
                        });
                    },
                );
            });
        });
        b.barrier();
    });
    Ok(b.finish()?)
}

/// Build the warp-shuffle alpha kernel (`ASEL=warp`, for `k < 32`): `s [T, E]`, `b [E]` -> `alpha [T]`.
///
/// One warp per token, no block barriers in the token loop and one threads region per step: lane `l` keeps
/// its `EPL` values `s + b` in registers and their maximum; a bitonic sort of the 32 lane maxima across the
/// warp (`shfl_xor`) gives `L`, the (k+1)-th largest lane maximum, a lower bound of alpha (k+1 lanes hold a
/// value >= L). Each lane counts its values >= L, a warp scan (`shfl_up`) gives each lane its slots in the
/// warp's candidate row in shared memory (room for the whole row, so any number of ties is exact), and after
/// a `syncwarp` the candidates (all of them values >= alpha, alpha among them) are sorted across the warp
/// when there are at most 32 (alpha: the k-th largest), else ranked by the lanes (ties by slot). Exact, like
/// [`build_alpha`]: a selection, no arithmetic beyond the one f32 add the reference does.
///
/// `ATPW` tokens per warp and step (rows `u W + warp`, `u < ATPW`): every row's loads are issued before any
/// row's selection, and each stage (maxima, sorts, counts, scans, candidate stores) is emitted for all rows
/// side by side, so the rows' dependent shuffle chains overlap (the kernel is latency-bound: ~450 warp
/// instructions per token at ATPW=1, about a quarter of the SM's issue rate used) and twice the bytes are in
/// flight per warp. Each row has its own candidate row in shared memory.
// The stages loop over the element index outside the row index on purpose (rows side by side).
#[allow(clippy::needless_range_loop)]
pub fn build_alpha_warp(spec: &AlphaSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let (w, epl, k, tpw) = (c.aw, spec.epl, spec.k, c.atpw);
    if k >= 32 {
        return Err(OpError::Internal(format!("warp alpha: k = {k} needs more than the 32 lane maxima")));
    }
    let ep = 32 * epl;
    let threads = 32 * w;
    let name = format!(
        "k3k_hq_alphaw_epl{epl}_k{k}{}_aw{}_abps{}{}",
        if spec.full { "_full" } else { "" },
        c.aw,
        c.abps,
        if tpw > 1 { format!("_tpw{tpw}") } else { String::new() }
    );
    let mut b = KernelBuilder::new(&name, threads);
    let mut kn = Knobs::new().with("AW", c.aw as i64).with("ABPS", c.abps as i64).with("ASEL", "warp");
    if tpw > 1 {
        kn = kn.with("ATPW", tpw as i64);
    }
    b.knobs(kn);
    let per_block = (w * tpw) as i64;
    let AlphaIo { t_dim, e_dim, s, bias, alpha } = alpha_io(&mut b, per_block, c.abps);

    let sb = b.shared("bias", DType::F32, 1, ep, 1, Swizzle::None);
    let cand = b.shared("cand", DType::F32, w * tpw, ep, 1, Swizzle::None);
    let in_row = |e: &Expr| -> Expr { if spec.full { Expr::Bool(true) } else { e.lt(e_dim.clone()) } };

    stage_bias(&mut b, bias, sb, &e_dim, ep, threads);
    let step = Expr::grid_dim(0) * per_block;
    let rows: Vec<u32> = (0..tpw).collect();
    b.for_("tok0", Expr::block_idx(0) * per_block, t_dim.clone(), step, |b, tok0| {
        b.threads(|b| {
            // Every lane runs the warp statements: a warp past the last token works on the last one and
            // writes nothing.
            let ts: Vec<Expr> = rows.iter().map(|&u| b.let_("t", &tok0 + Expr::warp_idx() + (u * w) as i64)).collect();
            let crow: Vec<Expr> = rows.iter().map(|&u| Expr::warp_idx() + (u * w) as i64).collect();
            let bases: Vec<Expr> = ts
                .iter()
                .map(|t| {
                    let tc = b.let_("tc", t.clone().min(t_dim.clone() - 1i64));
                    b.let_("base", &tc * e_dim.clone())
                })
                .collect();
            // All rows' loads first.
            let raws: Vec<Vec<Expr>> = bases.iter().map(|base| lane_loads(b, spec, s, base, &in_row)).collect();
            let mut vals: Vec<Vec<Expr>> = vec![vec![]; tpw as usize];
            let ms: Vec<VarId> = rows.iter().map(|_| b.let_var("m", neg_inf())).collect();
            for j in 0..epl as usize {
                let e = Expr::lane_idx() + (32 * j) as i64;
                let bj = b.let_("bj", Expr::shared_load(sb, 0i64, 0i64, e.clone()));
                for (u, raw) in raws.iter().enumerate() {
                    let v = &raw[j] + bj.clone();
                    let v = if spec.full { v } else { Expr::select(in_row(&e), v, neg_inf()) };
                    let v = b.let_("v", v);
                    b.assign(ms[u], ival(ms[u]).max(v.clone()));
                    vals[u].push(v);
                }
            }
            let ls = warp_kth_largest_rows(b, ms.iter().map(|m| ival(*m)).collect(), k);
            // Candidates: this lane's values >= L (counted in f32: exact small integers, 32-bit shuffles);
            // slots from a warp scan of the counts.
            let cnts: Vec<VarId> = rows.iter().map(|_| b.let_var("cnt", 0.0f64)).collect();
            for j in 0..epl as usize {
                for u in 0..tpw as usize {
                    let v = &vals[u][j];
                    b.assign(cnts[u], ival(cnts[u]) + Expr::select(v.ge(ls[u].clone()), 1.0f64, 0.0f64));
                }
            }
            let mut scs: Vec<Expr> = cnts.iter().map(|c| ival(*c)).collect();
            for d in [1u32, 2, 4, 8, 16] {
                let us: Vec<Expr> = scs.iter().map(|sc| b.warp_shuffle("u", WarpOp::ShflUp(d), sc.clone())).collect();
                for (sc, u) in scs.iter_mut().zip(us) {
                    *sc = b.let_("sc", &*sc + Expr::select(Expr::lane_idx().ge(d as i64), u, 0.0f64));
                }
            }
            let ns: Vec<Expr> = scs
                .iter()
                .map(|sc| {
                    let n = b.warp_shuffle("nf", WarpOp::ShflIdx(31), sc.clone());
                    b.let_("n", n.to_int())
                })
                .collect();
            let pos: Vec<VarId> =
                scs.iter().zip(&cnts).map(|(sc, c)| b.let_var("pos", (sc - ival(*c)).to_int())).collect();
            // The previous step's ranking has read the candidate rows.
            b.warp_sync();
            for j in 0..epl as usize {
                for u in 0..tpw as usize {
                    let v = vals[u][j].clone();
                    let (p, r) = (pos[u], crow[u].clone());
                    b.if_(v.ge(ls[u].clone()), |b| {
                        b.shared_store(cand, 0i64, r, ival(p), v.clone());
                        b.assign(p, ival(p) + 1i64);
                    });
                }
            }
            b.warp_sync();
            // At most 32 candidates (the usual case): one per lane, sorted across the warp.
            let mines: Vec<Expr> = rows
                .iter()
                .enumerate()
                .map(|(u, _)| {
                    let mine = Expr::shared_load(cand, 0i64, crow[u].clone(), Expr::lane_idx());
                    b.let_("mine", Expr::select(Expr::lane_idx().lt(ns[u].clone()), mine, neg_inf()))
                })
                .collect();
            let als = warp_kth_largest_rows(b, mines, k);
            for u in 0..tpw as usize {
                let (t, n, a, r) = (ts[u].clone(), ns[u].clone(), als[u].clone(), crow[u].clone());
                b.if_(t.lt(t_dim.clone()), |b| {
                    b.if_else(
                        n.le(32i64),
                        |b| b.if_(Expr::lane_idx().eq(0i64), |b| b.store_scalar(alpha, t.clone(), a.clone())),
                        |b| {
                            // More (ties): rank every candidate (ties by slot); the one of rank k is alpha.
                            store_rank_k(b, "cv", (cand, Expr::Int(0), r.clone()), &n, k, alpha, &t);
                        },
                    );
                });
            }
        });
    });
    Ok(b.finish()?)
}

/// Build the ring alpha kernel (`ASEL=ring`, for `k < 32`): `s [T, E]`, `b [E]` -> `alpha [T]`.
///
/// The selection of [`build_alpha_warp`] (one warp per token; bound `L` from a bitonic sort of the 32 lane
/// maxima; candidates `>= L` compacted by a warp scan; a second sort; ties ranked), fed by an `ASTAGES`-deep
/// ring of `AW`-token row blocks that `cp.async` copies into shared memory ahead of use: while the warps select
/// in step `i`, the copies of steps `i + 1 .. i + ASTAGES - 1` are in flight ((`ASTAGES` - 1) x `AW` x `4 E`
/// bytes per block), whatever the selection's latency. The warp kernel only has a row's 28 loads in flight
/// while it waits for them and none while it selects (its loads are issued by the same warp that then runs
/// the ~1,500-cycle dependent chain of maxima, shuffles and compaction). The per-lane work is shorter too: the
/// maxima and counts are balanced trees (depth 5 instead of chains of 28), the bias add reads the staged bias
/// row, and the candidates go into the warp's own ring row (its values are in registers by then), so the
/// block needs no separate candidate buffer. Rows past `T` are zero-filled by the copy and write nothing.
/// Exact, like the other alpha kernels.
#[allow(clippy::needless_range_loop)]
pub fn build_alpha_ring(spec: &AlphaSpec, c: &Cfg, e: usize) -> Result<Kernel, OpError> {
    let (w, epl, k, st) = (c.aw, spec.epl, spec.k, c.astages);
    if k >= 32 {
        return Err(OpError::Internal(format!("ring alpha: k = {k} needs more than the 32 lane maxima")));
    }
    let ep = 32 * epl;
    let threads = 32 * w;
    let bytes = (st as usize * w as usize + 1) * ep as usize * 4;
    if bytes > MAX_SHARED_BYTES {
        return Err(OpError::InvalidKnobs {
            op: "hist_quantile",
            knobs: format!("ASEL=ring,AW={w},ASTAGES={st}"),
            why: format!("the ring of {st} x {w} rows of {ep} f32 and the bias need {bytes} bytes of shared memory"),
        });
    }
    // 16-byte copies when rows stay 16-byte aligned, else 8 or 4.
    let vec = if e.is_multiple_of(4) {
        4
    } else if e.is_multiple_of(2) {
        2
    } else {
        1
    };
    let name = format!(
        "k3k_hq_alphar_epl{epl}_k{k}{}_aw{}_abps{}_st{st}_v{vec}",
        if spec.full { "_full" } else { "" },
        c.aw,
        c.abps
    );
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(
        Knobs::new()
            .with("AW", c.aw as i64)
            .with("ABPS", c.abps as i64)
            .with("ASEL", "ring")
            .with("ASTAGES", st as i64),
    );
    let AlphaIo { t_dim, e_dim, s, bias, alpha } = alpha_io(&mut b, w as i64, c.abps);

    let sb = b.shared("bias", DType::F32, 1, ep, 1, Swizzle::None);
    let ring = b.shared("ring", DType::F32, w, ep, st, Swizzle::None);
    let in_row = |e: &Expr| -> Expr { if spec.full { Expr::Bool(true) } else { e.lt(e_dim.clone()) } };

    stage_bias(&mut b, bias, sb, &e_dim, ep, threads);
    let step = b.let_("step", Expr::grid_dim(0) * w as i64);
    let first = b.let_("first", Expr::block_idx(0) * w as i64);
    // Step `i` of this block: tokens `first + i step ..` into ring slot `i % ASTAGES`.
    let fetch = |b: &mut KernelBuilder, i: Expr| {
        let tok = &first + i.clone() * step.clone();
        let src = view(s, &tok * e_dim.clone(), e_dim.clone(), t_dim.clone() - tok.clone(), e_dim.clone(), vec);
        let dst = b.slot(ring, i % st as i64);
        b.copy_async(dst, src);
        b.commit();
    };
    for i in 0..st - 1 {
        fetch(&mut b, Expr::Int(i as i64));
    }
    // Steps counted from 0 (one division here, none per step); the grid has no block without a token.
    let nsteps = b.let_("nsteps", (t_dim.clone() - first.clone() + step.clone() - 1i64) / step.clone());
    b.for_("it", 0i64, nsteps, 1i64, |b, i| {
        let tok0 = b.let_("tok0", &first + i.clone() * step.clone());
        fetch(b, &i + (st - 1) as i64);
        b.wait(st - 1);
        b.barrier();
        b.threads(|b| {
            let slot = b.let_("slot", &i % st as i64);
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            let vals: Vec<Expr> = (0..epl)
                .map(|j| {
                    let e = Expr::lane_idx() + (32 * j) as i64;
                    let x = Expr::shared_load(ring, slot.clone(), Expr::warp_idx(), e.clone())
                        + Expr::shared_load(sb, 0i64, 0i64, e.clone());
                    let x = if spec.full { x } else { Expr::select(in_row(&e), x, neg_inf()) };
                    b.let_("v", x)
                })
                .collect();
            // Candidates: this lane's values >= L (counted in f32: exact small integers, 32-bit shuffles).
            let (l, cnt) = lower_bound_and_count(b, &vals, k);
            let mut sc = cnt.clone();
            for d in [1u32, 2, 4, 8, 16] {
                let u = b.warp_shuffle("u", WarpOp::ShflUp(d), sc.clone());
                sc = b.let_("sc", &sc + Expr::select(Expr::lane_idx().ge(d as i64), u, 0.0f64));
            }
            let n = b.warp_shuffle("nf", WarpOp::ShflIdx(31), sc.clone());
            let n = b.let_("n", n.to_int());
            let pos = b.let_var("pos", (&sc - cnt).to_int());
            // Every lane has read its values from the row before any lane overwrites it with candidates.
            b.warp_sync();
            store_candidates(b, (ring, slot.clone()), &vals, &l, pos);
            let col = Expr::lane_idx().min((ep - 1) as i64);
            select_alpha(b, (ring, slot.clone()), col, &n, k, (alpha, &t, &t_dim));
        });
        // Every warp is done with slot `i % ASTAGES` before step `i + 1` copies into it.
        b.barrier();
    });
    // No copy group is left in flight at exit.
    b.wait(0);
    Ok(b.finish()?)
}

/// Build the lean warp alpha kernel (`ASEL=lean`, for `k < 32`): `s [T, E]`, `b [E]` -> `alpha [T]`.
///
/// The selection of [`build_alpha_warp`] (one warp per token; `L` = the (k+1)-th largest of the 32 lane maxima
/// from a bitonic sort across the warp, a lower bound of alpha; the values `>= L` are the candidates; a second
/// sort of at most 32 candidates, else ranking with ties by slot) with less work on the ALU pipe and shorter
/// dependent chains, where the warp kernel spends its time (~450 warp instructions per token, most of them
/// compares, min/max, selects and integer adds, at half the issue rate; ~40 dependent shuffles):
/// - the lane maximum is a balanced tree (depth 5) instead of a chain of `EPL`;
/// - compiled for the grid's residency (`__launch_bounds__(32 AW, ABPS)`, at most what leaves 40 registers): at `ABPS=6`, `AW=8` ptxas fits the kernel
///   in 40 registers without spills, 48 warps per SM instead of 32;
/// - the per-lane candidate count is a balanced tree, and a lane's first slot in the warp's candidate row comes
///   from one shared atomic per lane with candidates (`ATOMS` on the warp's counter, which then holds the
///   count `n`) instead of a warp scan (five dependent shuffles, selects and a broadcast of the total). Lanes
///   take their slot ranges in whatever order their atomics land (on the GPU) or in lane order (CPU
///   backends): the candidates are a set, and the selected *value* does not depend on their order (the
///   fallback ranking's ties by slot pick one of equal values).
///
/// Warp-local ordering of the counter and the candidate row (no block barrier in the token loop): a
/// `syncwarp` before the atomics (the previous token's reads of the row are done), one before the count and
/// the candidates are read, and one before lane 0 zeroes the counter for the next token (every lane has read
/// it). The counters start at zero with the staged bias (one block barrier before the loop). Exact, like the
/// other alpha kernels: a selection, no arithmetic beyond the one f32 add the reference does.
pub fn build_alpha_lean(spec: &AlphaSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let (w, epl, k) = (c.aw, spec.epl, spec.k);
    if k >= 32 {
        return Err(OpError::Internal(format!("lean alpha: k = {k} needs more than the 32 lane maxima")));
    }
    let ep = 32 * epl;
    let threads = 32 * w;
    let name = format!("k3k_hq_alphal_epl{epl}_k{k}{}_aw{}_abps{}", if spec.full { "_full" } else { "" }, c.aw, c.abps);
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(Knobs::new().with("AW", c.aw as i64).with("ABPS", c.abps as i64).with("ASEL", "lean"));
    // The persistent grid has ABPS blocks per SM: compile for that residency (ptxas caps the registers at what
    // ABPS blocks of AW warps leave of the SM's 64 Ki, e.g. 40 at ABPS=6, AW=8: 48 warps per SM instead of the
    // 32 that 48 registers allow).
    // Never below EPL + 12 registers rounded up to 8 (the lane's values and the sorts' temporaries: 40 at
    // E = 896, where 32 spills; 48 at E = 1024, where 40 spills).
    let min_regs = (epl + 12).next_multiple_of(8);
    b.min_blocks_per_sm(c.abps.min(65536 / (min_regs * threads)).max(1));
    let AlphaIo { t_dim, e_dim, s, bias, alpha } = alpha_io(&mut b, w as i64, c.abps);

    let sb = b.shared("bias", DType::F32, 1, ep, 1, Swizzle::None);
    let cand = b.shared("cand", DType::F32, w, ep, 1, Swizzle::None);
    let cnt = b.shared("ncand", DType::I32, 1, w, 1, Swizzle::None);
    let in_row = |e: &Expr| -> Expr { if spec.full { Expr::Bool(true) } else { e.lt(e_dim.clone()) } };

    // The counters start at zero; the bias staging's barrier orders this before the loop.
    b.threads(|b| {
        b.if_(Expr::thread_idx().lt(w as i64), |b| b.shared_store(cnt, 0i64, 0i64, Expr::thread_idx(), 0i64));
    });
    stage_bias(&mut b, bias, sb, &e_dim, ep, threads);
    let step = Expr::grid_dim(0) * w as i64;
    b.for_("tok0", Expr::block_idx(0) * w as i64, t_dim.clone(), step, |b, tok0| {
        b.threads(|b| {
            // Every lane runs the warp statements: a warp past the last token works on the last one and
            // writes nothing.
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            let tc = b.let_("tc", t.clone().min(t_dim.clone() - 1i64));
            let base = b.let_("base", &tc * e_dim.clone());
            let raws = lane_loads(b, spec, s, &base, &in_row);
            let vals: Vec<Expr> = raws
                .into_iter()
                .enumerate()
                .map(|(j, raw)| {
                    let e = Expr::lane_idx() + (32 * j) as i64;
                    let v = raw + Expr::shared_load(sb, 0i64, 0i64, e.clone());
                    let v = if spec.full { v } else { Expr::select(in_row(&e), v, neg_inf()) };
                    b.let_("v", v)
                })
                .collect();
            // This lane's values >= L, counted in f32 (exact small integers; FSET and FADD, a tree).
            let (l, c) = lower_bound_and_count(b, &vals, k);
            // The previous token's reads of the candidate row and the counter are done.
            b.warp_sync();
            // The lane's first slot: one shared atomic per lane with candidates (instead of a warp scan).
            let pos = b.let_var("pos", 0i64);
            b.if_(c.gt(0.0f64), |b| {
                let tgt =
                    AtomicTarget::Shared { buf: cnt, index: Expr::Int(0), row: Expr::Int(0), col: Expr::warp_idx() };
                let p0 = b.atomic_fetch("p0", tgt, AtomicOp::Add, c.to_int());
                b.assign(pos, p0);
            });
            store_candidates(b, (cand, Expr::Int(0)), &vals, &l, pos);
            let n = b.let_("n", Expr::shared_load(cnt, 0i64, 0i64, Expr::warp_idx()));
            select_alpha(b, (cand, Expr::Int(0)), Expr::lane_idx(), &n, k, (alpha, &t, &t_dim));
            // Every lane has read the counter: zero it for the next token.
            b.warp_sync();
            b.if_(Expr::lane_idx().eq(0i64), |b| b.shared_store(cnt, 0i64, 0i64, Expr::warp_idx(), 0i64));
        });
    });
    Ok(b.finish()?)
}

/// This lane's `EPL` values of the row of `s` that starts at `base` (elements `lane + 32 j`), all loaded before
/// any is used (the warp's coalesced 128-byte lines in flight together); 0 past the row's end.
fn lane_loads(
    b: &mut KernelBuilder,
    spec: &AlphaSpec,
    s: TensorId,
    base: &Expr,
    in_row: &dyn Fn(&Expr) -> Expr,
) -> Vec<Expr> {
    (0..spec.epl)
        .map(|j| {
            let e = Expr::lane_idx() + (32 * j) as i64;
            let ld = Expr::load(s, base + e.clone());
            let ld = if spec.full { ld } else { Expr::select(in_row(&e), ld, 0.0f64) };
            b.let_("raw", ld)
        })
        .collect()
}

/// The lower bound `L` of a warp's row (the `k`-th largest of its lanes' maxima) and how many of this lane's
/// `vals` are `>= L`, counted in f32 (exact small integers; FSET and FADD, a tree).
fn lower_bound_and_count(b: &mut KernelBuilder, vals: &[Expr], k: u32) -> (Expr, Expr) {
    let m = b.let_("m", tree(vals.to_vec(), &|x, y| x.max(y)));
    let l = warp_kth_largest_rows(b, vec![m], k).remove(0);
    let l = b.let_("l", l);
    let cnt = b
        .let_("cnt", tree(vals.iter().map(|v| Expr::select(v.ge(l.clone()), 1.0f64, 0.0f64)).collect(), &|x, y| x + y));
    (l, cnt)
}

/// This lane's candidates (its `vals` `>= l`) into the warp's row of shared `(buf, slot)` from column `pos` on
/// (advancing it), then a warp barrier: the candidates are all in place.
fn store_candidates(b: &mut KernelBuilder, (buf, slot): (SharedId, Expr), vals: &[Expr], l: &Expr, pos: VarId) {
    for v in vals {
        b.if_(v.ge(l.clone()), |b| {
            b.shared_store(buf, slot.clone(), Expr::warp_idx(), ival(pos), v.clone());
            b.assign(pos, ival(pos) + 1i64);
        });
    }
    b.warp_sync();
}

/// `alpha[t]` (for a token `t` below `t_dim`) from the `n` candidates in the warp's row of shared `(buf, slot)`:
/// with at most 32, the `k`-th largest of the lanes' own (lane `l` reads column `col`, masked past `n`); with more
/// (ties), by ranking every candidate ([`store_rank_k`]).
fn select_alpha(
    b: &mut KernelBuilder,
    (buf, slot): (SharedId, Expr),
    col: Expr,
    n: &Expr,
    k: u32,
    (alpha, t, t_dim): (TensorId, &Expr, &Expr),
) {
    let mine = Expr::shared_load(buf, slot.clone(), Expr::warp_idx(), col);
    let mine = b.let_("mine", Expr::select(Expr::lane_idx().lt(n.clone()), mine, neg_inf()));
    let a = warp_kth_largest_rows(b, vec![mine], k).remove(0);
    b.if_(t.lt(t_dim.clone()), |b| {
        b.if_else(
            n.le(32i64),
            |b| b.if_(Expr::lane_idx().eq(0i64), |b| b.store_scalar(alpha, t.clone(), a.clone())),
            |b| {
                // More (ties): rank every candidate (ties by slot); the one of rank k is alpha.
                store_rank_k(b, "cv", (buf, slot.clone(), Expr::warp_idx()), n, k, alpha, t);
            },
        );
    });
}

/// The tie fallback of the alpha kernels: each lane ranks the candidates `lane, lane + 32, ..` (< `n`) of shared
/// row `(slot, row)` of `buf` against all `n` (larger first, equal ones by position), and the one of rank `k` is
/// stored as `alpha[t]`. `name` names the candidate's variable in the emitted code.
fn store_rank_k(
    b: &mut KernelBuilder,
    name: &str,
    (buf, slot, row): (SharedId, Expr, Expr),
    n: &Expr,
    k: u32,
    alpha: TensorId,
    t: &Expr,
) {
    b.for_("i", Expr::lane_idx(), n.clone(), 32i64, |b, i| {
        let v = b.let_(name, Expr::shared_load(buf, slot.clone(), row.clone(), i.clone()));
        let rank = b.let_var("rank", 0i64);
        b.for_("j", 0i64, n.clone(), 1i64, |b, j| {
            let x = Expr::shared_load(buf, slot.clone(), row.clone(), j.clone());
            let before = x.gt(v.clone()).or(x.eq(v.clone()).and(j.lt(i.clone())));
            b.assign(rank, ival(rank) + Expr::select(before, 1i64, 0i64));
        });
        b.if_(ival(rank).eq(k as i64), |b| b.store_scalar(alpha, t.clone(), v.clone()));
    });
}

/// The `k`-th largest (from 0) of the 32 lanes' values in each of the rows `xs`, in every lane: a bitonic sort across the warp,
/// descending (at stage `size`, lanes with bit `size` clear sort their run descending, and the lower lane of a
/// pair keeps the larger value in a descending run), then a broadcast of lane `k`. Top level of a region; the rows' stages side by side (their
/// shuffle chains overlap).
fn warp_kth_largest_rows(b: &mut KernelBuilder, xs: Vec<Expr>, k: u32) -> Vec<Expr> {
    let mut xs = xs;
    let mut size = 2u32;
    while size <= 32 {
        let mut stride = size / 2;
        while stride >= 1 {
            let os: Vec<Expr> = xs.iter().map(|x| b.warp_shuffle("o", WarpOp::ShflXor(stride), x.clone())).collect();
            let lower = Expr::lane_idx().bitand(stride as i64).eq(0i64);
            let desc = if size == 32 { Expr::Bool(true) } else { Expr::lane_idx().bitand(size as i64).eq(0i64) };
            for (x, o) in xs.iter_mut().zip(os) {
                *x = b.let_(
                    "x",
                    Expr::select(lower.clone().eq(desc.clone()), x.clone().max(o.clone()), x.clone().min(o)),
                );
            }
            stride /= 2;
        }
        size *= 2;
    }
    xs.into_iter().map(|x| b.warp_shuffle("kth", WarpOp::ShflIdx(k), x)).collect()
}
