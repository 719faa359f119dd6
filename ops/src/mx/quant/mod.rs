//! `mx.quantize` and `mx.dequantize`: MX block quantization of SEMANTICS.md section 1 as tile programs, bit-exact with
//! `k3k_reference::mx::{quantize, dequantize}`.
//!
//! Both view a `[R, K]` matrix as `[R*K/32, 32]`: one row per MX block. A block of BR such rows per CTA:
//! - quantize: `cp.async` the block rows into shared memory; `amax` per row is a row reduction of `|x|`, a
//!   second reduction of `x * 0` is NaN exactly when the block holds a NaN or an infinity; the scale exponent
//!   comes from the exact `ilogb` of amax (`Ceil`: +1 when amax's mantissa exceeds maxval's, 1.5 for fp4 and
//!   1.75 for e4m3), clamped to [-127, 127]; elements are `ldexp(x, -e)` (exact) rounded to nearest even by
//!   comparisons (fp4: the seven midpoints, ties to the even code) or by `round(ldexp(|y|, 3 - e_y))` on the
//!   e4m3 grid (saturating to 0x7E), sign kept. fp4 pairs are packed by a map over a `[BR, 16]` byte tile that
//!   reads both elements from shared memory.
//! - dequantize: `cp.async` the element bytes; a map decodes each element from its bits (exact products with
//!   powers of two) times the block's E8M0 scale (255: NaN for the whole block).
//!
//! The knobs of both kernels (BR, W) are declared once in [`knobs`] ([`MxKnobs`]).

mod knobs;

use super::*;
use crate::check::compare;
use crate::data;
use crate::dims::{self, DimDecl};
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::*;
use k3k_reference::metrics::Tolerance;
use k3k_reference::mx as rmx;
pub use knobs::MxKnobs;
use rand::Rng;
use rand::rngs::StdRng;
use rayon::prelude::*;

const QOP: &str = "mx.quantize";
const DOP: &str = "mx.dequantize";

/// A quantize kernel variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantSpec {
    pub fmt: MxFormat,
    pub rule: ScaleRule,
    /// Source dtype: `F32` or `Bf16`.
    pub src: DType,
}

/// A dequantize kernel variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DequantSpec {
    pub fmt: MxFormat,
    /// Output dtype: `F32` or `Bf16`.
    pub out: DType,
}

/// Knobs of both kernels ([`MxKnobs::space`]).
pub fn knob_space() -> KnobSpace {
    MxKnobs::space()
}

/// Default knobs ([`MxKnobs::defaults`]).
pub fn default_knobs() -> Knobs {
    MxKnobs::defaults()
}

fn dtype_tag(d: DType) -> &'static str {
    d.name()
}

