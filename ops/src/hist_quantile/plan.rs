//! The launch plans of [`crate::hist_quantile`]: which kernels a problem needs and in what order.

use super::*;

/// The kernels of one problem at one knob set.
pub struct KernelSet {
    pub alpha: Option<Kernel>,
    pub zero: Option<Kernel>,
    pub hist: Kernel,
    pub locate: Kernel,
    /// Two-pass: the zoomed histogram and its locate.
    pub zoom: Option<(Kernel, Kernel)>,
    pub es: u32,
}

impl KernelSet {
    /// Every kernel, in launch order (the zeroing kernel once).
    pub fn all(&self) -> Vec<Kernel> {
        let mut v: Vec<Kernel> = self.alpha.iter().chain(self.zero.iter()).cloned().collect();
        v.push(self.hist.clone());
        v.push(self.locate.clone());
        if let Some((h, l)) = &self.zoom {
            v.push(h.clone());
            v.push(l.clone());
        }
        v
    }
}

/// Build the kernels of a problem.
pub fn kernel_set(pb: &Problem, knobs: &Knobs) -> Result<KernelSet, OpError> {
    pb.validate()?;
    let c = cfg(knobs)?;
    let es = experts_per_block(pb.bins, pb.e, &c)?;
    let bins = pb.bins as u32;
    let (binned, negate, alpha) = match pb.kind {
        Kind::Qb { k } => {
            let spec = AlphaSpec::for_shape(pb.e, k);
            let a = if c.lean_alpha && k < 32 {
                build_alpha_lean(&spec, &c)?
            } else if c.ring_alpha && k < 32 {
                build_alpha_ring(&spec, &c, pb.e)?
            } else if c.warp_alpha && k < 32 {
                build_alpha_warp(&spec, &c)?
            } else {
                build_alpha(&spec, &c)?
            };
            (Binned::Margin, true, Some(a))
        }
        Kind::Column { .. } => (Binned::Plain, false, None),
    };
    let packed = c.packed_partials();
    let hs = HistSpec {
        bins,
        binned,
        zoom: false,
        es,
        atomic: c.atomic,
        banked: c.banked,
        fx: c.fx(pb.bins),
        packed,
        select: c.banked && c.bin_select,
    };
    let first = if pb.two_pass { LocatePass::First } else { LocatePass::Single };
    let lu = c.lu;
    let locate = build_locate(&LocateSpec { bins, pass: first, write_counts: !c.atomic, negate, packed, lu })?;
    let zoom = if pb.two_pass {
        let h = build_hist(&HistSpec { zoom: true, ..hs }, &c)?;
        let l =
            build_locate(&LocateSpec { bins, pass: LocatePass::Zoom, write_counts: !c.atomic, negate, packed, lu })?;
        Some((h, l))
    } else {
        None
    };
    Ok(KernelSet { alpha, zero: c.atomic.then(build_zero).transpose()?, hist: build_hist(&hs, &c)?, locate, zoom, es })
}

/// The host table of zoom edges: `edges[i]` = the reference's nominal edge `lo + i (hi - lo) / B` (f64)
/// rounded to f32, `i = 0..=B` (so a zoomed range is exactly the reference's `bin_edges(b)`).
pub fn edge_table(h: &Histogram) -> Vec<f32> {
    (0..=h.bins).map(|i| if i < h.bins { h.bin_edges(i).0 as f32 } else { h.bin_edges(h.bins - 1).1 as f32 }).collect()
}

fn target_scalars(target: f64) -> (i64, f32) {
    let tceil = target.ceil();
    (tceil as i64, (tceil - target) as f32)
}

