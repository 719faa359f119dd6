//! Kernel 2 of [`crate::hist_quantile`]: the per-expert histograms (packed u16 counters per block).

use super::*;

/// What is binned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Binned {
    /// QB margins `f32(s[t, e] - alpha[t])`.
    Margin,
    /// The matrix values themselves.
    Plain,
}

/// What the histogram kernel's program depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HistSpec {
    /// Regular bins B.
    pub bins: u32,
    pub binned: Binned,
    /// Per-expert ranges from a `zoom [4, E]` tensor (second pass) instead of the `lo`/`hi`/`scale` arguments.
    pub zoom: bool,
    /// Experts per block.
    pub es: u32,
    /// Flush with global atomics into `counts` (else plain stores into `partials`).
    pub atomic: bool,
    /// Word-major shared histograms `[words, ES]` (the expert is the bank: a warp's 32 shared atomics hit 32
    /// banks) and, with partials, the packed u16 pairs flushed as they are (`partials [P E, W]`, rows padded to
    /// `W` = [`packed_width`] words so that runs of 8 words are whole 32-byte sectors).
    pub banked: bool,
    /// Banked flush: experts per warp store (runs of `32 / fx` consecutive words of each).
    pub fx: u32,
    /// Banked partials flushed as the packed u16 pairs (else one u32 per slot, `[P E, B+2]`).
    pub packed: bool,
    /// Banked: the branch-free bin rule `slot_select` (else `slot_expr_lean`).
    pub select: bool,
}

/// Row width in u32 words of packed partials: the words of a histogram rounded up to 8 (32 bytes).
pub fn packed_width(bins: u32) -> u32 {
    words(bins).next_multiple_of(8)
}

/// Experts per histogram block: the largest power of two (at most 64, at most the threads, at most E rounded
/// up to a power of two) whose packed histograms fit the `HKB` budget; an error when one does not fit.
pub fn experts_per_block(bins: usize, e: usize, c: &Cfg) -> Result<u32, OpError> {
    let per = words(bins as u32) as usize * 4;
    let budget = c.hkb as usize * 1024;
    if per > budget {
        return Err(OpError::InvalidKnobs {
            op: "hist_quantile",
            knobs: format!("HKB={}", c.hkb),
            why: format!("one expert's {bins}-bin histogram ({per} bytes) exceeds the {budget}-byte budget"),
        });
    }
    let mut es = 1u32;
    while es < 64 && (es as usize * 2) * per <= budget && es * 2 <= c.ht && (es as usize) < e.next_power_of_two() {
        es *= 2;
    }
    Ok(es)
}

/// The f32 slot of value `x` (the reference's `Histogram::slot`, bit for bit).
fn slot_expr(x: &Expr, lo: &Expr, hi: &Expr, scale: &Expr, bins: u32) -> Expr {
    let f = ((x - lo.clone()) * scale.clone()).floor().max(0.0f64).min((bins - 1) as f64);
    // f is an integral float in [0, B-1] (< 2^23): adding 2^23 puts it in the low mantissa bits, exactly, without
    // a float -> 64-bit int conversion; 0x4B000000 + 1 is 2^23's bits minus the slot offset.
    let bin_plus_1 = (f + 8_388_608.0f64).bits() - (0x4B00_0000i64 - 1);
    Expr::select(x.lt(lo.clone()), 0i64, Expr::select(x.ge(hi.clone()), (bins + 1) as i64, bin_plus_1))
}

/// [`slot_expr`] with one operation less (the banked pass): where `x >= lo` is selected, `x - lo` is `>= +0`
/// (a rounded non-negative difference) and so is its product with the finite positive scale, whose floor needs
/// no clamp at 0. Bit for bit the same slot.
fn slot_expr_lean(x: &Expr, lo: &Expr, hi: &Expr, scale: &Expr, bins: u32) -> Expr {
    let f = ((x - lo.clone()) * scale.clone()).floor().min((bins - 1) as f64);
    let bin_plus_1 = (f + 8_388_608.0f64).bits() - (0x4B00_0000i64 - 1);
    Expr::select(x.lt(lo.clone()), 0i64, Expr::select(x.ge(hi.clone()), (bins + 1) as i64, bin_plus_1))
}