/// The quantize kernel: `x: [R, K]` (src dtype) -> `q: [R, K/2] u8` (fp4, dims `R, KH`) or `[R, K] u8` (e4m3
/// bytes) and `s: [R, KB] u8` (KB = K/32; the launcher guarantees K = 32 KB and, for fp4, K = 2 KH).
pub fn build_quantize(spec: &QuantSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    let MxKnobs { br, w } = MxKnobs::resolve(QOP, knobs)?;
    if !matches!(spec.src, DType::F32 | DType::Bf16) {
        return Err(OpError::BadInput {
            op: QOP,
            arg: "x".into(),
            why: format!("f32 or bf16 input, got {}", spec.src),
        });
    }
    let name = format!(
        "k3k_mx_quantize_{}_{}_{}_{}",
        format_name(spec.fmt),
        rule_name(spec.rule),
        dtype_tag(spec.src),
        knobs.id().to_lowercase()
    );
    let mut b = KernelBuilder::new(&name, 32 * w);
    b.knobs(knobs.clone());
    let r = b.dim("R");
    let k = b.dim("K");
    let kb = b.dim("KB");
    let x = b.tensor("x", spec.src, &[r.clone(), k.clone()], Access::Read);
    let (q, qcols) = match spec.fmt {
        MxFormat::Fp4 => {
            let kh = b.dim("KH");
            (b.tensor("q", DType::U8, &[r.clone(), kh], Access::Write), 16u32)
        }
        MxFormat::Fp8 => (b.tensor("q", DType::U8, &[r.clone(), k.clone()], Access::Write), 32u32),
    };
    let s = b.tensor("s", DType::U8, &[r.clone(), kb.clone()], Access::Write);
    let nb = r * kb;
    b.grid(nb.ceil_div(br as i64), 1i64, 1i64);
    let warps = [w, 1];
    let sx = b.shared("sx", spec.src, br, 32, 1, Swizzle::None);
    let t = b.tile("x", DType::F32, br, 32, warps);
    let ta = b.tile("tmp", DType::F32, br, 32, warps);
    let tsc = b.tile("scale", DType::I32, br, 8, warps);
    let tq = b.tile("codes", DType::I32, br, qcols, warps);
    let vamax = b.vec("amax", br, warps);
    let vbad = b.vec("bad", br, warps);
    let vexp = b.vec("exp", br, warps);

    let b0 = b.let_("b0", Expr::block_idx(0) * br as i64);
    let valid = b.let_("valid", nb - b0.clone());
    let vec = 16 / spec.src.size_bytes() as u32;
    let dst = b.slot(sx, 0i64);
    b.copy_async(dst, view(x, &b0 * 32i64, 32i64, valid.clone(), 32i64, vec));
    b.commit();
    b.wait(0);
    b.barrier();
    let src = b.slot(sx, 0i64);
    b.load(t, Place::Shared(src));
    b.map(ta, Expr::Elem(t).abs());
    b.reduce(vamax, ta, ReduceOp::Max, false);
    // x * 0 is 0 for finite x and NaN for NaN and +-inf: the row sum flags non-finite blocks.
    b.map(ta, Expr::Elem(t) * 0.0);
    b.reduce(vbad, ta, ReduceOp::Sum, false);
    // Scale exponent as a float holding an integer; 128 marks a non-finite block (scale byte 255).
    let amax = Expr::RowVal(vamax);
    let fl = amax.ilogb();
    let emax = spec.fmt.emax() as f64;
    let e_raw = match spec.rule {
        ScaleRule::Floor => fl.clone() - emax,
        ScaleRule::Ceil => {
            // amax = m 2^fl with m in [1, 2); maxval = mv 2^emax with mv = 1.5 (fp4) or 1.75 (e4m3): the
            // smallest e with amax <= maxval 2^e is fl - emax, plus one when m > mv.
            let mv = spec.fmt.max_value() as f64 / 2f64.powi(spec.fmt.emax());
            let m = amax.ldexp(-fl.to_int());
            fl.clone() - emax + Expr::select(m.gt(mv), 1.0, 0.0)
        }
    };
    let e = Expr::select(
        Expr::RowVal(vbad).is_nan(),
        128.0,
        Expr::select(amax.eq(0.0), -127.0, e_raw.max(-127.0).min(127.0)),
    );
    b.vec_map(vexp, e);
    let e_int = Expr::RowVal(vexp).to_int();
    let bad = Expr::RowVal(vexp).eq(128.0);
    b.map(tsc, e_int.clone() + 127i64);
    b.store(tsc, Place::Global(view(s, b0.clone(), 1i64, valid.clone(), 1i64, 1)));
    let scaled = |v: Expr| v.ldexp(-e_int.clone());
    match spec.fmt {
        MxFormat::Fp4 => {
            let el = |c: Expr| scaled(Expr::shared_load(sx, 0i64, Expr::RowIdx, c));
            let lo = encode_fp4(el(Expr::ColIdx * 2i64));
            let hi = encode_fp4(el(Expr::ColIdx * 2i64 + 1i64));
            b.map(tq, Expr::select(bad, 0i64, lo.bitor(hi.shl(4i64))));
            b.store(tq, Place::Global(view(q, &b0 * 16i64, 16i64, valid, 16i64, 2)));
        }
        MxFormat::Fp8 => {
            b.map(tq, Expr::select(bad, 0i64, encode_e4m3(scaled(Expr::Elem(t)))));
            b.store(tq, Place::Global(view(q, &b0 * 32i64, 32i64, valid, 32i64, 2)));
        }
    }
    Ok(b.finish()?)
}