/// The plan of a problem on given inputs (`s [T, E]` f32; `b [E]` f32 for QB), checked first
/// ([`check_inputs`] is the caller's: [`QbInstance`] runs it). Buffers: inputs `s`, `b`, (`edges`); outputs
/// `alpha` (QB), `counts`, (`counts2`), `bias` (QB) or `quantile`; scratch `partials`, `zoom`, `zbin`.
pub fn build_plan(pb: &Problem, s: &HostTensor, b: Option<&HostTensor>, knobs: &Knobs) -> Result<Plan, OpError> {
    let ks = kernel_set(pb, knobs)?;
    let c = cfg(knobs)?;
    let (t, e, nb) = (pb.t, pb.e, pb.bins + 2);
    let h = pb.geometry();
    let (lo, hi, scale) = (SymValue::Float(pb.lo), SymValue::Float(pb.hi), SymValue::Float(h.bin_scale_f32()));
    let (tceil, delta) = target_scalars(pb.target());
    let (p, ch) = pb.chunks(&c, ks.es);
    let mut plan = Plan::default();
    let s_i = plan.input("s", s.clone());
    let b_i = b.map(|b| plan.input("b", b.clone()));
    let edges_i =
        pb.two_pass.then(|| plan.input("edges", HostTensor::from_f32(DType::F32, &[pb.bins + 1], &edge_table(&h))));
    let alpha_i = ks.alpha.is_some().then(|| plan.output("alpha", DType::F32, &[t]));
    let counts_i = plan.output("counts", DType::U32, &[e, nb]);
    let counts2_i = pb.two_pass.then(|| plan.output("counts2", DType::U32, &[e, nb]));
    let out_name = if matches!(pb.kind, Kind::Qb { .. }) { "bias" } else { "quantile" };
    let out_i = plan.output(out_name, DType::F32, &[e]);
    let part_w = if c.packed_partials() { packed_width(pb.bins as u32) as usize } else { nb };
    let part_i = (!c.atomic).then(|| plan.scratch("partials", DType::U32, &[p * e, part_w]));
    let zoom_i =
        pb.two_pass.then(|| (plan.scratch("zoom", DType::F32, &[4, e]), plan.scratch("zbin", DType::I32, &[e])));

    if let (Some(k), Some(bi), Some(ai)) = (&ks.alpha, b_i, alpha_i) {
        plan.step(k.clone(), &[s_i, bi, ai], &[]);
    }
    let chs = ("CH", SymValue::Int(ch as i64));
    let ps = ("P", SymValue::Int(p as i64));
    let targets = [("tceil", SymValue::Int(tceil)), ("delta", SymValue::Float(delta))];
    // One histogram pass + its locate: `dst` receives the merged counts.
    let pass = |plan: &mut Plan, hist: &Kernel, loc: &Kernel, zoomed: bool, dst: usize, tail: &[usize]| {
        let mut args = vec![s_i];
        args.extend(alpha_i);
        if zoomed {
            args.push(zoom_i.unwrap().0);
        }
        let mut scal = vec![chs];
        if !zoomed {
            scal.extend([("lo", lo), ("hi", hi), ("scale", scale)]);
        }
        let src = match part_i {
            Some(pi) => pi,
            None => {
                plan.step(ks.zero.clone().unwrap(), &[dst], &[]);
                scal.push(ps);
                dst
            }
        };
        args.push(src);
        plan.step(hist.clone(), &args, &scal);
        let mut largs = vec![src];
        if part_i.is_some() {
            largs.push(dst);
        }
        largs.extend(tail);
        let mut lscal = targets.to_vec();
        if !zoomed {
            lscal.extend([("lo", lo), ("hi", hi)]);
        }
        plan.step(loc.clone(), &largs, &lscal);
    };
    match (&ks.zoom, zoom_i) {
        (Some((zh, zl)), Some((zi, zb))) => {
            pass(&mut plan, &ks.hist, &ks.locate, false, counts_i, &[edges_i.unwrap(), zi, zb]);
            pass(&mut plan, zh, zl, true, counts2_i.unwrap(), &[zi, zb, out_i]);
        }
        _ => pass(&mut plan, &ks.hist, &ks.locate, false, counts_i, &[out_i]),
    }
    Ok(plan)
}

/// A plan that locates the quantile of an already merged histogram (e.g. after an all-reduce of every rank's
/// `counts`): input `counts`, output `out [E]` (`-quantile` when `negate`, the QB bias).
pub fn locate_plan(h: &ExpertHistogram, target: f64, negate: bool) -> Result<Plan, OpError> {
    let k = build_locate(&LocateSpec {
        bins: h.bins as u32,
        pass: LocatePass::Single,
        write_counts: false,
        negate,
        packed: false,
        lu: 1,
    })?;
    let mut plan = Plan::default();
    let c = plan.input("counts", h.to_tensor()?);
    let o = plan.output("out", DType::F32, &[h.experts]);
    let (tceil, delta) = target_scalars(target);
    plan.step(
        k,
        &[c, o],
        &[
            ("tceil", SymValue::Int(tceil)),
            ("delta", SymValue::Float(delta)),
            ("lo", SymValue::Float(h.lo)),
            ("hi", SymValue::Float(h.hi)),
        ],
    );
    Ok(plan)
}