/// [`slot_expr_lean`] without a branch: ptxas compiles the nested selects of a slot whose arithmetic sits inside
/// them into a branch around that arithmetic per element (`BSSY`/`BRA`/`BSYNC`, the scale reloaded from the
/// constant bank, and divergence where lanes' values fall outside `[lo, hi)`). Here the arithmetic is a
/// statement of its own, computed for every value, and the two range tests select among three floats whose
/// bits are the slot plus 2^23: `2^23` (slot 0, `x < lo`), `2^23 + B + 1` (`x >= hi`), and
/// `min(floor((x - lo) scale), B - 1) + 2^23 + 1` (exact: a small integral float plus 2^23 + 1). Bit for bit
/// the reference's slot wherever it is selected; where it is not (values outside the range, infinite plain
/// values) the unselected float is never read.
fn slot_select(b: &mut KernelBuilder, x: &Expr, lo: &Expr, hi: &Expr, scale: &Expr, bins: u32) -> Expr {
    let f = ((x - lo.clone()) * scale.clone()).floor().min((bins - 1) as f64) + 8_388_609.0f64;
    let f = b.let_("f", f);
    let r =
        Expr::select(x.lt(lo.clone()), 8_388_608.0f64, Expr::select(x.ge(hi.clone()), (8_388_609 + bins) as f64, f));
    r.bits() - 0x4B00_0000i64
}

/// The histogram kernel's name: bins, what is binned, zoom, ES, the merge, HT, HU and the banked variants.
fn hist_name(spec: &HistSpec, c: &Cfg) -> String {
    let (bins, es, nt, hu) = (spec.bins, spec.es, c.ht, c.hu);
    format!(
        "k3k_hq_hist_b{bins}_{}{}_es{es}_{}_ht{nt}_hu{hu}{}",
        match spec.binned {
            Binned::Margin => "margin",
            Binned::Plain => "plain",
        },
        if spec.zoom { "_zoom" } else { "" },
        if spec.atomic { "atomic" } else { "partials" },
        if !spec.banked {
            String::new()
        } else if spec.fx == 32 {
            "_bk".into()
        } else {
            format!("_bk_fx{}", spec.fx)
        }
    ) + if spec.banked && !spec.atomic && !spec.packed { "_wide" } else { "" }
        + if spec.select { "_sel" } else { "" }
}

/// The histogram kernel's knob record.
fn hist_knobs(spec: &HistSpec, c: &Cfg) -> Knobs {
    let nt = c.ht;
    let hu = c.hu;
    let mut kn = Knobs::new()
        .with("HT", nt as i64)
        .with("HU", hu as i64)
        .with("HKB", c.hkb as i64)
        .with("MERGE", if spec.atomic { "atomic" } else { "partials" })
        .with("HLAYOUT", if spec.banked { "banks" } else { "rows" });
    if spec.banked {
        kn = kn.with("HFX", spec.fx as i64);
        if !spec.atomic {
            kn = kn.with("PPACK", if spec.packed { "packed" } else { "wide" });
        }
        if spec.select {
            kn = kn.with("HBIN", "select");
        }
    }
    kn
}

/// The flush of the block's packed histograms `hist` to `out` (`partials`, or `counts` by global atomics).
fn flush_hist(b: &mut KernelBuilder, spec: &HistSpec, nt: u32, hist: SharedId, out: TensorId, e_dim: &Expr) {
    let (bins, es) = (spec.bins, spec.es);
    let nb = bins + 2;
    let wpe = words(bins);
    let banked = spec.banked;
    let at_hist = move |ex: Expr, wd: Expr| -> (Expr, Expr) { if banked { (wd, ex) } else { (ex, wd) } };
    let total_words = (es * wpe) as i64;
    // Banked: a warp takes `fx` experts x `32 / fx` consecutive words (tiles of the `[words, ES]` histogram;
    // (32 / fx)-way bank conflicts, runs of 32 / fx words per expert in the stores).
    let fx = spec.fx.min(es);
    let run = 32 / fx;
    let (tiles_r, tiles_w) = (es / fx, wpe.div_ceil(run));
    let flush_total = if banked { (tiles_r * tiles_w * 32) as i64 } else { total_words };
    let pw = packed_width(bins);
    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), flush_total, nt as i64, |b, i| {
            let (r, wd) = if banked {
                let (l, q) = (&i % 32i64, &i / 32i64);
                (
                    b.let_("r", (&q % tiles_r as i64) * fx as i64 + &l / run as i64),
                    b.let_("wd", (&q / tiles_r as i64) * run as i64 + &l % run as i64),
                )
            } else {
                (b.let_("r", &i / wpe as i64), b.let_("wd", &i % wpe as i64))
            };
            let e = b.let_("e", Expr::block_idx(0) * es as i64 + r.clone());
            b.if_(e.lt(e_dim.clone()).and(wd.lt(wpe as i64)), |b| {
                let (hr, hc) = at_hist(r.clone(), wd.clone());
                let v = b.let_("v", Expr::shared_load(hist, 0i64, hr, hc));
                if banked && !spec.atomic && spec.packed {
                    // The packed pair as it is (a chunk's count is <= 65535): half the bytes to write and merge.
                    let at = (Expr::block_idx(1) * e_dim.clone() + e.clone()) * pw as i64 + wd.clone();
                    b.store_scalar(out, at, v.clone());
                    return;
                }
                let s0 = b.let_("s0", &wd * 2i64);
                let lo16 = v.bitand(0xffffi64);
                let hi16 = v.shr(16i64);
                if spec.atomic {
                    let at = b.let_("at", &e * nb as i64 + s0.clone());
                    b.if_(lo16.ne(0i64), |b| b.atomic_add_global(out, at.clone(), lo16.clone()));
                    b.if_((&s0 + 1i64).lt(nb as i64).and(hi16.ne(0i64)), |b| {
                        b.atomic_add_global(out, &at + 1i64, hi16.clone())
                    });
                } else {
                    let at = b.let_("at", (Expr::block_idx(1) * e_dim.clone() + e.clone()) * nb as i64 + s0.clone());
                    b.store_scalar(out, at.clone(), lo16);
                    b.if_((&s0 + 1i64).lt(nb as i64), |b| b.store_scalar(out, &at + 1i64, hi16.clone()));
                }
            });
        });
    });
}