/// E2M1 code of an (already scaled, finite) f32: round to nearest, ties to the even code, saturating to 6,
/// sign kept (as the reference's encoder).
pub fn encode_fp4(y: Expr) -> Expr {
    let a = y.abs();
    let c = |e: Expr| e.to_int();
    let mag =
        c(a.gt(0.25)) + c(a.ge(0.75)) + c(a.gt(1.25)) + c(a.ge(1.75)) + c(a.gt(2.5)) + c(a.ge(3.5)) + c(a.gt(5.0));
    mag.bitor(y.bits().shr(28i64).bitand(8i64))
}

/// E4M3 code of an (already scaled, finite) f32: round to nearest even on the e4m3 grid (subnormals included),
/// saturating to 448 (0x7E), sign kept.
pub fn encode_e4m3(y: Expr) -> Expr {
    let a = y.abs();
    let ea = a.ilogb().max(-6.0);
    let r = a.ldexp(Expr::Int(3) - ea.to_int()).round();
    let mag = ((ea + 7.0) * 8.0 + r - 8.0).min(126.0).to_int();
    Expr::select(a.eq(0.0), 0i64, mag).bitor(y.bits().shr(24i64).bitand(0x80i64))
}

/// The dequantize kernel: `q` (`[R, KH]` fp4 or `[R, K]` e4m3 bytes) and `s: [R, KB]` -> `y: [R, K]`.
pub fn build_dequantize(spec: &DequantSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    let MxKnobs { br, w } = MxKnobs::resolve(DOP, knobs)?;
    if !matches!(spec.out, DType::F32 | DType::Bf16) {
        return Err(OpError::BadInput {
            op: DOP,
            arg: "y".into(),
            why: format!("f32 or bf16 output, got {}", spec.out),
        });
    }
    let name =
        format!("k3k_mx_dequantize_{}_{}_{}", format_name(spec.fmt), dtype_tag(spec.out), knobs.id().to_lowercase());
    let mut b = KernelBuilder::new(&name, 32 * w);
    b.knobs(knobs.clone());
    let r = b.dim("R");
    let k = b.dim("K");
    let kb = b.dim("KB");
    let bpb: u32 = match spec.fmt {
        MxFormat::Fp4 => 16,
        MxFormat::Fp8 => 32,
    };
    let q = match spec.fmt {
        MxFormat::Fp4 => {
            let kh = b.dim("KH");
            b.tensor("q", DType::U8, &[r.clone(), kh], Access::Read)
        }
        MxFormat::Fp8 => b.tensor("q", DType::U8, &[r.clone(), k.clone()], Access::Read),
    };
    let s = b.tensor("s", DType::U8, &[r.clone(), kb.clone()], Access::Read);
    let y = b.tensor("y", spec.out, &[r.clone(), k.clone()], Access::Write);
    let nb = r * kb;
    b.grid(nb.ceil_div(br as i64), 1i64, 1i64);
    let warps = [w, 1];
    let sq = b.shared("sq", DType::U8, br, bpb, 1, Swizzle::None);
    // The block's scale bytes as one shared row (maps cannot gather from global memory).
    let ss = b.shared("ss", DType::U8, 1, br, 1, Swizzle::None);
    let t = b.tile("y", DType::F32, br, 32, warps);
    let b0 = b.let_("b0", Expr::block_idx(0) * br as i64);
    let valid = b.let_("valid", nb - b0.clone());
    let dst = b.slot(sq, 0i64);
    b.copy_async(dst, view(q, &b0 * bpb as i64, bpb as i64, valid.clone(), bpb as i64, 16));
    let dst = b.slot(ss, 0i64);
    b.copy_async(dst, view(s, b0.clone(), br as i64, 1i64, valid.clone(), 16));
    b.commit();
    b.wait(0);
    b.barrier();
    let sbyte = Expr::shared_load(ss, 0i64, 0i64, Expr::RowIdx);
    let v = match spec.fmt {
        MxFormat::Fp4 => {
            let byte = Expr::shared_load(sq, 0i64, Expr::RowIdx, Expr::ColIdx / 2i64);
            fp4_value(nibble(byte, Expr::ColIdx.bitand(1i64)))
        }
        MxFormat::Fp8 => fp8_value(Expr::shared_load(sq, 0i64, Expr::RowIdx, Expr::ColIdx)),
    };
    b.map(t, v * e8m0(sbyte));
    b.store(t, Place::Global(view(y, &b0 * 32i64, 32i64, valid, 32i64, 2)));
    Ok(b.finish()?)
}

