//! The operator `mxfp4_matmul`: problems, presets, random cases and instances.

use super::*;
use crate::dims::{self, DimDecl};

/// `mxfp4_matmul`.
pub struct Mxfp4Matmul;

/// The dims of `mxfp4_matmul` presets (see [`MatProblem::from_preset`]).
pub const DIMS: &[DimDecl] = &[
    DimDecl::required("K", 1, dims::MAX_COLS, "reduction dim, a multiple of 32"),
    DimDecl::required("N", 1, dims::MAX_COLS, "output columns (a GLU epilogue halves them)"),
    DimDecl::optional("M", 0, dims::MAX_ROWS, "rows of a dense product (instead of G)"),
    DimDecl::optional("G", 1, dims::MAX_GROUPS, "groups (routed experts)"),
    DimDecl::indexed("c", "G", 0, dims::MAX_ROWS, "rows of group i (instead of per or mean)"),
    DimDecl::optional("per", 0, dims::MAX_ROWS, "rows of every group (instead of mean)"),
    DimDecl::optional("mean", 0, dims::MAX_ROWS, "mean rows per group, drawn ragged (with G)"),
    DimDecl::optional("seed", 0, i64::MAX, "seed of the ragged draw (with mean)"),
    DimDecl::optional("epilogue", 0, 2, "0 none, 1 SiTU-GLU, 2 SwiGLU"),
    DimDecl::flag("p", "1: routing weights scale each row"),
    DimDecl::flag("packed", "1: the packed weight layout"),
    DimDecl::flag("tiles", "1: the tile-major packed layout (N a multiple of 32, K of 128)"),
    DimDecl::flag("wide", "1: scale bytes over a wide range"),
    DimDecl::flag("act", "1: MXFP8 activations"),
];

/// A concrete problem.
#[derive(Clone, Debug)]
pub struct MatProblem {
    pub grouped: bool,
    pub counts: Vec<usize>,
    pub k: usize,
    pub n: usize,
    pub epilogue: Epilogue,
    pub row_scale: bool,
    pub packed: bool,
    /// Scale bytes over a wide range (0..=20, 129..=160, NaN) instead of realistic ones.
    pub wide: bool,
    /// MXFP8 activations (quantized from the bf16 draw with the Ceil rule).
    pub act8: bool,
    /// Tile-major packed weights (`WeightBytes::PackedTiles`; implies packed).
    pub tiles: bool,
}

