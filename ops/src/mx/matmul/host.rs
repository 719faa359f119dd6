//! The host API of `mxfp4_matmul` with typed errors: weights, inputs, the shape checks and the launch plan.

use super::*;

/// MXFP4 weights of `groups` experts, each `[n, k]`: element bytes (natural `[G, N, K/2]` or packed
/// `[G, N, K/8]` words) and scale bytes `[G, N, K/32]`.
#[derive(Clone, Debug)]
pub struct Fp4Weights {
    pub groups: usize,
    pub n: usize,
    pub k: usize,
    pub q: WeightBytes,
    pub s: Vec<u8>,
}

/// The element storage of [`Fp4Weights`].
#[derive(Clone, Debug)]
pub enum WeightBytes {
    /// The natural layout (SEMANTICS.md section 1.3): `[G, N, K/2]` bytes, element 2i in the low nibble.
    Natural(Vec<u8>),
    /// The [`super::pack`] layout: `[G, N, K/8]` u32 words.
    Packed(Vec<u32>),
    /// The packed words stored tile-major ([`super::pack::tile`]; the weights' scales `s` then are tile-major too,
    /// [`super::pack::tile_scales`]): each 16-row block's 128-column quad contiguous. For decode (at most 8 tokens
    /// per group) on PATH=gemv's shared-memory ring; needs N a multiple of 32 and K a multiple of 128.
    PackedTiles(Vec<u32>),
}

impl Fp4Weights {
    /// Check K and the buffer sizes (typed errors naming the argument and the expected shape).
    pub fn validate(&self) -> Result<(), OpError> {
        check_k(OP, "K", self.k)?;
        let (g, n, k) = (self.groups, self.n, self.k);
        if g == 0 || n == 0 {
            return Err(OpError::BadInput {
                op: OP,
                arg: "w".into(),
                why: format!("G = {g} and N = {n} must be positive"),
            });
        }
        match &self.q {
            WeightBytes::Natural(q) => check_bytes(OP, "wq", q.len(), "[G, N, K/2]", &[g, n, k / 2])?,
            WeightBytes::Packed(q) => {
                check_bytes(OP, "wq (packed words)", q.len() * 4, "[G, N, K/8] u32", &[g, n, k / 2])?
            }
            WeightBytes::PackedTiles(q) => {
                if !n.is_multiple_of(32) || !k.is_multiple_of(128) {
                    return Err(OpError::BadInput {
                        op: OP,
                        arg: "wq (tile-major words)".into(),
                        why: format!(
                            "the tile-major layout needs N a multiple of 32 and K of 128, got N = {n}, K = {k}"
                        ),
                    });
                }
                check_bytes(OP, "wq (tile-major words)", q.len() * 4, "[G, N, K/8] u32", &[g, n, k / 2])?
            }
        }
        check_bytes(OP, "ws", self.s.len(), "[G, N, K/32]", &[g, n, k / BLOCK])
    }
    /// Group g's weights as a reference MX tensor (natural layout).
    pub fn group_tensor(&self, g: usize) -> Result<rmx::MxTensor, OpError> {
        let (n, k) = (self.n, self.k);
        let q = match &self.q {
            WeightBytes::Natural(q) => q[g * n * k / 2..(g + 1) * n * k / 2].to_vec(),
            WeightBytes::Packed(w) => super::pack::unpack(&w[g * n * k / 8..(g + 1) * n * k / 8], n, k)?,
            WeightBytes::PackedTiles(w) => {
                let words = super::pack::untile(&w[g * n * k / 8..(g + 1) * n * k / 8], n, k)?;
                super::pack::unpack(&words, n, k)?
            }
        };
        let s = self.s[g * n * k / BLOCK..(g + 1) * n * k / BLOCK].to_vec();
        let s = if matches!(self.q, WeightBytes::PackedTiles(_)) { super::pack::untile_scales(&s, n, k)? } else { s };
        Ok(rmx::MxTensor { rows: n, k, q, s, format: MxFormat::Fp4 })
    }
}

/// The activations of a product.
#[derive(Clone, Copy, Debug)]
pub enum Act<'a> {
    /// `[M, K]` bf16.
    Bf16(&'a HostTensor),
    /// `[M, K]` MXFP8: E4M3 bytes and E8M0 scales along K.
    Mxfp8(&'a rmx::MxTensor),
}

impl Act<'_> {
    /// Rows and columns.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Act::Bf16(x) => (x.shape.first().copied().unwrap_or(0), x.shape.get(1).copied().unwrap_or(0)),
            Act::Mxfp8(t) => (t.rows, t.k),
        }
    }
}