// ------------------------------------------------------------------------------------------------------------
// Host-side API with typed errors.

/// The plan that quantizes a `[rows, k]` matrix (f32 or bf16 tensor). Errors: K not a multiple of 32 (named),
/// a wrong dtype or rank.
pub fn quantize_plan(x: &HostTensor, fmt: MxFormat, rule: ScaleRule, knobs: &Knobs) -> Result<Plan, OpError> {
    if x.shape.len() != 2 {
        return Err(OpError::BadInput { op: QOP, arg: "x".into(), why: format!("a [R, K] matrix, got {:?}", x.shape) });
    }
    let (rows, k) = (x.shape[0], x.shape[1]);
    check_k(QOP, "K", k)?;
    let spec = QuantSpec { fmt, rule, src: x.dtype };
    let kernel = build_quantize(&spec, knobs)?;
    let mut plan = Plan::default();
    let xi = plan.input("x", x.clone());
    let qi = plan.output("q", DType::U8, &[rows, fmt.row_bytes(k)]);
    let si = plan.output("s", DType::U8, &[rows, k / BLOCK]);
    plan.step(kernel, &[xi, qi, si], &[]);
    Ok(plan)
}

/// The plan that dequantizes an MX matrix given as raw `q` and `s` bytes of a `[rows, k]` matrix. Errors: K
/// not a multiple of 32, `q` or `s` of the wrong size (each named, with the expected shape).
pub fn dequantize_plan(
    q: &[u8],
    s: &[u8],
    rows: usize,
    k: usize,
    fmt: MxFormat,
    out: DType,
    knobs: &Knobs,
) -> Result<Plan, OpError> {
    check_k(DOP, "K", k)?;
    let qshape = match fmt {
        MxFormat::Fp4 => "[R, K/2]",
        MxFormat::Fp8 => "[R, K]",
    };
    check_bytes(DOP, "q", q.len(), qshape, &[rows, fmt.row_bytes(k)])?;
    check_bytes(DOP, "s", s.len(), "[R, K/32]", &[rows, k / BLOCK])?;
    let kernel = build_dequantize(&DequantSpec { fmt, out }, knobs)?;
    let mut plan = Plan::default();
    let qi = plan.input("q", HostTensor::from_bytes(DType::U8, &[rows, fmt.row_bytes(k)], q.to_vec()));
    let si = plan.input("s", HostTensor::from_bytes(DType::U8, &[rows, k / BLOCK], s.to_vec()));
    let yi = plan.output("y", out, &[rows, k]);
    plan.step(kernel, &[qi, si, yi], &[]);
    Ok(plan)
}