/// Build a histogram kernel. Arguments: `s [T, E]`, (`alpha [T]`), (`zoom [4, E]`), then `partials [P E, B+2]`
/// (or `counts [E, B+2]` and the int argument `P` with `MERGE=atomic`); scalars `CH` (tokens per chunk) and,
/// without zoom, `lo`, `hi`, `scale`. Grid `(ceil(E / ES), P)`.
pub fn build_hist(spec: &HistSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let (bins, es, nt, hu) = (spec.bins, spec.es, c.ht, c.hu);
    let nb = bins + 2;
    let wpe = words(bins);
    let rp = nt / es;
    let name = hist_name(spec, c);
    let mut b = KernelBuilder::new(&name, nt);
    b.knobs(hist_knobs(spec, c));
    let t_dim = b.dim("T");
    let e_dim = b.dim("E");
    let s = b.tensor("s", DType::F32, &[t_dim.clone(), e_dim.clone()], Access::Read);
    let alpha = (spec.binned == Binned::Margin)
        .then(|| b.tensor("alpha", DType::F32, std::slice::from_ref(&t_dim), Access::Read));
    let zoom = spec.zoom.then(|| b.tensor("zoom", DType::F32, &[Expr::Int(4), e_dim.clone()], Access::Read));
    let (out, p_dim) = if spec.atomic {
        let o = b.tensor("counts", DType::U32, &[e_dim.clone(), Expr::Int(nb as i64)], Access::ReadWrite);
        (o, b.int_arg("P"))
    } else {
        let r = b.dim("R");
        let width = if spec.banked && spec.packed { packed_width(bins) } else { nb };
        let o = b.tensor("partials", DType::U32, &[r.clone(), Expr::Int(width as i64)], Access::Write);
        (o, r / e_dim.clone())
    };
    let ch = b.int_arg("CH");
    let geom = (!spec.zoom).then(|| (b.float_arg("lo"), b.float_arg("hi"), b.float_arg("scale")));
    b.grid(e_dim.ceil_div(es as i64), p_dim, 1i64);
    // Element (expert, word) of the block's packed histograms: `rows` layout `[ES, words]`, `banks` `[words, ES]`.
    let hist = if spec.banked {
        b.shared("hist", DType::U32, wpe, es, 1, Swizzle::None)
    } else {
        b.shared("hist", DType::U32, es, wpe, 1, Swizzle::None)
    };
    let banked = spec.banked;
    let at_hist = move |ex: Expr, wd: Expr| -> (Expr, Expr) { if banked { (wd, ex) } else { (ex, wd) } };
    let total_words = (es * wpe) as i64;

    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), total_words, nt as i64, |b, i| {
            if banked {
                b.shared_store(hist, 0i64, &i / es as i64, &i % es as i64, 0i64);
            } else {
                b.shared_store(hist, 0i64, &i / wpe as i64, &i % wpe as i64, 0i64);
            }
        });
    });
    b.barrier();
    b.threads(|b| {
        let col = b.let_("col", Expr::thread_idx() % es as i64);
        let row = b.let_("row", Expr::thread_idx() / es as i64);
        let e = b.let_("e", Expr::block_idx(0) * es as i64 + col.clone());
        b.if_(e.lt(e_dim.clone()), |b| {
            let (lo, hi, scale) = match (&geom, zoom) {
                (Some((lo, hi, sc)), _) => (lo.clone(), hi.clone(), sc.clone()),
                (None, Some(z)) => (
                    b.let_("lo", Expr::load(z, e.clone())),
                    b.let_("hi", Expr::load(z, e_dim.clone() + e.clone())),
                    b.let_("scale", Expr::load(z, e_dim.clone() * 2i64 + e.clone())),
                ),
                (None, None) => unreachable!(),
            };
            let rpe = b.let_("rpe", e_dim.clone() * rp as i64);
            let t0 = b.let_("t0", Expr::block_idx(1) * ch.clone());
            let t1 = b.let_("t1", (&t0 + ch.clone()).min(t_dim.clone()));
            let value = |t: &Expr, at: Expr| -> Expr {
                let v = Expr::load(s, at);
                match alpha {
                    Some(a) => v - Expr::load(a, t.clone()),
                    None => v,
                }
            };
            let count = |b: &mut KernelBuilder, x: Expr| {
                let sl = if spec.select {
                    let e = slot_select(b, &x, &lo, &hi, &scale, bins);
                    b.let_("slot", e)
                } else {
                    let slot = if banked { slot_expr_lean } else { slot_expr };
                    b.let_("slot", slot(&x, &lo, &hi, &scale, bins))
                };
                // The u16 half of the slot: 1 or 1 << 16.
                let inc =
                    if banked { sl.bitand(1i64) * 65535i64 + 1i64 } else { Expr::Int(1).shl(sl.bitand(1i64) * 16i64) };
                let (r, c) = at_hist(col.clone(), sl.shr(1i64));
                b.atomic_add_shared(hist, 0i64, r, c, inc);
            };
            if banked {
                // Groups of HU rows all inside the chunk, without per-row checks; then the rest one by one.
                let st = b.let_("st", &t0 + row.clone());
                let lim = b.let_("lim", &t1 - ((hu - 1) * rp) as i64);
                let g = (rp * hu) as i64;
                let nfull = b.let_("nfull", Expr::select(lim.gt(st.clone()), (&lim - st.clone() + (g - 1)) / g, 0i64));
                b.for_("t", st.clone(), lim.clone(), g, |b, t| {
                    let at0 = b.let_("at0", &t * e_dim.clone() + e.clone());
                    let xs: Vec<Expr> = (0..hu)
                        .map(|u| {
                            let tt = &t + (u * rp) as i64;
                            b.let_(&format!("x{u}"), value(&tt, &at0 + rpe.clone() * u as i64))
                        })
                        .collect();
                    for x in xs {
                        count(b, x);
                    }
                });
                b.for_("t", &st + nfull * g, t1.clone(), rp as i64, |b, t| {
                    let x = b.let_("x", value(&t, &t * e_dim.clone() + e.clone()));
                    count(b, x);
                });
            } else {
                b.for_("t", &t0 + row.clone(), t1.clone(), (rp * hu) as i64, |b, t| {
                    // Loads first (HU rows in flight), then the bins and shared atomics.
                    let xs: Vec<VarId> = (0..hu).map(|u| b.let_var(&format!("x{u}"), 0.0f64)).collect();
                    let tts: Vec<Expr> = (0..hu).map(|u| b.let_(&format!("tt{u}"), &t + (u * rp) as i64)).collect();
                    let at0 = b.let_("at0", &t * e_dim.clone() + e.clone());
                    for (u, (x, tt)) in xs.iter().zip(&tts).enumerate() {
                        b.if_(tt.lt(t1.clone()), |b| {
                            b.assign(*x, value(tt, &at0 + rpe.clone() * u as i64));
                        });
                    }
                    for (x, tt) in xs.iter().zip(&tts) {
                        b.if_(tt.lt(t1.clone()), |b| count(b, ival(*x)));
                    }
                });
            }
        });
    });
    b.barrier();
    flush_hist(&mut b, spec, nt, hist, out, &e_dim);
    Ok(b.finish()?)
}

/// A kernel setting a u32 `[N]` tensor to zero (before atomic flushes).
pub fn build_zero() -> Result<Kernel, OpError> {
    let mut b = KernelBuilder::new("k3k_hq_zero_u32", 256);
    let rows = b.dim("R");
    let cols = b.dim("C");
    let x = b.tensor("x", DType::U32, &[rows.clone(), cols.clone()], Access::Write);
    let n = rows * cols;
    b.grid(n.ceil_div(1024i64), 1i64, 1i64);
    b.threads(|b| {
        for u in 0..4i64 {
            let i = b.let_("i", Expr::block_idx(0) * 1024i64 + Expr::thread_idx() + u * 256);
            b.if_(i.lt(n.clone()), |b| b.store_scalar(x, i.clone(), 0i64));
        }
    });
    Ok(b.finish()?)
}