/// Everything a product needs besides the weights.
#[derive(Clone, Debug)]
pub struct MatInputs<'a> {
    pub x: Act<'a>,
    /// Grouped: `[G]` inclusive cumulative group ends (SEMANTICS.md section 2.1), the last equal to M. `None`: dense (G = 1).
    pub offs: Option<&'a [i32]>,
    /// Routing weight per row.
    pub p: Option<&'a [f32]>,
    pub epilogue: Epilogue,
}

/// Validate a problem and give its variant (without knobs). Typed errors: K not a multiple of 32, wrong
/// weight or scale sizes, x of the wrong dtype or shape, `offs` not non-decreasing or not ending at M, `p` of
/// the wrong length, an odd N with a GLU epilogue.
pub fn spec_for(w: &Fp4Weights, inp: &MatInputs<'_>) -> Result<(MatSpec, Vec<usize>), OpError> {
    w.validate()?;
    let m = match inp.x {
        Act::Bf16(x) => {
            if x.dtype != DType::Bf16 || x.shape.len() != 2 || x.shape[1] != w.k {
                return Err(bad(
                    "x",
                    format!("expected a [M, K = {}] bf16 matrix, got {} {:?}", w.k, x.dtype, x.shape),
                ));
            }
            x.shape[0]
        }
        Act::Mxfp8(t) => {
            if t.format != MxFormat::Fp8 || t.k != w.k {
                return Err(bad(
                    "x",
                    format!("expected MXFP8 activations with K = {}, got {:?} K = {}", w.k, t.format, t.k),
                ));
            }
            check_bytes(OP, "xq", t.q.len(), "[M, K]", &[t.rows, t.k])?;
            check_bytes(OP, "xs", t.s.len(), "[M, K/32]", &[t.rows, t.k / BLOCK])?;
            t.rows
        }
    };
    let counts = match inp.offs {
        Some(o) => {
            if o.len() != w.groups {
                return Err(bad("offs", format!("expected G = {} group ends, got {}", w.groups, o.len())));
            }
            let mut prev = 0i64;
            let mut counts = vec![];
            for (g, &e) in o.iter().enumerate() {
                if (e as i64) < prev {
                    return Err(bad(
                        "offs",
                        format!("group ends must be non-decreasing: offs[{g}] = {e} after {prev}"),
                    ));
                }
                counts.push((e as i64 - prev) as usize);
                prev = e as i64;
            }
            if prev != m as i64 {
                return Err(bad("offs", format!("the last group end must be M = {m}, got {prev}")));
            }
            counts
        }
        None => {
            if w.groups != 1 {
                return Err(bad("offs", format!("{} weight groups need group ends", w.groups)));
            }
            vec![m]
        }
    };
    if let Some(p) = inp.p
        && p.len() != m
    {
        return Err(bad("p", format!("expected M = {m} routing weights, got {}", p.len())));
    }
    let glu = inp.epilogue.is_glu();
    if glu && !w.n.is_multiple_of(2) {
        return Err(bad("N", format!("a GLU epilogue needs an even N, got {}", w.n)));
    }
    let n_out = if glu { w.n / 2 } else { w.n };
    let kb = w.k / BLOCK;
    let spec = MatSpec {
        grouped: inp.offs.is_some(),
        epilogue: inp.epilogue,
        row_scale: inp.p.is_some(),
        packed: matches!(w.q, WeightBytes::Packed(_) | WeightBytes::PackedTiles(_)),
        tiled: matches!(w.q, WeightBytes::PackedTiles(_)),
        fold: scales_foldable(&w.s),
        finite: !w.s.par_iter().any(|&b| b == 255),
        act8: matches!(inp.x, Act::Mxfp8(_)),
        kb_align: [16u32, 8, 4, 2, 1].into_iter().find(|v| kb.is_multiple_of(*v as usize)).unwrap_or(1),
        out_vec: if n_out.is_multiple_of(2) { 2 } else { 1 },
    };
    Ok((spec, counts))
}

fn facts(w: &Fp4Weights, glu: bool, counts: &[usize]) -> ShapeFacts {
    ShapeFacts {
        max_rows: counts.iter().copied().max().unwrap_or(0),
        counts: counts.to_vec(),
        n_out: if glu { w.n / 2 } else { w.n },
        k: w.k,
        glu,
    }
}