// ------------------------------------------------------------------------------------------------------------
// Test data: every block gets one of several kinds of content (ordinary, huge, tiny, zero, non-finite,
// exact ties, wide ranges, scale boundaries), deterministic for a seed.

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `[rows, k]` values for quantization tests: per 32-element block a kind of content chosen from the seed:
/// ordinary values at a random magnitude, huge values (f32::MAX included), tiny and subnormal values, all
/// zeros with signed zeros, a NaN or an infinity, exact rounding ties of both formats, values spanning 2^-60
/// .. 2^60, and amax exactly at / just above the scale boundaries (6·2^e, 448·2^e, powers of two).
/// `edge = false` gives ordinary blocks only.
pub fn test_values(rows: usize, k: usize, seed: u64, edge: bool) -> Vec<f32> {
    let mut x = data::normal(rows * k, 1.0, seed);
    x.par_chunks_mut(BLOCK).enumerate().for_each(|(bi, blk)| {
        let h = mix(seed ^ mix(bi as u64 + 1));
        let mut s = h;
        let mut next = move || {
            s = mix(s);
            s
        };
        let kind = if edge { h % 12 } else { 0 };
        let p2 = |e: i32| 2f32.powi(e);
        match kind {
            0..=3 => {
                let e = (next() % 61) as i32 - 30;
                blk.iter_mut().for_each(|v| *v *= p2(e));
            }
            4 => {
                blk.iter_mut().for_each(|v| *v *= 1e37);
                let i = (next() % 32) as usize;
                blk[i] = if next() % 2 == 0 { f32::MAX } else { -f32::MAX };
            }
            5 => blk.iter_mut().for_each(|v| {
                let m = (next() % (1 << 22)) as f32;
                *v = m
                    * p2(-149)
                    * if next() % 2 == 0 { 1.0 } else { -1.0 }
                    * if next() % 3 == 0 { p2(20) } else { 1.0 };
            }),
            6 => blk.iter_mut().for_each(|v| *v = if next() % 2 == 0 { 0.0 } else { -0.0 }),
            7 => {
                let i = (next() % 32) as usize;
                blk[i] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][(next() % 3) as usize];
            }
            8 => {
                // Multiples of 2^(e-3): exact midpoints of the fp4 grid (0.25, 0.75, 1.25, ...) and of the e4m3
                // grid once scaled, with amax a power of two so the scale is exact.
                let e = (next() % 21) as i32 - 10;
                blk.iter_mut().for_each(|v| {
                    let n = (next() % 64) as f32;
                    *v = n * p2(e - 3) * if next() % 2 == 0 { 1.0 } else { -1.0 };
                });
                blk[0] = 8.0 * p2(e);
            }
            9 => blk.iter_mut().for_each(|v| {
                let e = (next() % 121) as i32 - 60;
                *v *= p2(e);
            }),
            10 => {
                let e = (next() % 41) as i32 - 20;
                let base = [6.0f32, 448.0, 1.0, 1.5, 1.75, 7.99][(next() % 6) as usize];
                let bump = if next() % 2 == 0 { 1.0 } else { 1.0 + p2(-20) };
                blk.iter_mut().for_each(|v| *v = v.clamp(-1.0, 1.0) * base * p2(e));
                blk[(next() % 32) as usize] = base * bump * p2(e) * if next() % 2 == 0 { 1.0 } else { -1.0 };
            }
            _ => {
                // Around the bottom of the exponent range (scale byte 0 and clamping).
                let e = -(120 + (next() % 30) as i32);
                blk.iter_mut().for_each(|v| *v *= p2(e));
            }
        }
    });
    x
}

// ------------------------------------------------------------------------------------------------------------
// Operators.

/// `mx.quantize`.
pub struct MxQuantize;
/// `mx.dequantize`.
pub struct MxDequantize;

/// The dims of `mx.quantize` presets (see `QuantProblem::from_preset`).
pub const QUANT_DIMS: &[DimDecl] = &[
    DimDecl::required("R", 0, dims::MAX_ROWS, "rows"),
    DimDecl::required("K", 1, dims::MAX_COLS, "columns, a multiple of 32"),
    DimDecl::flag("fmt", "0 MXFP4, 1 MXFP8 (E4M3)"),
    DimDecl::flag("rule", "0 Floor, 1 Ceil scale rule"),
    DimDecl::flag("src", "0 f32, 1 bf16 input"),
    DimDecl::flag("edge", "1: edge-case blocks (default), 0: ordinary values"),
];

/// The dims of `mx.dequantize` presets (see `DequantProblem::from_preset`).
pub const DEQUANT_DIMS: &[DimDecl] = &[
    DimDecl::required("R", 0, dims::MAX_ROWS, "rows"),
    DimDecl::required("K", 1, dims::MAX_COLS, "columns, a multiple of 32"),
    DimDecl::flag("fmt", "0 MXFP4, 1 MXFP8 (E4M3)"),
    DimDecl::flag("out", "0 f32, 1 bf16 output"),
];

