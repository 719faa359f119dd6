//! Kernel 3 of [`crate::hist_quantile`]: locating the quantiles in the merged histograms.

use super::*;

/// Which locate launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LocatePass {
    /// The only pass: writes the result.
    Single,
    /// First of two: writes the one-pass value and the zoom ranges.
    First,
    /// The zoomed second pass: writes the result.
    Zoom,
}

/// What the locate kernel's program depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocateSpec {
    pub bins: u32,
    pub pass: LocatePass,
    /// Sum `src [P, E, B+2]` into a `counts [E, B+2]` output (else `src` already is the merged histogram).
    pub write_counts: bool,
    /// Write `-quantile` (the QB bias).
    pub negate: bool,
    /// `src` holds packed u16 pairs, `[P E, words]` (the banked histogram's partials).
    pub packed: bool,
    /// Partials summed per batch of independent loads (`LU`; 1: one load per iteration).
    pub lu: u32,
}

/// Threads of a locate block for `nb` slots.
fn locate_threads(nb: u32) -> u32 {
    nb.div_ceil(8).next_power_of_two().clamp(32, 256)
}

/// Phase 1 of the locate kernel: sum the `P` partials of `src` (packed u16 pairs or one u32 per slot) into the
/// shared `cnt` row, and into `counts` when it is written.
#[allow(clippy::too_many_arguments)]
fn merge_partials(
    b: &mut KernelBuilder,
    spec: &LocateSpec,
    lu: u32,
    nt: u32,
    src: TensorId,
    counts: Option<TensorId>,
    cnt: SharedId,
    e_dim: &Expr,
    p_dim: &Expr,
) {
    let bins = spec.bins;
    let nb = bins + 2;
    let wpe = words(bins);
    let pw = packed_width(bins);
    if spec.packed {
        // The unpacked read's shape on half the words: each thread sums its words over the P partials (one load
        // per partial, the loop bound the only condition), then unpacks the two u16 halves (the low half is the
        // even slot).
        b.threads(|b| {
            let e = Expr::block_idx(0);
            let np = b.let_("np", p_dim.clone());
            b.for_("wd", Expr::thread_idx(), wpe as i64, nt as i64, |b, wd| {
                let lo = b.let_var("lo", 0i64);
                let hi = b.let_var("hi", 0i64);
                if lu > 1 {
                    // `LU` partials per iteration: independent loads (indices clamped to the last partial,
                    // values past it dropped), then their sums.
                    let at0 = b.let_("at0", &e * pw as i64 + wd.clone());
                    let pst = b.let_("pst", e_dim.clone() * pw as i64);
                    b.for_("p", 0i64, np.clone(), lu as i64, |b, p| {
                        let vs: Vec<Expr> = (0..lu as i64)
                            .map(|u| {
                                let pu = (&p + u).min(&np - 1i64);
                                let v = Expr::load(src, &at0 + pu * pst.clone());
                                b.let_("v", Expr::select((&p + u).lt(np.clone()), v, 0i64))
                            })
                            .collect();
                        let los = tree(vs.iter().map(|v| v.bitand(0xffffi64)).collect(), &|x, y| x + y);
                        let his = tree(vs.iter().map(|v| v.shr(16i64)).collect(), &|x, y| x + y);
                        b.assign(lo, ival(lo) + los);
                        b.assign(hi, ival(hi) + his);
                    });
                } else {
                    let at = b.let_var("at", &e * pw as i64 + wd.clone());
                    b.for_("p", 0i64, np.clone(), 1i64, |b, _p| {
                        let v = b.let_("v", Expr::load(src, ival(at)));
                        b.assign(lo, ival(lo) + v.bitand(0xffffi64));
                        b.assign(hi, ival(hi) + v.shr(16i64));
                        b.assign(at, ival(at) + e_dim.clone() * pw as i64);
                    });
                }
                for (half, v) in [(0i64, lo), (1, hi)] {
                    let sl = &wd * 2i64 + half;
                    b.if_(sl.lt(nb as i64), |b| {
                        if let Some(cn) = counts {
                            b.store_scalar(cn, &e * nb as i64 + sl.clone(), ival(v));
                        }
                        b.shared_store(cnt, 0i64, 0i64, sl.clone(), ival(v));
                    });
                }
            });
        });
    } else {
        b.threads(|b| {
            let e = Expr::block_idx(0);
            b.for_("sl", Expr::thread_idx(), nb as i64, nt as i64, |b, sl| {
                let tot = b.let_var("tot", 0i64);
                if lu > 1 {
                    let np = b.let_("np", p_dim.clone());
                    b.for_("p", 0i64, np.clone(), lu as i64, |b, p| {
                        let vs: Vec<Expr> = (0..lu as i64)
                            .map(|u| {
                                let pu = (&p + u).min(&np - 1i64);
                                let at = (pu * e_dim.clone() + e.clone()) * nb as i64 + sl.clone();
                                b.let_("v", Expr::select((&p + u).lt(np.clone()), Expr::load(src, at), 0i64))
                            })
                            .collect();
                        b.assign(tot, ival(tot) + tree(vs, &|x, y| x + y));
                    });
                } else {
                    b.for_("p", 0i64, p_dim.clone(), 1i64, |b, p| {
                        let at = (p * e_dim.clone() + e.clone()) * nb as i64 + sl.clone();
                        b.assign(tot, ival(tot) + Expr::load(src, at));
                    });
                }
                if let Some(cn) = counts {
                    b.store_scalar(cn, &e * nb as i64 + sl.clone(), ival(tot));
                }
                b.shared_store(cnt, 0i64, 0i64, sl.clone(), ival(tot));
            });
        });
    }
}