/// PATH=gemv with MXFP8 activations: [`Stmt::Fp4Gemv`] reads bf16 activations only (16-byte chunks of a block's
/// columns, reloaded by every CTA of a group), so a first launch dequantizes the activations once (`mx.dequantize`
/// to bf16, the prefill path's activation kernel: `M*K*(1 + 1/32)` bytes read, `2*M*K` written; 0.4 + 0.8 MB at
/// 28 experts x 4 tokens, K3584) into a scratch `xd: [M, K]`, and the main kernel is the bf16-activation one. Every
/// activation is the bf16 the tile path's on-chip dequant feeds the tensor cores (an E4M3 value times a power of
/// two), so the two paths differ only in the order of the f32 sums.
///
/// PATH=tile and stream do the same unless `XDQ=tile` ([`Cfg::act_tile`]): their on-chip conversion runs once per
/// stage in every CTA, i.e. every activation once per weight tile (96 times at N6144 with 64-row tiles), in a
/// threads region between two barriers that the products wait for; at M64 N6144 K3584 it made the kernel 2.1x
/// slower than on bf16 activations (H100, 0.0830 ms on 2026-12-06 against 0.0389 in the tune records, same
/// resolved knobs). The first launch converts each activation once (M*K*(1 + 1/32) bytes read, 2*M*K written:
/// 0.23 + 0.46 MB at M64 K3584).
pub fn act_dequant_first(spec: &MatSpec, c: &Cfg) -> bool {
    spec.act8 && !c.act_tile && !c.f8
}

/// The variant the main kernel is built for: `spec`, with bf16 activations when [`act_dequant_first`].
fn main_spec(spec: &MatSpec, c: &Cfg) -> MatSpec {
    MatSpec { act8: spec.act8 && !act_dequant_first(spec, c), ..*spec }
}

/// The grid dependencies of the plan's kernels with `PDL=true` ([`k3k_ir::Stmt::GridDep`]), as (activation
/// dequant, main, finalize): a kernel that has one before it in the plan waits for it at its start, a kernel that
/// has one after it lets it launch at its start. So the next kernel's blocks are resident and waiting when the
/// one before ends, instead of launching then; nothing before a wait reads what the kernel before writes. Empty
/// everywhere without `PDL` or with one kernel.
pub fn grid_deps(spec: &MatSpec, c: &Cfg) -> [Vec<GridDep>; 3] {
    if !c.pdl {
        return Default::default();
    }
    let before = act_dequant_first(spec, c);
    let after = c.finalize_launch();
    let mut main = Vec::new();
    if before {
        main.push(GridDep::Wait);
    }
    if after {
        main.push(GridDep::LaunchDependents);
    }
    let act = if before { vec![GridDep::LaunchDependents] } else { vec![] };
    let fin = if after { vec![GridDep::Wait] } else { vec![] };
    [act, main, fin]
}

/// `k` with `deps` first in its body and `_pdl` added to its name, or `k` itself when there are none: the
/// activation dequant and the finalize, whose names do not come from the knobs (the main kernel's name has
/// `PDL` in it already).
fn with_deps(k: Kernel, deps: &[GridDep]) -> Kernel {
    if deps.is_empty() { k } else { k.with_grid_deps(deps, "_pdl") }
}

/// The kernels of a problem at these knobs: main first (its knobs are the resolved configuration the tuner and
/// the reports show), then the activation dequant of [`act_dequant_first`] (which the plan launches before main),
/// then the finalize of a split ([`Cfg::finalize_launch`]).
pub fn kernels_for(spec: &MatSpec, c: &Cfg) -> Result<Vec<Kernel>, OpError> {
    let [act, main, fin] = grid_deps(spec, c);
    let mut v = vec![build_main(&main_spec(spec, c), c)?.with_grid_deps(&main, "")];
    if act_dequant_first(spec, c) {
        v.push(with_deps(super::prefill::act_kernel()?, &act));
    }
    if c.finalize_launch() {
        v.push(with_deps(build_finalize(spec, c.split)?, &fin));
    }
    Ok(v)
}

/// Arrival counters of a FIN=last launch: one per output tile, at most `(ceil(M / BM) + G) * ceil(NO / BNO)`
/// (grouped; dense: `ceil(M / BM) * ceil(N / BN)`), the bound the kernel's tile walk stays below.
pub fn counter_count(spec: &MatSpec, c: &Cfg, m: usize, groups: usize, n_out: usize) -> usize {
    let bno = if spec.epilogue.is_glu() { c.bn / 2 } else { c.bn } as usize;
    if c.ts > 0 {
        // TS: one per split tile, `((g - whole) x ceil(M / BM) + mt) x n_tiles + nt` (`build_main`).
        return ((c.ts as usize).min(groups) * m.div_ceil(c.bm as usize) * n_out.div_ceil(bno)).max(1);
    }
    let extra = if spec.grouped { groups } else { 0 };
    ((m.div_ceil(c.bm as usize) + extra) * n_out.div_ceil(bno)).max(1)
}