/// Input and output elements of an R x K (de)quantization.
fn mx_footprint(p: &Preset) -> f64 {
    2.0 * dims::size(p, "R", 0) * dims::size(p, "K", 0)
}

/// Dims `R` and `K` of a (de)quantization, `K` checked.
fn rows_and_k(op: &'static str, p: &Preset) -> Result<(usize, usize), OpError> {
    let rows = p.get("R")? as usize;
    let k = p.get("K")? as usize;
    check_k(op, "K", k)?;
    Ok((rows, k))
}

/// Optional dim `arg`: 0 f32 (the default), 1 bf16.
fn f32_or_bf16(op: &'static str, p: &Preset, arg: &str) -> Result<DType, OpError> {
    match p.get_or(arg, 0) {
        0 => Ok(DType::F32),
        1 => Ok(DType::Bf16),
        c => Err(OpError::BadInput { op, arg: arg.into(), why: format!("0 or 1, got {c}") }),
    }
}

struct QuantProblem {
    rows: usize,
    k: usize,
    fmt: MxFormat,
    rule: ScaleRule,
    src: DType,
    edge: bool,
}

impl QuantProblem {
    /// Dims `R`, `K`; optional `fmt` (0 fp4, 1 fp8), `rule` (0 Floor, 1 Ceil), `src` (0 f32, 1 bf16), `edge`
    /// (1: edge-case blocks, default; 0: ordinary values).
    fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let (rows, k) = rows_and_k(QOP, p)?;
        let src = f32_or_bf16(QOP, p, "src")?;
        Ok(QuantProblem {
            rows,
            k,
            fmt: format_of(QOP, p.get_or("fmt", 0))?,
            rule: rule_of(QOP, p.get_or("rule", 0))?,
            src,
            edge: p.get_or("edge", 1) == 1,
        })
    }
}

fn random_mx_dims(rng: &mut StdRng) -> (i64, i64) {
    const ROWS: [i64; 6] = [1, 15, 17, 63, 65, 130];
    let rows = if rng.random_bool(0.6) { ROWS[rng.random_range(0..ROWS.len())] } else { rng.random_range(1..=96) };
    let k = 32 * if rng.random_bool(0.6) { [1i64, 2, 3][rng.random_range(0..3)] } else { rng.random_range(1..=9) };
    (rows, k)
}

struct QuantInstance {
    pb: QuantProblem,
    x: HostTensor,
    vals: Vec<f32>,
}

impl Operator for MxQuantize {
    fn name(&self) -> &'static str {
        QOP
    }
    fn summary(&self) -> &'static str {
        "f32/bf16 -> MXFP4 or MXFP8 (E4M3) with E8M0 block scales, Floor or Ceil rule, bit-exact"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new(
                "MXFP8 ceil bf16 R4096 K7168",
                &[("R", 4096), ("K", 7168), ("fmt", 1), ("rule", 1), ("src", 1)],
            ),
            Preset::new("MXFP4 floor f32 R6144 K3584", &[("R", 6144), ("K", 3584), ("fmt", 0), ("rule", 0)]),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        let (rows, k) = random_mx_dims(rng);
        let (fmt, rule, src) = (rng.random_range(0..2i64), rng.random_range(0..2i64), rng.random_range(0..2i64));
        Preset::new(
            &format!("R{rows} K{k} fmt{fmt} rule{rule} src{src}"),
            &[("R", rows), ("K", k), ("fmt", fmt), ("rule", rule), ("src", src)],
        )
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(QOP, QUANT_DIMS, p)?;
        dims::bound(QOP, p, mx_footprint(p))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = QuantProblem::from_preset(p)?;
        let mut vals = test_values(pb.rows, pb.k, seed, pb.edge);
        if pb.src == DType::Bf16 {
            vals.par_iter_mut().for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
        }
        let x = data::tensor(pb.src, &[pb.rows, pb.k], &vals);
        Ok(Box::new(QuantInstance { pb, x, vals }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = QuantProblem::from_preset(p)?;
        Ok(vec![build_quantize(&QuantSpec { fmt: pb.fmt, rule: pb.rule, src: pb.src }, knobs)?])
    }
}