impl MatProblem {
    /// Dims `K`, `N` and either `M` (dense) or `G` with `c0..` (explicit counts), `per` (every group that
    /// many rows) or `mean` (+ `seed`, ragged as `latent_moe_gemm`); optional `epilogue` (0 none, 1 SiTU-GLU,
    /// 2 SwiGLU), `p` (1: routing weights), `packed` (1: packed weight layout), `tiles` (1: the tile-major packed
    /// layout; N a multiple of 32, K of 128), `wide` (1: wide scale range), `act` (1: MXFP8 activations).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let k = p.get("K")? as usize;
        let n = p.get("N")? as usize;
        check_k(OP, "K", k)?;
        let epilogue = epilogue_of(OP, p, n)?;
        let (grouped, counts) = group_counts(p)?;
        let tiles = p.get_or("tiles", 0) == 1;
        if tiles && (!n.is_multiple_of(32) || !k.is_multiple_of(128)) {
            return Err(bad(
                "tiles",
                format!("the tile-major layout needs N a multiple of 32 and K of 128, got {n} x {k}"),
            ));
        }
        Ok(MatProblem {
            grouped,
            counts,
            k,
            n,
            epilogue,
            row_scale: p.get_or("p", 0) == 1,
            packed: tiles || p.get_or("packed", 0) == 1,
            wide: p.get_or("wide", 0) == 1,
            act8: p.get_or("act", 0) == 1,
            tiles,
        })
    }
    pub fn m(&self) -> usize {
        self.counts.iter().sum()
    }
    pub fn n_out(&self) -> usize {
        if self.epilogue.is_glu() { self.n / 2 } else { self.n }
    }
    pub fn offs(&self) -> Vec<i32> {
        self.counts
            .iter()
            .scan(0i32, |s, c| {
                *s += *c as i32;
                Some(*s)
            })
            .collect()
    }
    /// The variant for realistic data (scales foldable), for compile-only checks.
    pub fn spec(&self) -> MatSpec {
        let kb = self.k / BLOCK;
        MatSpec {
            grouped: self.grouped,
            epilogue: self.epilogue,
            row_scale: self.row_scale,
            packed: self.packed,
            tiled: self.tiles,
            fold: !self.wide,
            finite: !self.wide,
            act8: self.act8,
            kb_align: [16u32, 8, 4, 2, 1].into_iter().find(|v| kb.is_multiple_of(*v as usize)).unwrap_or(1),
            out_vec: if self.n_out().is_multiple_of(2) { 2 } else { 1 },
        }
    }
    pub fn facts(&self) -> ShapeFacts {
        ShapeFacts {
            max_rows: self.counts.iter().copied().max().unwrap_or(0),
            counts: self.counts.clone(),
            n_out: self.n_out(),
            k: self.k,
            glu: self.epilogue.is_glu(),
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Random MXFP4 weights: uniform codes; scale bytes 117..=122 (weights of magnitude ~K^-1/2 for K in the
/// thousands), or with `wide` also 0..=20, 129..=160 and 255 (NaN blocks).
pub fn random_weights(groups: usize, n: usize, k: usize, wide: bool, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let nq = groups * n * k / 2;
    let ns = groups * n * k / BLOCK;
    let mut q = vec![0u8; nq];
    q.par_chunks_mut(1 << 16).enumerate().for_each(|(ci, ch)| {
        let mut s = mix(seed ^ mix(ci as u64));
        for (i, b) in ch.iter_mut().enumerate() {
            if i % 8 == 0 {
                s = mix(s);
            }
            *b = (s >> (8 * (i % 8))) as u8;
        }
    });
    let s: Vec<u8> = (0..ns)
        .into_par_iter()
        .map(|i| {
            let h = mix(seed ^ 0x5ca1e5 ^ mix(i as u64));
            if wide {
                match h % 32 {
                    0 => 255,
                    1 | 2 => (h >> 8) as u8 % 21,
                    3..=6 => 129 + ((h >> 8) % 32) as u8,
                    _ => 110 + ((h >> 8) % 19) as u8,
                }
            } else {
                117 + ((h >> 8) % 6) as u8
            }
        })
        .collect();
    (q, s)
}

struct MatInstance {
    pb: MatProblem,
    x: HostTensor,
    /// MXFP8 activations (`act8`).
    x8: Option<rmx::MxTensor>,
    /// The activations' values as the kernel sees them (bf16, or dequantized MXFP8).
    xv: Vec<f32>,
    w: Fp4Weights,
    p: Option<Vec<f32>>,
    seed: u64,
}

impl Operator for Mxfp4Matmul {
    fn name(&self) -> &'static str {
        OP
    }
    fn summary(&self) -> &'static str {
        "y = x · dequant(w)^T, MXFP4 weights dequantized on chip into bf16 mma operands, dense or grouped over ragged experts, GLU epilogues, split-K for decode"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        // The anchor rows (SEMANTICS.md section 4) use weights in the offline packed layout (`mx::pack`, like every Hopper MXFP4
        // kernel's re-layout); the `natural` rows read the layout of SEMANTICS.md section 1.3 as stored.
        let rows: [(&str, Vec<(&str, i64)>); 6] = [
            ("MXFP4 linear M1 N6144 K3584", vec![("M", 1), ("N", 6144), ("K", 3584)]),
            ("MXFP4 linear M64 N6144 K3584", vec![("M", 64), ("N", 6144), ("K", 3584)]),
            ("MXFP4 linear M4096 N6144 K3584", vec![("M", 4096), ("N", 6144), ("K", 3584)]),
            ("MXFP4 decode 28 experts x 4 tokens N6144 K3584", vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584)]),
            (
                "MXFP4 decode 28 experts x 4 tokens N6144 K3584 situ_glu+p",
                vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("epilogue", 1), ("p", 1)],
            ),
            // The largest decode batch of the M <= 16 target (the stream path's widest token tile).
            ("MXFP4 linear M16 N6144 K3584", vec![("M", 16), ("N", 6144), ("K", 3584)]),
        ];
        let mut out = vec![];
        for (name, dims) in &rows {
            let mut d = dims.clone();
            d.push(("packed", 1));
            out.push(Preset::new(name, &d));
        }
        for (name, dims) in rows.iter().take(4) {
            out.push(Preset::new(&format!("{name} natural"), dims));
        }
        // The decode in the tile-major packed layout (`mx::pack::tile`: a 16-row block's quad contiguous).
        let mut d = rows[3].1.clone();
        d.push(("tiles", 1));
        out.push(Preset::new(&format!("{} tiles", rows[3].0), &d));
        // K3's expert inputs are MXFP8: the decode and prefill rows with MXFP8 activations.
        for (name, dims) in [&rows[3], &rows[2]] {
            let mut d = dims.clone();
            d.extend([("packed", 1), ("act", 1)]);
            out.push(Preset::new(&format!("{name} mxfp8-act"), &d));
        }
        // Issue 45's batches between decode and prefill (speculative decoding, small-batch serving), MXFP8
        // activations: M = 8..256, where the weight bytes are the floor for a kernel at the FP8 rate.
        for m in [8i64, 16, 32, 64, 128, 256] {
            out.push(Preset::new(
                &format!("MXFP4 linear M{m} N6144 K3584 mxfp8-act"),
                &[("M", m), ("N", 6144), ("K", 3584), ("packed", 1), ("act", 1)],
            ));
        }
        // Prefill over 28 ragged experts (latent_moe_gemm's G28 mean1024 shape; PATH=dq_gemm by default).
        out.push(Preset::new(
            "MXFP4 prefill 28 experts mean1024 N6144 K3584",
            &[("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("packed", 1)],
        ));
        out
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        const EDGE: [i64; 7] = [1, 15, 16, 17, 63, 65, 130];
        let pick = |rng: &mut StdRng| -> i64 {
            if rng.random_bool(0.5) { EDGE[rng.random_range(0..EDGE.len())] } else { rng.random_range(1..=140) }
        };
        let k = 32 * if rng.random_bool(0.5) { [1i64, 2, 3][rng.random_range(0..3)] } else { rng.random_range(1..=10) };
        let epilogue = rng.random_range(0..3i64);
        let mut n = pick(rng);
        if epilogue != 0 && n % 2 == 1 {
            n += 1;
        }
        let p = rng.random_bool(0.5) as i64;
        let packed = rng.random_bool(0.3) as i64;
        let wide = rng.random_bool(0.3) as i64;
        let act = rng.random_bool(0.3) as i64;
        let tail =
            [("K", k), ("N", n), ("epilogue", epilogue), ("p", p), ("packed", packed), ("wide", wide), ("act", act)];
        let tag = format!("K{k} N{n} epi{epilogue} p{p} packed{packed} wide{wide} act{act}");
        if rng.random_bool(0.3) {
            let m = pick(rng);
            let mut dims = vec![("M", m)];
            dims.extend(tail);
            return Preset::new(&format!("dense M{m} {tag}"), &dims);
        }
        let g = rng.random_range(1..=5i64);
        let mut dims: Vec<(String, i64)> = tail.iter().map(|(a, b)| (a.to_string(), *b)).collect();
        dims.push(("G".into(), g));
        let mut desc = String::new();
        for i in 0..g {
            let c = if rng.random_bool(0.25) { 0 } else { pick(rng).min(70) };
            dims.push((format!("c{i}"), c));
            desc.push_str(&format!("{c},"));
        }
        Preset { name: format!("G{g} [{desc}] {tag}"), dims: dims.into_iter().collect() }
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(OP, DIMS, p)?;
        dims::bound(OP, p, crate::latent_moe_gemm::gemm_footprint(p))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = MatProblem::from_preset(p)?;
        let (m, k, n, g) = (pb.m(), pb.k, pb.n, pb.counts.len());
        let mut xv = data::normal(m * k, 1.0, seed);
        data::round_bf16(&mut xv);
        let x = data::tensor(DType::Bf16, &[m, k], &xv);
        let x8 = if pb.act8 {
            let t = rmx::quantize(&xv, m, k, MxFormat::Fp8, ScaleRule::Ceil)
                .map_err(|e| OpError::Internal(format!("reference quantize: {e}")))?;
            xv = rmx::dequantize(&t).map_err(|e| OpError::Internal(format!("reference dequantize: {e}")))?;
            Some(t)
        } else {
            None
        };
        let (q, s) = random_weights(g, n, k, pb.wide, seed ^ 0x77);
        let (q, s) = if pb.tiles {
            let words = super::pack::tile(&super::pack::pack(&q, g * n, k)?, g * n, k)?;
            (WeightBytes::PackedTiles(words), super::pack::tile_scales(&s, g * n, k)?)
        } else if pb.packed {
            (WeightBytes::Packed(super::pack::pack(&q, g * n, k)?), s)
        } else {
            (WeightBytes::Natural(q), s)
        };
        let w = Fp4Weights { groups: g, n, k, q, s };
        let p = pb.row_scale.then(|| data::uniform(m, 0.1, 1.0, seed ^ 0x7a7a));
        Ok(Box::new(MatInstance { pb, x, x8, xv, w, p, seed }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = MatProblem::from_preset(p)?;
        let spec = pb.spec();
        let k = MatKnobs::from_knobs(knobs)?;
        if super::super::fp8::selected(&k) {
            return super::super::fp8::kernels(&spec, &k, knobs);
        }
        if !spec.tiled && super::prefill::selected(&spec, &k, &pb.facts()) {
            return super::prefill::kernels(&spec, &pb.facts(), (&k, knobs));
        }
        let c = resolve_read(&spec, &k, knobs, &pb.facts())?;
        kernels_for(&spec, &c)
    }
    fn bucket_dims(&self, p: &Preset) -> Vec<(String, u64)> {
        let Ok(pb) = MatProblem::from_preset(p) else { return vec![] };
        let nonempty = pb.counts.iter().filter(|c| **c > 0).count().max(1);
        vec![
            ("rows_per_group".into(), (pb.m() / nonempty) as u64),
            ("K".into(), pb.k as u64),
            ("N".into(), pb.n as u64),
            ("groups".into(), pb.counts.len() as u64),
        ]
    }
}

impl MatInstance {
    fn inputs(&self) -> (Vec<i32>, MatInputs<'_>) {
        let offs = self.pb.offs();
        let x = match &self.x8 {
            Some(t) => Act::Mxfp8(t),
            None => Act::Bf16(&self.x),
        };
        let inp = MatInputs { x, offs: None, p: self.p.as_deref(), epilogue: self.pb.epilogue };
        (offs, inp)
    }
}

impl Instance for MatInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        format!(
            "{} M={} K={} N={} groups={} epilogue={} p={} packed={}{} wide={} act={} seed={}",
            if pb.grouped { "grouped" } else { "dense" },
            pb.m(),
            pb.k,
            pb.n,
            if pb.counts.len() <= 8 { format!("{:?}", pb.counts) } else { format!("{} groups", pb.counts.len()) },
            pb.epilogue.name(),
            pb.row_scale,
            pb.packed,
            if pb.tiles { " tiles" } else { "" },
            pb.wide,
            if pb.act8 { "mxfp8" } else { "bf16" },
            self.seed
        )
    }

    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        let (offs, mut inp) = self.inputs();
        if self.pb.grouped {
            inp.offs = Some(&offs);
        }
        matmul_plan(&self.w, &inp, knobs)
    }

    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let pb = &self.pb;
        let y = out.get("y")?.to_f64_vec();
        let (m, k, n, no) = (pb.m(), pb.k, pb.n, pb.n_out());
        let ierr = |e: k3k_reference::error::RefError| OpError::Internal(format!("reference: {e}"));
        // The rows compared: all of a small problem; of a large one each group's first, middle and last, plus 64
        // random.
        let rows = crate::check::checked_rows(&pb.counts, m * n * k <= 1 << 24, self.seed);
        let group_of = crate::check::row_groups(&pb.counts);
        // Per row, on the group's dequantized weights (reference::mx::dequantize) in f64: the epilogue's output,
        // and whether every product behind it has a value an f32 accumulation determines. A product whose terms
        // cancel to below their f32 error bound (wide scale ranges: terms of 1e11 summing to 13) may come out as
        // anything within that bound, its sign included, and a GLU turns a flipped sign into a swing of up to
        // 100; such outputs are not compared (their count is reported), the rest are, NaN positions everywhere.
        let mut want = vec![0f64; rows.len() * no];
        let mut got = vec![0f64; rows.len() * no];
        let mut undetermined = 0usize;
        for gi in 0..pb.counts.len() {
            let mine: Vec<usize> = (0..rows.len()).filter(|&i| group_of[rows[i]] == gi).collect();
            if mine.is_empty() {
                continue;
            }
            let wd = rmx::dequantize(&self.w.group_tensor(gi)?).map_err(ierr)?;
            // Per row: the outputs and whether each is determined in f32.
            type RowCheck = Result<(Vec<f64>, Vec<bool>), OpError>;
            let res: Vec<RowCheck> = mine
                .par_iter()
                .map(|&i| {
                    let r = rows[i];
                    let xr = &self.xv[r * k..(r + 1) * k];
                    let acc = refgemm::matmul_nt(xr, 1, k, &wd, n).map_err(ierr)?;
                    let abs = refgemm::matmul_nt_abs(xr, 1, k, &wd, n).map_err(ierr)?;
                    let determined = |j: usize| acc[j].abs() > refgemm::f32_sum_bound(k, abs[j]);
                    let scale = self.p.as_ref().map_or(1.0, |p| p[r] as f64);
                    let out = (0..no).map(|j| scale * pb.epilogue.reference(&acc, j)).collect();
                    let ok = (0..no).map(|j| determined(j) && (!pb.epilogue.is_glu() || determined(j + no))).collect();
                    Ok((out, ok))
                })
                .collect();
            for (&i, r) in mine.iter().zip(res) {
                let (w, ok) = r?;
                let yr = &y[rows[i] * no..(rows[i] + 1) * no];
                for j in 0..no {
                    // Not compared: an undetermined output where both sides are finite (a NaN or inf on either
                    // side is still compared).
                    if !ok[j] && w[j].is_finite() && yr[j].is_finite() {
                        undetermined += 1;
                        continue;
                    }
                    want[i * no + j] = w[j];
                    got[i * no + j] = yr[j];
                }
            }
        }
        let mut scope =
            if rows.len() == m { format!("all {m} rows") } else { format!("{} sampled rows of {m}", rows.len()) };
        if undetermined > 0 {
            scope += &format!(
                " ({undetermined} output(s) not compared: a product behind them cancels below its f32 error bound)"
            );
        }
        let mut r = compare("y", &got, &want, Tolerance::Bf16, scope);
        if !r.passed {
            r.detail.push_str(&error_pattern(&got, &want, rows.len(), no));
        }
        Ok(r)
    }

    fn work(&self) -> Work {
        let pb = &self.pb;
        let (m, k, n) = (pb.m() as f64, pb.k as f64, pb.n as f64);
        let used = pb.counts.iter().filter(|c| **c > 0).count() as f64;
        Work {
            flops: 2.0 * m * n * k,
            bytes: if pb.act8 { m * k * (1.0 + 1.0 / 32.0) } else { 2.0 * m * k }
                + used * n * (k / 2.0 + k / 32.0)
                + 2.0 * m * pb.n_out() as f64
                + if pb.row_scale { 4.0 * m } else { 0.0 },
        }
    }

    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({
            "grouped": pb.grouped, "counts": pb.counts, "K": pb.k, "N": pb.n, "M": pb.m(),
            "epilogue": pb.epilogue.name(), "p": pb.row_scale, "packed": pb.packed,
            "act": if pb.act8 { "mxfp8" } else { "bf16" },
        })
    }
}