/// Build a locate kernel, one block per expert. Arguments: `src [P E, B+2]` u32 (P stacked histograms), (`counts [E, B+2]`),
/// then per pass: Single `out [E]`; First `edges [B+1]`, `zoom [4, E]`, `zbin [E]` (written); Zoom `zoom`,
/// `zbin` (read), `out [E]`. Scalars: `tceil` = ceil(target), `delta` = tceil - target (f32), and `lo`, `hi`
/// (not for Zoom).
pub fn build_locate(spec: &LocateSpec) -> Result<Kernel, OpError> {
    // Only a merge of several partials reads `src` in a loop.
    let (bins, lu) = (spec.bins, if spec.write_counts { spec.lu.max(1) } else { 1 });
    let nb = bins + 2;
    let nt = locate_threads(nb);
    let bpt = nb.div_ceil(nt);
    let name = format!(
        "k3k_hq_locate_b{bins}_{}{}{}",
        match spec.pass {
            LocatePass::Single => "single",
            LocatePass::First => "first",
            LocatePass::Zoom => "zoom",
        },
        if spec.write_counts { "_counts" } else { "" },
        if spec.negate { "_neg" } else { "" },
    ) + if spec.packed { "_packed" } else { "" }
        + &if lu > 1 { format!("_lu{lu}") } else { String::new() };
    let mut b = KernelBuilder::new(&name, nt);
    let r_dim = b.dim("R");
    let e_dim = b.dim("E");
    let nbx = Expr::Int(nb as i64);
    let pw = packed_width(bins);
    let src_w = Expr::Int(if spec.packed { pw } else { nb } as i64);
    let src = b.tensor("src", DType::U32, &[r_dim.clone(), src_w], Access::Read);
    let p_dim = r_dim / e_dim.clone();
    let counts =
        spec.write_counts.then(|| b.tensor("counts", DType::U32, &[e_dim.clone(), nbx.clone()], Access::Write));
    let (edges, zoom, zbin, out) = match spec.pass {
        LocatePass::Single => {
            (None, None, None, Some(b.tensor("out", DType::F32, std::slice::from_ref(&e_dim), Access::Write)))
        }
        LocatePass::First => (
            Some(b.tensor("edges", DType::F32, &[Expr::Int(bins as i64 + 1)], Access::Read)),
            Some(b.tensor("zoom", DType::F32, &[Expr::Int(4), e_dim.clone()], Access::Write)),
            Some(b.tensor("zbin", DType::I32, std::slice::from_ref(&e_dim), Access::Write)),
            None,
        ),
        LocatePass::Zoom => (
            None,
            Some(b.tensor("zoom", DType::F32, &[Expr::Int(4), e_dim.clone()], Access::Read)),
            Some(b.tensor("zbin", DType::I32, std::slice::from_ref(&e_dim), Access::Read)),
            Some(b.tensor("out", DType::F32, std::slice::from_ref(&e_dim), Access::Write)),
        ),
    };
    let tceil = b.int_arg("tceil");
    let delta = b.float_arg("delta");
    let geom = (spec.pass != LocatePass::Zoom).then(|| (b.float_arg("lo"), b.float_arg("hi")));
    b.grid(e_dim.clone(), 1i64, 1i64);
    let cnt = b.shared("cnt", DType::U32, 1, nb, 1, Swizzle::None);
    let seg = b.shared("seg", DType::U32, 1, nt, 1, Swizzle::None);

    // 1: merge the partials.
    merge_partials(&mut b, spec, lu, nt, src, counts, cnt, &e_dim, &p_dim);
    b.barrier();
    // 2: segment sums.
    b.threads(|b| {
        let lo_s = b.let_("lo_s", Expr::thread_idx() * bpt as i64);
        let hi_s = b.let_("hi_s", (&lo_s + bpt as i64).min(nb as i64));
        let sum = b.let_var("sum", 0i64);
        b.for_("sl", lo_s, hi_s, 1i64, |b, sl| {
            b.assign(sum, ival(sum) + Expr::shared_load(cnt, 0i64, 0i64, sl));
        });
        b.shared_store(seg, 0i64, 0i64, Expr::thread_idx(), ival(sum));
    });
    b.barrier();
    // 3: the thread whose segment holds the target writes the result.
    b.threads(|b| {
        let e = Expr::block_idx(0);
        let (lo_g, hi_g) = match (&geom, zoom) {
            (Some((lo, hi)), _) => (lo.clone(), hi.clone()),
            (None, Some(z)) => {
                (b.let_("lo_g", Expr::load(z, e.clone())), b.let_("hi_g", Expr::load(z, &e_dim + e.clone())))
            }
            (None, None) => unreachable!(),
        };
        let above = b.let_var("above", 0i64);
        if spec.packed {
            // Four segments per iteration (independent loads).
            b.for_("j", Expr::thread_idx() + 1i64, nt as i64, 4i64, |b, j| {
                for u in 0..4i64 {
                    let ju = &j + u;
                    let v = Expr::select(
                        ju.lt(nt as i64),
                        Expr::shared_load(seg, 0i64, 0i64, ju.clone().min((nt - 1) as i64)),
                        0i64,
                    );
                    b.assign(above, ival(above) + v);
                }
            });
        } else {
            b.for_("j", Expr::thread_idx() + 1i64, nt as i64, 1i64, |b, j| {
                b.assign(above, ival(above) + Expr::shared_load(seg, 0i64, 0i64, j));
            });
        }
        // Writes the result for slot `sl` with `ab` values above it and `c` in it.
        let emit = |b: &mut KernelBuilder, sl: Expr, ab: Expr, c: Expr| {
            let frac = ((tceil.clone() - ab).to_float() - delta.clone()) / c.to_float();
            let w = (&hi_g - lo_g.clone()) / bins as f64;
            let interp = &lo_g + (sl.to_float() - frac) * w;
            let q = Expr::select(sl.eq((nb - 1) as i64), hi_g.clone(), Expr::select(sl.eq(0i64), lo_g.clone(), interp));
            let q = b.let_("q", q);
            let zb = Expr::select(sl.ge(1i64).and(sl.le(bins as i64)), &sl - 1i64, -1i64);
            match spec.pass {
                LocatePass::Single => {
                    let v = if spec.negate { -q } else { q };
                    b.store_scalar(out.unwrap(), e.clone(), v);
                }
                LocatePass::First => {
                    let (z, zbn, ed) = (zoom.unwrap(), zbin.unwrap(), edges.unwrap());
                    let zb = b.let_("zb", zb);
                    b.store_scalar(zbn, e.clone(), zb.clone());
                    b.store_scalar(z, &e_dim * 3i64 + e.clone(), q);
                    b.if_else(
                        zb.ge(0i64),
                        |b| {
                            let l2 = b.let_("l2", Expr::load(ed, zb.clone()));
                            let h2 = b.let_("h2", Expr::load(ed, &zb + 1i64));
                            b.store_scalar(z, e.clone(), l2.clone());
                            b.store_scalar(z, &e_dim + e.clone(), h2.clone());
                            b.store_scalar(z, &e_dim * 2i64 + e.clone(), Expr::Float(bins as f64) / (h2 - l2));
                        },
                        |b| {
                            let (lo, hi) = geom.clone().unwrap();
                            b.store_scalar(z, e.clone(), lo.clone());
                            b.store_scalar(z, &e_dim + e.clone(), hi.clone());
                            b.store_scalar(z, &e_dim * 2i64 + e.clone(), Expr::Float(bins as f64) / (hi - lo));
                        },
                    );
                }
                LocatePass::Zoom => {
                    let first = Expr::load(zoom.unwrap(), &e_dim * 3i64 + e.clone());
                    let v = Expr::select(Expr::load(zbin.unwrap(), e.clone()).ge(0i64), q, first);
                    let v = if spec.negate { -v } else { v };
                    b.store_scalar(out.unwrap(), e.clone(), v);
                }
            }
        };
        let lo_s = b.let_("lo_s", Expr::thread_idx() * bpt as i64);
        let hi_s = b.let_("hi_s", (&lo_s + bpt as i64).min(nb as i64));
        let found = b.let_var("found", -1i64);
        let f_above = b.let_var("f_above", 0i64);
        let f_count = b.let_var("f_count", 1i64);
        b.for_("jj", 0i64, (&hi_s - lo_s.clone()).max(0i64), 1i64, |b, jj| {
            let sl = b.let_("sl", &hi_s - 1i64 - jj);
            let c = b.let_("c", Expr::shared_load(cnt, 0i64, 0i64, sl.clone()));
            b.if_(ival(above).lt(tceil.clone()).and(tceil.le(ival(above) + c.clone())), |b| {
                b.assign(found, sl.clone());
                b.assign(f_above, ival(above));
                b.assign(f_count, c.clone());
            });
            b.assign(above, ival(above) + c);
        });
        // No slot holds the target: at or below zero (overflow value hi) or past every value (underflow, lo).
        b.if_(Expr::thread_idx().eq(0i64), |b| {
            b.if_(tceil.le(0i64), |b| b.assign(found, (nb - 1) as i64));
            b.if_(tceil.gt(ival(above)), |b| b.assign(found, 0i64));
        });
        b.if_(ival(found).ge(0i64), |b| emit(b, ival(found), ival(f_above), ival(f_count)));
    });
    Ok(b.finish()?)
}