/// Exact byte comparison as a check report (the first differing index and both bytes on failure).
pub fn compare_bytes(name: &str, got: &[u8], want: &[u8], scope: String) -> CheckReport {
    let bad = if got.len() != want.len() {
        Some(format!("{name}: {} bytes, expected {}", got.len(), want.len()))
    } else {
        got.iter().zip(want).position(|(a, b)| a != b).map(|i| {
            let n = got.iter().zip(want).filter(|(a, b)| a != b).count();
            format!("{name}: {n} bytes differ; first at {i}: got {:#04x}, want {:#04x}", got[i], want[i])
        })
    };
    match bad {
        None => CheckReport { max_rel_err: 0.0, passed: true, scope, detail: String::new() },
        Some(d) => CheckReport { max_rel_err: f64::INFINITY, passed: false, scope, detail: d },
    }
}

/// Exact f32 comparison: equal bits (signed zeros included); any NaN matches any NaN.
pub fn compare_f32_bits(name: &str, got: &[f32], want: &[f32], scope: String) -> CheckReport {
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let bad = if got.len() != want.len() {
        Some(format!("{name}: {} values, expected {}", got.len(), want.len()))
    } else {
        got.iter().zip(want).position(|(a, b)| !same(*a, *b)).map(|i| {
            let n = got.iter().zip(want).filter(|(a, b)| !same(**a, **b)).count();
            format!(
                "{name}: {n} values differ; first at {i}: got {:e} ({:#010x}), want {:e} ({:#010x})",
                got[i],
                got[i].to_bits(),
                want[i],
                want[i].to_bits()
            )
        })
    };
    match bad {
        None => {
            let g: Vec<f64> = got.iter().map(|v| *v as f64).collect();
            let w: Vec<f64> = want.iter().map(|v| *v as f64).collect();
            compare(name, &g, &w, Tolerance::Exact, scope)
        }
        Some(d) => CheckReport { max_rel_err: f64::INFINITY, passed: false, scope, detail: d },
    }
}

impl Instance for QuantInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        format!(
            "quantize R={} K={} {} {} src={}{}",
            pb.rows,
            pb.k,
            format_name(pb.fmt),
            rule_name(pb.rule),
            pb.src,
            if pb.edge { " edge-blocks" } else { "" }
        )
    }
    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        quantize_plan(&self.x, self.pb.fmt, self.pb.rule, knobs)
    }
    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let pb = &self.pb;
        let want = rmx::quantize(&self.vals, pb.rows, pb.k, pb.fmt, pb.rule)
            .map_err(|e| OpError::Internal(format!("reference quantize: {e}")))?;
        let scope = format!("all {} blocks", pb.rows * pb.k / BLOCK);
        let rs = compare_bytes("s", &out.get("s")?.data, &want.s, scope.clone());
        let rq = compare_bytes("q", &out.get("q")?.data, &want.q, scope);
        Ok(rs.merge(rq))
    }
    fn work(&self) -> Work {
        let pb = &self.pb;
        let n = (pb.rows * pb.k) as f64;
        Work {
            flops: 0.0,
            bytes: n * pb.src.size_bytes() as f64 + pb.fmt.row_bytes(pb.rows * pb.k) as f64 + n / BLOCK as f64,
        }
    }
    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({"R": pb.rows, "K": pb.k, "fmt": format_name(pb.fmt), "rule": rule_name(pb.rule),
            "src": pb.src.name()})
    }
}

struct DequantProblem {
    rows: usize,
    k: usize,
    fmt: MxFormat,
    out: DType,
}