/// The plan of one product: validated inputs, resolved knobs, one launch (or two with a K split).
pub fn matmul_plan(w: &Fp4Weights, inp: &MatInputs<'_>, knobs: &Knobs) -> Result<Plan, OpError> {
    let (spec, counts) = spec_for(w, inp)?;
    let glu = inp.epilogue.is_glu();
    let sh = facts(w, glu, &counts);
    let mk = MatKnobs::from_knobs(knobs)?;
    if super::super::fp8::selected(&mk) {
        return super::super::fp8::plan(w, inp, &spec, &sh, (&mk, knobs));
    }
    if !spec.tiled && super::prefill::selected(&spec, &mk, &sh) {
        return super::prefill::plan(w, inp, &spec, &sh, (&mk, knobs));
    }
    let c = resolve_read(&spec, &mk, knobs, &sh)?;
    let (g, n, k, m) = (w.groups, w.n, w.k, inp.x.shape().0);
    let n_out = if glu { n / 2 } else { n };
    let mut plan = Plan::default();
    let act_first = act_dequant_first(&spec, &c);
    let mut args = match inp.x {
        Act::Bf16(x) => vec![plan.input("x", x.clone())],
        // The activation dequant kernel reads the E4M3 bytes as bytes, the main kernels as u32 words.
        Act::Mxfp8(t) => vec![
            plan.input(
                "xq",
                if act_first {
                    HostTensor::from_bytes(DType::U8, &[m, k], t.q.clone())
                } else {
                    HostTensor::from_bytes(DType::U32, &[m, k / 4], t.q.clone())
                },
            ),
            plan.input("xs", HostTensor::from_bytes(DType::U8, &[m, k / BLOCK], t.s.clone())),
        ],
    };
    let lead: Vec<usize> = if spec.grouped { vec![g, n] } else { vec![n] };
    let shape = |last: usize| -> Vec<usize> { lead.iter().copied().chain([last]).collect() };
    let wq = match &w.q {
        WeightBytes::Natural(q) => HostTensor::from_bytes(DType::U32, &shape(k / 8), q.clone()),
        WeightBytes::Packed(q) | WeightBytes::PackedTiles(q) => {
            HostTensor::from_bytes(DType::U32, &shape(k / 8), super::pack::words_to_bytes(q))
        }
    };
    args.push(plan.input("wq", wq));
    args.push(plan.input("ws", HostTensor::from_bytes(DType::U8, &shape(k / BLOCK), w.s.clone())));
    if let Some(o) = inp.offs {
        let o: Vec<i64> = o.iter().map(|&v| v as i64).collect();
        args.push(plan.input("offs", HostTensor::from_i64(DType::I32, &[g], &o)));
    }
    let p_idx = inp.p.map(|p| plan.input("p", data::tensor(DType::F32, &[m], p)));
    let [act_deps, main_deps, fin_deps] = grid_deps(&spec, &c);
    let main = build_main(&main_spec(&spec, &c), &c)?.with_grid_deps(&main_deps, "");
    if m == 0 {
        // No rows: an empty output and nothing to launch (a grid of zero CTAs is not a valid launch).
        plan.output("y", DType::Bf16, &[0, n_out]);
        return Ok(plan);
    }
    if act_first {
        // [xq, xs] -> the bf16 scratch the main kernel reads in their place.
        let xd = plan.scratch("xd", DType::Bf16, &[m, k]);
        plan.step(with_deps(super::prefill::act_kernel()?, &act_deps), &[args[0], args[1], xd], &[]);
        args.splice(0..2, [xd]);
    }
    if c.partial() && c.fused {
        // One launch: partials in scratch, arrival counters that start (and are left) at zero.
        args.push(plan.scratch("part", DType::F32, &[c.part_slots() as usize, m, n]));
        args.push(plan.input("sem", HostTensor::zeros(DType::I32, &[counter_count(&spec, &c, m, g, n_out)])));
        args.extend(p_idx);
        args.push(plan.output("y", DType::Bf16, &[m, n_out]));
        plan.step(main, &args, &[]);
    } else if c.finalize_launch() {
        let part = plan.scratch("part", DType::F32, &[c.split as usize, m, n]);
        args.push(part);
        plan.step(main, &args, &[]);
        let mut fargs = vec![part];
        fargs.extend(p_idx);
        fargs.push(plan.output("y", DType::Bf16, &[m, n_out]));
        plan.step(with_deps(build_finalize(&spec, c.split)?, &fin_deps), &fargs, &[]);
    } else {
        args.extend(p_idx);
        args.push(plan.output("y", DType::Bf16, &[m, n_out]));
        plan.step(main, &args, &[]);
    }
    Ok(plan)
}