impl DequantProblem {
    /// Dims `R`, `K`; optional `fmt` (0 fp4, 1 fp8) and `out` (0 f32, 1 bf16).
    fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let (rows, k) = rows_and_k(DOP, p)?;
        let out = f32_or_bf16(DOP, p, "out")?;
        Ok(DequantProblem { rows, k, fmt: format_of(DOP, p.get_or("fmt", 0))?, out })
    }
}

struct DequantInstance {
    pb: DequantProblem,
    t: rmx::MxTensor,
}

/// Random MX bytes for dequantization tests: uniform element bytes (every fp4 code, every e4m3 code including
/// both NaNs and signed zeros) and scale bytes mostly near 127 with 0, 1, 128, 254 and 255 (NaN) mixed in.
pub fn random_mx(rows: usize, k: usize, fmt: MxFormat, seed: u64) -> rmx::MxTensor {
    let nq = rows * fmt.row_bytes(k);
    let ns = rows * k / BLOCK;
    let q: Vec<u8> = (0..nq).into_par_iter().map(|i| mix(seed ^ mix(i as u64)) as u8).collect();
    let s: Vec<u8> = (0..ns)
        .into_par_iter()
        .map(|i| {
            let h = mix(seed ^ 0x5ca1e ^ mix(i as u64));
            match h % 16 {
                0 => 255,
                1 => 0,
                2 => 254,
                3 => [1u8, 128, 126, 253][((h >> 8) % 4) as usize],
                _ => 100 + ((h >> 8) % 50) as u8,
            }
        })
        .collect();
    rmx::MxTensor { rows, k, q, s, format: fmt }
}

impl Operator for MxDequantize {
    fn name(&self) -> &'static str {
        DOP
    }
    fn summary(&self) -> &'static str {
        "MXFP4 or MXFP8 (E4M3) with E8M0 block scales -> f32 or bf16, bit-exact (scale 255: NaN block)"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("MXFP4 R6144 K3584 -> bf16", &[("R", 6144), ("K", 3584), ("fmt", 0), ("out", 1)]),
            Preset::new("MXFP8 R4096 K7168 -> f32", &[("R", 4096), ("K", 7168), ("fmt", 1), ("out", 0)]),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        let (rows, k) = random_mx_dims(rng);
        let (fmt, out) = (rng.random_range(0..2i64), rng.random_range(0..2i64));
        Preset::new(&format!("R{rows} K{k} fmt{fmt} out{out}"), &[("R", rows), ("K", k), ("fmt", fmt), ("out", out)])
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(DOP, DEQUANT_DIMS, p)?;
        dims::bound(DOP, p, mx_footprint(p))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = DequantProblem::from_preset(p)?;
        let t = random_mx(pb.rows, pb.k, pb.fmt, seed);
        Ok(Box::new(DequantInstance { pb, t }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = DequantProblem::from_preset(p)?;
        Ok(vec![build_dequantize(&DequantSpec { fmt: pb.fmt, out: pb.out }, knobs)?])
    }
}

impl Instance for DequantInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        format!("dequantize R={} K={} {} -> {}", pb.rows, pb.k, format_name(pb.fmt), pb.out)
    }
    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        let pb = &self.pb;
        dequantize_plan(&self.t.q, &self.t.s, pb.rows, pb.k, pb.fmt, pb.out, knobs)
    }
    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let mut want = rmx::dequantize(&self.t).map_err(|e| OpError::Internal(format!("reference dequantize: {e}")))?;
        if self.pb.out == DType::Bf16 {
            want.par_iter_mut().for_each(|v| *v = rmx::bf16_round(*v));
        }
        let got = out.get("y")?.to_f32_vec();
        Ok(compare_f32_bits("y", &got, &want, format!("all {} elements", want.len())))
    }
    fn work(&self) -> Work {
        let pb = &self.pb;
        let n = (pb.rows * pb.k) as f64;
        Work {
            flops: 0.0,
            bytes: pb.fmt.row_bytes(pb.rows * pb.k) as f64 + n / BLOCK as f64 + n * pb.out.size_bytes() as f64,
        }
    }
    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({"R": pb.rows, "K": pb.k, "fmt": format_name(pb.fmt), "out": pb.out.name()})
    }
}
