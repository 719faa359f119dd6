//! One small kernel per primitive, with inputs and a check against a plain Rust computation. The same case
//! runs on the CPU interpreter (`primitives.rs`), through NVRTC + ptxas (`primitives.rs`) and, with
//! `K3K_GPU=1`, on a GPU (`gpu_primitives.rs`). Checks allow the few ulps by which GPU math functions and
//! fused multiply-adds differ from the interpreter; orders of summation are part of the semantics only
//! where the primitive says so.
#![allow(dead_code)]

use super::{Rng, close};
use k3k_ir::*;

/// Checks the tensors after a run (panics on a mismatch).
pub type Check = Box<dyn Fn(&[HostTensor])>;

/// A kernel with its arguments and what its outputs must be.
pub struct Case {
    pub name: &'static str,
    pub kernel: Kernel,
    /// All tensor arguments in kernel order (outputs poisoned or zeroed as the kernel expects).
    pub tensors: Vec<HostTensor>,
    pub scalars: Vec<(&'static str, SymValue)>,
    /// Checks the tensors after the run.
    pub check: Check,
}

impl Case {
    /// A case without scalar arguments.
    fn new(
        name: &'static str,
        kernel: Kernel,
        tensors: Vec<HostTensor>,
        check: impl Fn(&[HostTensor]) + 'static,
    ) -> Case {
        Case { name, kernel, tensors, scalars: vec![], check: Box::new(check) }
    }

    /// The same case with these scalar arguments.
    fn with_scalars(self, scalars: Vec<(&'static str, SymValue)>) -> Case {
        Case { scalars, ..self }
    }
}

/// A product case with its `mma.sync` loads addressed from per-thread origins ([`Kernel::mma_origins`]): the
/// GPU must give what the per-load form gives.
fn with_origins(c: Case) -> Case {
    let mut kernel = c.kernel;
    kernel.mma_origins = true;
    kernel.name.push_str("_oa");
    let name: &'static str = Box::leak(format!("{}_origins", c.name).into_boxed_str());
    Case { name, kernel, ..c }
}

/// [`mma_ss_bf16`] addressed from origins.
pub fn mma_ss_bf16_origins() -> Case {
    with_origins(mma_ss_bf16())
}
/// [`mma_ss_f16_transposed_a`] addressed from origins.
pub fn mma_ss_f16_transposed_a_origins() -> Case {
    with_origins(mma_ss_f16_transposed_a())
}
/// [`mma_rs`] addressed from origins.
pub fn mma_rs_origins() -> Case {
    with_origins(mma_rs())
}
/// [`mma_banded`] addressed from origins.
pub fn mma_banded_origins() -> Case {
    with_origins(mma_banded())
}

/// Every case, for the GPU run.
pub fn all() -> Vec<Case> {
    vec![
        map_f32(),
        map_bf16(),
        map_i32(),
        unary_bits(),
        shared_roundtrip(),
        vectors(),
        reduce_rows(),
        mma_ss_bf16(),
        mma_ss_f16_transposed_a(),
        mma_rs(),
        mma_ss_bf16_origins(),
        mma_ss_f16_transposed_a_origins(),
        mma_rs_origins(),
        mma_banded_origins(),
        copy_async_vecs(),
        copy_async_in_bounds_32(),
        copy_async_in_bounds_64(),
        copy_async_in_bounds_128(),
        threads_divergent(),
        shared_scatter_transpose(),
        histogram_atomics(),
        atomic_ops(),
        arrays(),
        scan_rows(),
        scan_wide(),
        scalar_store_conversions(),
        byte_formats(),
        scan_replicated(),
        mma_banded(),
        warp_shuffles(),
        dequant_fp4(),
        dequant_fp4_stream(),
        mma_async_rs_bmn(),
        mma_async_ss_then_rs(),
        mma_async_replicated_and_banded(),
        first_warpgroups_share_p(),
        last_block_reduction(),
        dequant_fp4_stream_prefetch(),
        fp4_gemv(),
        fp4_gemv_staged(),
        exp2_ftz(),
        tma_mbarrier(),
        tma_multicast_cluster(),
        wide_access(),
        wide_tile_stores(),
        shared_pairs_swizzle(),
        mma_ss_e4m3(),
    ]
}

/// The value of element `col % 32` of an fp4 block (`words` from the block's first word on, in the packed or
/// natural layout) at scale byte `s`: `e2m1 * 2^(s-127)`, NaN at 255.
fn fp4_value(words: &[u32], col: usize, packed: bool, s: u8) -> f64 {
    const E2M1: [f64; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];
    let (w, p) = fp4::slot(col % 32, packed);
    let nib = fp4::code(words[w], p, packed) as usize;
    if s == 255 { f64::NAN } else { E2M1[nib] * 2f64.powi(s as i32 - 127) }
}

/// Output `out` (`[n, r, c]`) against `want` bit for bit, any NaN for a NaN; a mismatch names its `what` index
/// (variant or slice), row and column.
fn bitwise_f32(out: usize, want: Vec<f32>, r: usize, c: usize, what: &'static str) -> Check {
    Box::new(move |ts| {
        let got = ts[out].to_f32_vec();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
            assert!(same, "{what} {} row {} col {}: got {g:e}, want {w:e}", i / (r * c), (i / c) % r, i % c);
        }
    })
}

/// A tensor argument of fixed shape `[rows, cols]`.
fn matrix(b: &mut KernelBuilder, name: &str, dtype: DType, [rows, cols]: [usize; 2], access: Access) -> TensorId {
    b.tensor(name, dtype, &[Expr::Int(rows as i64), Expr::Int(cols as i64)], access)
}

fn poisoned(dtype: DType, shape: &[usize]) -> HostTensor {
    let mut t = HostTensor::zeros(dtype, shape);
    t.poison();
    t
}

/// `y[r, c] = 2 x[r, c] + r - c/2 + alpha` over a ragged [40, 24] matrix in 32x32 tiles on a replicated
/// [2, 1] warp grid (4 warps), with masked loads and pair stores.
pub fn map_f32() -> Case {
    let (m, n) = (40usize, 24usize);
    let mut b = KernelBuilder::new("p_map_f32", 128);
    let md = b.dim("M");
    let nd = b.dim("N");
    let alpha = b.float_arg("alpha");
    let x = b.tensor("x", DType::F32, &[md.clone(), nd.clone()], Access::Read);
    let y = b.tensor("y", DType::F32, &[md.clone(), nd.clone()], Access::Write);
    let t = b.tile("t", DType::F32, 32, 32, [2, 1]);
    b.grid(md.ceil_div(32i64), 1i64, 1i64);
    let r0 = b.let_("r0", Expr::block_idx(0) * 32i64);
    let v = |tensor| view(tensor, &r0 * nd.clone(), nd.clone(), md.clone() - r0.clone(), nd.clone(), 2);
    b.load(t, Place::Global(v(x)));
    b.map(t, Expr::Elem(t) * 2.0 + Expr::RowIdx.to_float() - Expr::ColIdx.to_float() * 0.5 + alpha);
    b.store(t, Place::Global(v(y)));
    let xs = Rng::new(1).vals(DType::F32, m * n, -4.0, 4.0);
    Case::new(
        "map_f32",
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::F32, &[m, n], &xs), poisoned(DType::F32, &[m, n])],
        move |ts| {
            let want: Vec<f32> = (0..m * n)
                .map(|i| {
                    let (r, c) = (i / n, i % n);
                    xs[i] * 2.0 + (r % 32) as f32 - c as f32 * 0.5 + 0.25
                })
                .collect();
            close("y", &ts[1].to_f32_vec(), &want, 1e-6);
        },
    )
    .with_scalars(vec![("alpha", SymValue::Float(0.25))])
}

/// `y = exp2_ftz(x)` over a ragged [40, 24] f32 matrix: arguments from -150 to 20 (subnormal results must be
/// exactly +0, normal ones within the GPU's ex2 approximation error of 2^x) plus -inf, +inf and NaN.
pub fn exp2_ftz() -> Case {
    let (m, n) = (40usize, 24usize);
    let mut b = KernelBuilder::new("p_exp2_ftz", 128);
    let md = b.dim("M");
    let nd = b.dim("N");
    let x = b.tensor("x", DType::F32, &[md.clone(), nd.clone()], Access::Read);
    let y = b.tensor("y", DType::F32, &[md.clone(), nd.clone()], Access::Write);
    let t = b.tile("t", DType::F32, 32, 32, [2, 1]);
    b.grid(md.ceil_div(32i64), 1i64, 1i64);
    let r0 = b.let_("r0", Expr::block_idx(0) * 32i64);
    let v = |tensor| view(tensor, &r0 * nd.clone(), nd.clone(), md.clone() - r0.clone(), nd.clone(), 2);
    b.load(t, Place::Global(v(x)));
    b.map(t, Expr::Elem(t).exp2_ftz());
    b.store(t, Place::Global(v(y)));
    let mut xs = Rng::new(7).vals(DType::F32, m * n, -150.0, 20.0);
    // Around the subnormal boundary, exact powers, and the specials.
    let edge =
        [-125.5f32, -126.01, -125.99, -127.0, -149.0, -0.0, 0.0, 1.0, -1.0, 0.5, f32::NEG_INFINITY, f32::INFINITY];
    xs[..edge.len()].copy_from_slice(&edge);
    xs[edge.len()] = f32::NAN;
    Case::new(
        "exp2_ftz",
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::F32, &[m, n], &xs), poisoned(DType::F32, &[m, n])],
        move |ts| {
            let got = ts[1].to_f32_vec();
            for (i, (&g, &x)) in got.iter().zip(&xs).enumerate() {
                let w = (x as f64).exp2();
                let ok = if x.is_nan() {
                    g.is_nan()
                } else if w < f32::MIN_POSITIVE as f64 {
                    g == 0.0 && g.is_sign_positive()
                } else if w.is_infinite() || w > f32::MAX as f64 {
                    g == f32::INFINITY
                } else {
                    ((g as f64 - w) / w).abs() <= 1e-6
                };
                assert!(ok, "y[{i}]: exp2_ftz({x}) = {g}, want {w}");
            }
        },
    )
}

/// A bf16 register tile: `y = silu(x)` rounded to bf16, loaded and stored as bf16 pairs.
pub fn map_bf16() -> Case {
    let (m, n) = (32usize, 48usize);
    let mut b = KernelBuilder::new("p_map_bf16", 64);
    let x = matrix(&mut b, "x", DType::Bf16, [m, n], Access::Read);
    let y = matrix(&mut b, "y", DType::Bf16, [m, n], Access::Write);
    let t = b.tile("t", DType::Bf16, 32, 48, [2, 1]);
    let v = |tensor| view(tensor, 0i64, n as i64, m as i64, n as i64, 8);
    b.load(t, Place::Global(v(x)));
    b.map(t, Expr::Elem(t).silu());
    let vs = |tensor| view(tensor, 0i64, n as i64, m as i64, n as i64, 2);
    b.store(t, Place::Global(vs(y)));
    let xs = Rng::new(2).vals(DType::Bf16, m * n, -6.0, 6.0);
    Case::new(
        "map_bf16",
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::Bf16, &[m, n], &xs), poisoned(DType::Bf16, &[m, n])],
        move |ts| {
            let want: Vec<f32> = xs.iter().map(|&v| half::bf16::from_f32(v / (1.0 + (-v).exp())).to_f32()).collect();
            // One bf16 ulp: the GPU's expf may round the other way at a bf16 tie.
            close("y", &ts[1].to_f32_vec(), &want, 8e-3);
        },
    )
}

/// An i32 register tile: integer arithmetic and bit operations, exact.
pub fn map_i32() -> Case {
    let (m, n) = (16usize, 16usize);
    let mut b = KernelBuilder::new("p_map_i32", 32);
    let x = matrix(&mut b, "x", DType::I32, [m, n], Access::Read);
    let y = matrix(&mut b, "y", DType::I32, [m, n], Access::Write);
    let t = b.tile("t", DType::I32, 16, 16, [1, 1]);
    let v = |tensor, vec| view(tensor, 0i64, n as i64, m as i64, n as i64, vec);
    b.load(t, Place::Global(v(x, 4)));
    let e = Expr::Elem(t);
    b.map(t, ((&e * 3i64 + Expr::RowIdx).bitxor(Expr::ColIdx)).shr(1i64) - (&e % 7i64) + e.abs().min(100i64));
    b.store(t, Place::Global(v(y, 2)));
    let xs: Vec<i64> = (0..m * n).map(|_| Rng::new(3).int(-100_000, 100_000)).collect();
    Case::new(
        "map_i32",
        b.finish().unwrap(),
        vec![HostTensor::from_i64(DType::I32, &[m, n], &xs), poisoned(DType::I32, &[m, n])],
        move |ts| {
            for (i, &e) in xs.iter().enumerate() {
                let (r, c) = ((i / n) as i64, (i % n) as i64);
                let want = (((e * 3 + r) ^ c) >> 1) - (e % 7) + e.abs().min(100);
                assert_eq!(ts[1].get_i64(i), want, "y[{i}]");
            }
        },
    )
}

/// `bits`, `from_bits`, `trunc`, `round` in a map (exact).
pub fn unary_bits() -> Case {
    let n = 16usize;
    let mut b = KernelBuilder::new("p_unary_bits", 32);
    let x = matrix(&mut b, "x", DType::F32, [n, n], Access::Read);
    let yf = b.tensor("yf", DType::F32, &[Expr::Int(3), Expr::Int(n as i64), Expr::Int(n as i64)], Access::Write);
    let yi = matrix(&mut b, "yi", DType::I32, [n, n], Access::Write);
    let t = b.tile("t", DType::F32, 16, 16, [1, 1]);
    let u = b.tile("u", DType::F32, 16, 16, [1, 1]);
    let e = b.tile("e", DType::I32, 16, 16, [1, 1]);
    let nn = (n * n) as i64;
    let v = |tensor, off: i64| view(tensor, off, n as i64, n as i64, n as i64, 1);
    b.load(t, Place::Global(v(x, 0)));
    // Negate through the sign bit.
    b.map(u, Expr::Elem(t).bits().bitxor(0x8000_0000i64).from_bits());
    b.store(u, Place::Global(v(yf, 0)));
    b.map(u, (Expr::Elem(t) * 3.5).round());
    b.store(u, Place::Global(v(yf, nn)));
    b.map(u, (Expr::Elem(t) * 3.5).trunc());
    b.store(u, Place::Global(v(yf, 2 * nn)));
    // The biased exponent.
    b.map(e, Expr::Elem(t).bits().shr(23i64).bitand(0xffi64));
    b.store(e, Place::Global(v(yi, 0)));
    let k = b.finish().unwrap();
    let mut xs = Rng::new(4).vals(DType::F32, n * n, -100.0, 100.0);
    // Ties of x * 3.5 (x = k / 7 * 2 gives k.0 or k.5 exactly for small k) and special values.
    xs[0] = 1.0 / 7.0;
    xs[1] = 3.0 / 7.0;
    xs[2] = -5.0 / 7.0;
    xs[3] = 0.0;
    xs[4] = -0.0;
    xs[5] = 1e-40;
    xs[6] = f32::INFINITY;
    Case::new(
        "unary_bits",
        k,
        vec![
            HostTensor::from_f32(DType::F32, &[n, n], &xs),
            poisoned(DType::F32, &[3, n, n]),
            poisoned(DType::I32, &[n, n]),
        ],
        move |ts| {
            let yf = ts[1].to_f32_vec();
            for (i, &x) in xs.iter().enumerate() {
                assert_eq!(yf[i].to_bits(), (-x).to_bits(), "neg via bits at {i}");
                assert_eq!(yf[n * n + i].to_bits(), (x * 3.5).round_ties_even().to_bits(), "round at {i} ({x})");
                assert_eq!(yf[2 * n * n + i].to_bits(), (x * 3.5).trunc().to_bits(), "trunc at {i}");
                assert_eq!(ts[2].get_i64(i), ((x.to_bits() >> 23) & 0xff) as i64, "exponent at {i}");
            }
        },
    )
}

/// Register tile -> shared window -> register tile: a bf16 swizzled buffer at a window offset, and an f32
/// plain buffer; `y1 = bf16(x)`, `y2 = x`.
pub fn shared_roundtrip() -> Case {
    let n = 32usize;
    let mut b = KernelBuilder::new("p_shared_roundtrip", 128);
    let x = matrix(&mut b, "x", DType::F32, [n, n], Access::Read);
    let y1 = matrix(&mut b, "y1", DType::F32, [n, n], Access::Write);
    let y2 = matrix(&mut b, "y2", DType::F32, [n, n], Access::Write);
    let sb = b.shared("sb", DType::Bf16, 64, 64, 2, Swizzle::Xor16B);
    let sf = b.shared("sf", DType::F32, 32, 40, 1, Swizzle::None);
    let t = b.tile("t", DType::F32, 32, 32, [2, 2]);
    let u = b.tile("u", DType::F32, 32, 32, [1, 1]);
    let v = |tensor| view(tensor, 0i64, n as i64, n as i64, n as i64, 2);
    b.load(t, Place::Global(v(x)));
    let win = b.window(sb, 1i64, 16, 24, 32, 32);
    b.store(t, Place::Shared(win.clone()));
    let winf = b.window(sf, 0i64, 0, 8, 32, 32);
    b.store(t, Place::Shared(winf.clone()));
    b.barrier();
    b.load(u, Place::Shared(win));
    b.store(u, Place::Global(v(y1)));
    b.load(u, Place::Shared(winf));
    b.store(u, Place::Global(v(y2)));
    let xs = Rng::new(5).vals(DType::F32, n * n, -3.0, 3.0);
    Case::new(
        "shared_roundtrip",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::F32, &[n, n], &xs),
            poisoned(DType::F32, &[n, n]),
            poisoned(DType::F32, &[n, n]),
        ],
        move |ts| {
            let want: Vec<f32> = xs.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect();
            close("y1", &ts[1].to_f32_vec(), &want, 0.0);
            close("y2", &ts[2].to_f32_vec(), &xs, 0.0);
        },
    )
}

/// Row vectors: `v = 2 p + r` (vec_map), `y = x * v` (map with RowVal), `q = v` (store_vec), for 40 of 64 rows.
pub fn vectors() -> Case {
    let (m, n) = (40usize, 16usize);
    let mut b = KernelBuilder::new("p_vectors", 128);
    let x = matrix(&mut b, "x", DType::F32, [m, n], Access::Read);
    let p = b.tensor("p", DType::Bf16, &[Expr::Int(m as i64)], Access::Read);
    let y = matrix(&mut b, "y", DType::F32, [m, n], Access::Write);
    let q = b.tensor("q", DType::F32, &[Expr::Int(m as i64)], Access::Write);
    let t = b.tile("t", DType::F32, 64, 16, [2, 2]);
    let pv = b.vec("pv", 64, [2, 2]);
    let v = |tensor| view(tensor, 0i64, n as i64, m as i64, n as i64, 1);
    b.load(t, Place::Global(v(x)));
    b.load_vec(pv, vec_view(p, 0i64, 1i64, m as i64));
    b.vec_map(pv, Expr::RowVal(pv) * 2.0 + Expr::RowIdx.to_float());
    b.map(t, Expr::Elem(t) * Expr::RowVal(pv));
    b.store(t, Place::Global(v(y)));
    b.store_vec(pv, vec_view(q, 0i64, 1i64, m as i64));
    let mut rng = Rng::new(6);
    let xs = rng.vals(DType::F32, m * n, -2.0, 2.0);
    let ps = rng.vals(DType::Bf16, m, -2.0, 2.0);
    let (xs2, ps2) = (xs.clone(), ps.clone());
    Case::new(
        "vectors",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::F32, &[m, n], &xs),
            HostTensor::from_f32(DType::Bf16, &[m], &ps),
            poisoned(DType::F32, &[m, n]),
            poisoned(DType::F32, &[m]),
        ],
        move |ts| {
            let vs: Vec<f32> = (0..m).map(|r| ps2[r] * 2.0 + r as f32).collect();
            let want: Vec<f32> = (0..m * n).map(|i| xs2[i] * vs[i / n]).collect();
            close("y", &ts[2].to_f32_vec(), &want, 1e-6);
            close("q", &ts[3].to_f32_vec(), &vs, 0.0);
        },
    )
}

/// Row sums, maxima and minima, with and without accumulation, over a [64, 32] tile on [4, 1] warps.
pub fn reduce_rows() -> Case {
    let (m, n) = (64usize, 32usize);
    let mut b = KernelBuilder::new("p_reduce_rows", 128);
    let x = matrix(&mut b, "x", DType::F32, [m, n], Access::Read);
    let y = b.tensor("y", DType::F32, &[Expr::Int(4), Expr::Int(m as i64)], Access::Write);
    let t = b.tile("t", DType::F32, 64, 32, [4, 1]);
    let vs = b.vec("vs", 64, [4, 1]);
    let vm = b.vec("vm", 64, [4, 1]);
    b.load(t, Place::Global(view(x, 0i64, n as i64, m as i64, n as i64, 2)));
    b.reduce(vs, t, ReduceOp::Sum, false);
    b.store_vec(vs, vec_view(y, 0i64, 1i64, m as i64));
    b.reduce(vm, t, ReduceOp::Max, false);
    b.store_vec(vm, vec_view(y, m as i64, 1i64, m as i64));
    b.reduce(vm, t, ReduceOp::Min, false);
    b.store_vec(vm, vec_view(y, 2 * m as i64, 1i64, m as i64));
    // Accumulate: sum of the row sum and the tile's (squared) row sum.
    b.map(t, Expr::Elem(t) * Expr::Elem(t));
    b.reduce(vs, t, ReduceOp::Sum, true);
    b.store_vec(vs, vec_view(y, 3 * m as i64, 1i64, m as i64));
    let xs = Rng::new(7).vals(DType::F32, m * n, -5.0, 5.0);
    Case::new(
        "reduce_rows",
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::F32, &[m, n], &xs), poisoned(DType::F32, &[4, m])],
        move |ts| {
            let row = |r: usize| &xs[r * n..(r + 1) * n];
            let sum: Vec<f32> = (0..m).map(|r| row(r).iter().sum()).collect();
            let max: Vec<f32> = (0..m).map(|r| row(r).iter().copied().fold(f32::MIN, f32::max)).collect();
            let min: Vec<f32> = (0..m).map(|r| row(r).iter().copied().fold(f32::MAX, f32::min)).collect();
            let acc: Vec<f32> = (0..m).map(|r| sum[r] + row(r).iter().map(|v| v * v).sum::<f32>()).collect();
            let y = ts[1].to_f32_vec();
            close("sum", &y[..m], &sum, 1e-5);
            close("max", &y[m..2 * m], &max, 0.0);
            close("min", &y[2 * m..3 * m], &min, 0.0);
            close("acc", &y[3 * m..], &acc, 1e-5);
        },
    )
}

/// `c = a @ b^T` with 16-bit operands loaded by the GPU with `cp.async` into shared tiles.
fn gemm_check(m: usize, n: usize, kd: usize, a: &[f32], a_km: bool, bm: &[f32], b_nk: bool) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            for p in 0..kd {
                let av = if a_km { a[p * m + i] } else { a[i * kd + p] };
                let bv = if b_nk { bm[j * kd + p] } else { bm[p * n + j] };
                s += av as f64 * bv as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

/// A case of product kernel `kernel`: its `inputs`, then its output c (f32 [m, n], poisoned), within 1e-4 of
/// `want`.
fn product_case(
    name: &'static str,
    kernel: Kernel,
    mut inputs: Vec<HostTensor>,
    (m, n): (usize, usize),
    want: Vec<f32>,
) -> Case {
    let out = inputs.len();
    inputs.push(poisoned(DType::F32, &[m, n]));
    Case::new(name, kernel, inputs, move |ts| close("c", &ts[out].to_f32_vec(), &want, 1e-4))
}

/// The inputs and check of a GEMM kernel `c[m, n] = a w` (arguments a, w, c): a and w random `dtype` in
/// [-1, 1) from `seed`, a stored [K, M] when `a_km` (else [M, K]), w stored [N, K] when `w_nk` (else [K, N]); c
/// (f32, poisoned) within 1e-4 of [`gemm_check`].
fn gemm_case(
    name: &'static str,
    kernel: Kernel,
    seed: u64,
    dtype: DType,
    (m, n, kd): (usize, usize, usize),
    a_km: bool,
    w_nk: bool,
) -> Case {
    let mut rng = Rng::new(seed);
    let av = rng.vals(dtype, m * kd, -1.0, 1.0);
    let wv = rng.vals(dtype, n * kd, -1.0, 1.0);
    let want = gemm_check(m, n, kd, &av, a_km, &wv, w_nk);
    let a_shape = if a_km { [kd, m] } else { [m, kd] };
    let w_shape = if w_nk { [n, kd] } else { [kd, n] };
    Case::new(
        name,
        kernel,
        vec![
            HostTensor::from_f32(dtype, &a_shape, &av),
            HostTensor::from_f32(dtype, &w_shape, &wv),
            poisoned(DType::F32, &[m, n]),
        ],
        move |ts| close("c", &ts[2].to_f32_vec(), &want, 1e-4),
    )
}

/// bf16 `mma_ss`: A [64, 64] in a swizzled shared tile, B stored [N, K] (transposed operand), acc [64, 64] on
/// [2, 2] warps; inputs arrive through `cp.async` with 16-byte accesses.
pub fn mma_ss_bf16() -> Case {
    let (m, n, kd) = (64usize, 64usize, 64usize);
    let mut b = KernelBuilder::new("p_mma_ss_bf16", 128);
    let a = matrix(&mut b, "a", DType::Bf16, [m, kd], Access::Read);
    let w = matrix(&mut b, "w", DType::Bf16, [n, kd], Access::Read);
    let c = matrix(&mut b, "c", DType::F32, [m, n], Access::Write);
    let sa = b.shared("sa", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
    let sw = b.shared("sw", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
    let acc = b.tile("acc", DType::F32, 64, 64, [2, 2]);
    let da = b.slot(sa, 0i64);
    b.copy_async(da, view(a, 0i64, kd as i64, m as i64, kd as i64, 8));
    let dw = b.slot(sw, 0i64);
    b.copy_async(dw, view(w, 0i64, kd as i64, n as i64, kd as i64, 8));
    b.commit();
    b.wait(0);
    b.barrier();
    b.map(acc, 0.0);
    let (oa, ob) = (
        Operand::Shared { src: b.slot(sa, 0i64), transpose: false },
        Operand::Shared { src: b.slot(sw, 0i64), transpose: true },
    );
    b.mma(acc, oa, ob);
    b.store(acc, Place::Global(view(c, 0i64, n as i64, m as i64, n as i64, 2)));
    gemm_case("mma_ss_bf16", b.finish().unwrap(), 8, DType::Bf16, (m, n, kd), false, true)
}

/// f16 `mma_ss` with a transposed A (stored [K, M]) and a plain B (stored [K, N]), K = 32 in a window of a
/// wider buffer, acc [32, 64] on [2, 2] warps; both operands staged through register tiles and `store`.
pub fn mma_ss_f16_transposed_a() -> Case {
    let (m, n, kd) = (32usize, 64usize, 32usize);
    let mut b = KernelBuilder::new("p_mma_ss_f16_ta", 128);
    let a = matrix(&mut b, "a", DType::F16, [kd, m], Access::Read);
    let w = matrix(&mut b, "w", DType::F16, [kd, n], Access::Read);
    let c = matrix(&mut b, "c", DType::F32, [m, n], Access::Write);
    let sa = b.shared("sa", DType::F16, 32, 48, 1, Swizzle::None);
    let sw = b.shared("sw", DType::F16, 32, 64, 1, Swizzle::Xor16B);
    let ta = b.tile("ta", DType::F16, 32, 32, [2, 1]);
    let tw = b.tile("tw", DType::F16, 32, 64, [2, 2]);
    let acc = b.tile("acc", DType::F32, 32, 64, [2, 2]);
    b.load(ta, Place::Global(view(a, 0i64, m as i64, kd as i64, m as i64, 2)));
    let wa = b.window(sa, 0i64, 0, 16, 32, 32);
    b.store(ta, Place::Shared(wa.clone()));
    b.load(tw, Place::Global(view(w, 0i64, n as i64, kd as i64, n as i64, 2)));
    let ww = b.slot(sw, 0i64);
    b.store(tw, Place::Shared(ww.clone()));
    b.barrier();
    b.map(acc, 0.0);
    b.mma(acc, Operand::Shared { src: wa, transpose: true }, Operand::Shared { src: ww, transpose: false });
    b.store(acc, Place::Global(view(c, 0i64, n as i64, m as i64, n as i64, 2)));
    gemm_case("mma_ss_f16_transposed_a", b.finish().unwrap(), 9, DType::F16, (m, n, kd), true, false)
}

/// `mma_rs`: A is a bf16 register tile (computed by a map, as attention's P would be), B a shared tile
/// stored [N, K]; acc [64, 32] on [2, 2] warps, K = 48.
pub fn mma_rs() -> Case {
    let (m, n, kd) = (64usize, 32usize, 48usize);
    let mut b = KernelBuilder::new("p_mma_rs", 128);
    let a = matrix(&mut b, "a", DType::F32, [m, kd], Access::Read);
    let w = matrix(&mut b, "w", DType::Bf16, [n, kd], Access::Read);
    let c = matrix(&mut b, "c", DType::F32, [m, n], Access::Write);
    let sw = b.shared("sw", DType::Bf16, 32, 48, 1, Swizzle::Xor16B);
    let ta = b.tile("ta", DType::Bf16, 64, 48, [2, 1]);
    let acc = b.tile("acc", DType::F32, 64, 32, [2, 2]);
    let dw = b.slot(sw, 0i64);
    b.copy_async(dw.clone(), view(w, 0i64, kd as i64, n as i64, kd as i64, 8));
    b.commit();
    b.load(ta, Place::Global(view(a, 0i64, kd as i64, m as i64, kd as i64, 2)));
    b.map(ta, Expr::Elem(ta) * 0.5);
    b.wait(0);
    b.barrier();
    b.map(acc, 1.0);
    b.mma(acc, Operand::Reg(ta), Operand::Shared { src: dw, transpose: true });
    b.store(acc, Place::Global(view(c, 0i64, n as i64, m as i64, n as i64, 2)));
    let k = b.finish().unwrap();
    let mut rng = Rng::new(10);
    let av = rng.vals(DType::F32, m * kd, -1.0, 1.0);
    let wv = rng.vals(DType::Bf16, n * kd, -1.0, 1.0);
    let a_bf: Vec<f32> = av.iter().map(|&v| half::bf16::from_f32(v * 0.5).to_f32()).collect();
    let want: Vec<f32> = gemm_check(m, n, kd, &a_bf, false, &wv, true).iter().map(|v| v + 1.0).collect();
    product_case(
        "mma_rs",
        k,
        vec![HostTensor::from_f32(DType::F32, &[m, kd], &av), HostTensor::from_f32(DType::Bf16, &[n, kd], &wv)],
        (m, n),
        want,
    )
}

/// `cp.async` with 16-, 8-, 4- and 2-byte accesses (bf16 vec 8, 4, 2, 1) of a ragged [20, 24] view into
/// [32, 32] shared tiles: outside the view the tiles hold zeros.
pub fn copy_async_vecs() -> Case {
    let (m, n) = (20usize, 24usize);
    let mut b = KernelBuilder::new("p_copy_async", 64);
    let x = matrix(&mut b, "x", DType::Bf16, [m, n], Access::Read);
    let y = b.tensor("y", DType::F32, &[Expr::Int(4), Expr::Int(32), Expr::Int(32)], Access::Write);
    let s = b.shared("s", DType::Bf16, 32, 32, 4, Swizzle::Xor16B);
    let t = b.tile("t", DType::F32, 32, 32, [2, 1]);
    for (i, vec) in [8u32, 4, 2, 1].into_iter().enumerate() {
        let d = b.slot(s, i as i64);
        b.copy_async(d, view(x, 0i64, n as i64, m as i64, n as i64, vec));
    }
    b.commit();
    b.wait(0);
    b.barrier();
    for i in 0..4i64 {
        let d = b.slot(s, i);
        b.load(t, Place::Shared(d));
        b.store(t, Place::Global(view(y, i * 1024, 32i64, 32i64, 32i64, 2)));
    }
    let xs = Rng::new(11).vals(DType::Bf16, m * n, -3.0, 3.0);
    Case::new(
        "copy_async_vecs",
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::Bf16, &[m, n], &xs), poisoned(DType::F32, &[4, 32, 32])],
        move |ts| {
            let want: Vec<f32> =
                (0..1024).map(|i| if i / 32 < m && i % 32 < n { xs[(i / 32) * n + i % 32] } else { 0.0 }).collect();
            let y = ts[1].to_f32_vec();
            for s in 0..4 {
                close(&format!("tile {s}"), &y[s * 1024..(s + 1) * 1024], &want, 0.0);
            }
        },
    )
}

/// `cp.async` of windows lying fully inside their view (the unmasked, strength-reduced path of the prelude) into
/// a 64-column swizzled tile: with 32 threads the row step (4) is shorter than the swizzle period (8), with 64
/// and 128 it is a multiple of it. The second window starts at row 16, column 0 of the tile's lower half and
/// reads rows 5.. of x. Every element must land where a plain row-major copy puts it.
pub fn copy_async_in_bounds_32() -> Case {
    copy_async_in_bounds(32)
}
pub fn copy_async_in_bounds_64() -> Case {
    copy_async_in_bounds(64)
}
pub fn copy_async_in_bounds_128() -> Case {
    copy_async_in_bounds(128)
}
fn copy_async_in_bounds(threads: u32) -> Case {
    let (m, n) = (80usize, 64usize);
    let mut b = KernelBuilder::new(&format!("p_copy_async_in_bounds_{threads}"), threads);
    let x = matrix(&mut b, "x", DType::Bf16, [m, n], Access::Read);
    let y = b.tensor("y", DType::F32, &[Expr::Int(2), Expr::Int(64), Expr::Int(64)], Access::Write);
    let s = b.shared("s", DType::Bf16, 64, 64, 2, Swizzle::Xor16B);
    let t = b.tile("t", DType::F32, 64, 64, [1, 1]);
    let d0 = b.slot(s, 0i64);
    b.copy_async(d0, view(x, 0i64, n as i64, m as i64, n as i64, 8));
    let top = b.window(s, 1i64, 0, 0, 16, 64);
    let bottom = b.window(s, 1i64, 16, 0, 48, 64);
    b.copy_async(top, view(x, 0i64, n as i64, m as i64, n as i64, 8));
    b.copy_async(bottom, view(x, 5 * n as i64, n as i64, (m - 5) as i64, n as i64, 8));
    b.commit();
    b.wait(0);
    b.barrier();
    for i in 0..2i64 {
        let d = b.slot(s, i);
        b.load(t, Place::Shared(d));
        b.store(t, Place::Global(view(y, i * 4096, 64i64, 64i64, 64i64, 2)));
    }
    let xs = Rng::new(12 + threads as u64).vals(DType::Bf16, m * n, -3.0, 3.0);
    let name: &'static str = Box::leak(format!("copy_async_in_bounds_{threads}").into_boxed_str());
    Case::new(
        name,
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::Bf16, &[m, n], &xs), poisoned(DType::F32, &[2, 64, 64])],
        move |ts| {
            let y = ts[1].to_f32_vec();
            let first: Vec<f32> = xs[..4096].to_vec();
            let second: Vec<f32> =
                (0..4096).map(|i| if i / 64 < 16 { xs[i] } else { xs[(i / 64 - 16 + 5) * 64 + i % 64] }).collect();
            close("slot 0", &y[..4096], &first, 0.0);
            close("slot 1", &y[4096..], &second, 0.0);
        },
    )
}

/// A threads region with divergent control flow: per-thread loops of different lengths, branches on the
/// thread index, per-thread variables, scalar loads and stores.
pub fn threads_divergent() -> Case {
    let threads = 96u32;
    let blocks = 3usize;
    let mut b = KernelBuilder::new("p_threads", threads);
    let x = b.tensor("x", DType::I32, &[Expr::Int(8)], Access::Read);
    let y = matrix(&mut b, "y", DType::I64, [blocks, threads as usize], Access::Write);
    let z = matrix(&mut b, "z", DType::F32, [blocks, threads as usize], Access::Write);
    b.grid(blocks as i64, 1i64, 1i64);
    let base = b.let_("base", Expr::block_idx(0) * threads as i64);
    b.threads(|b| {
        let t = Expr::thread_idx();
        let acc = b.let_var("acc", 0i64);
        b.for_("i", 0i64, &t % 5i64, 1i64, |b, i| {
            b.assign(acc, Expr::Var(acc) + Expr::load(x, i.clone()) * (i + 1i64));
        });
        b.if_else(
            (&t % 3i64).eq(0i64),
            |b| b.assign(acc, Expr::Var(acc) + Expr::lane_idx() * 1000i64),
            |b| b.assign(acc, Expr::Var(acc) - Expr::warp_idx() * 100_000i64),
        );
        b.store_scalar(y, &base + t.clone(), acc);
        b.store_scalar(z, &base + t.clone(), (t.to_float() * 0.5).sqrt());
    });
    let xs: Vec<i64> = vec![3, -1, 4, 1, -5, 9, 2, 6];
    Case::new(
        "threads_divergent",
        b.finish().unwrap(),
        vec![
            HostTensor::from_i64(DType::I32, &[8], &xs),
            poisoned(DType::I64, &[blocks, threads as usize]),
            poisoned(DType::F32, &[blocks, threads as usize]),
        ],
        move |ts| {
            for blk in 0..blocks {
                for t in 0..threads as i64 {
                    let mut acc: i64 = (0..t % 5).map(|i| xs[i as usize] * (i + 1)).sum();
                    if t % 3 == 0 {
                        acc += (t % 32) * 1000;
                    } else {
                        acc -= (t / 32) * 100_000;
                    }
                    let i = blk * threads as usize + t as usize;
                    assert_eq!(ts[1].get_i64(i), acc, "y[{blk}][{t}]");
                    close("z", &[ts[2].get_f32(i)], &[(t as f32 * 0.5).sqrt()], 1e-6);
                }
            }
        },
    )
}

/// Per-thread scatter into a swizzled shared tile, a barrier, then reads three ways: a shared load inside a
/// map (transposing), a tile load, and a per-thread shared load.
pub fn shared_scatter_transpose() -> Case {
    let n = 32usize;
    let mut b = KernelBuilder::new("p_shared_scatter", 64);
    let x = matrix(&mut b, "x", DType::F32, [n, n], Access::Read);
    let y = b.tensor("y", DType::F32, &[Expr::Int(3), Expr::Int(n as i64), Expr::Int(n as i64)], Access::Write);
    let s = b.shared("s", DType::F32, 32, 32, 2, Swizzle::Xor16B);
    let t = b.tile("t", DType::F32, 32, 32, [2, 1]);
    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), (n * n) as i64, 64i64, |b, i| {
            let v = Expr::load(x, i.clone()) * 2.0;
            b.shared_store(s, 1i64, &i / n as i64, &i % n as i64, v);
        });
    });
    b.barrier();
    b.map(t, Expr::shared_load(s, 1i64, Expr::ColIdx, Expr::RowIdx));
    let v = |off: i64| view(y, off, n as i64, n as i64, n as i64, 2);
    b.store(t, Place::Global(v(0)));
    let src = b.slot(s, 1i64);
    b.load(t, Place::Shared(src));
    b.store(t, Place::Global(v((n * n) as i64)));
    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), (n * n) as i64, 64i64, |b, i| {
            let v = Expr::shared_load(s, 1i64, &i % n as i64, &i / n as i64) + 1.0;
            b.store_scalar(y, &i + (2 * n * n) as i64, v);
        });
    });
    let xs = Rng::new(12).vals(DType::F32, n * n, -3.0, 3.0);
    Case::new(
        "shared_scatter_transpose",
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::F32, &[n, n], &xs), poisoned(DType::F32, &[3, n, n])],
        move |ts| {
            let y = ts[1].to_f32_vec();
            let tr: Vec<f32> = (0..n * n).map(|i| xs[(i % n) * n + i / n] * 2.0).collect();
            let plain: Vec<f32> = xs.iter().map(|v| v * 2.0).collect();
            close("map transpose", &y[..n * n], &tr, 0.0);
            close("tile load", &y[n * n..2 * n * n], &plain, 0.0);
            let tr1: Vec<f32> = tr.iter().map(|v| v + 1.0).collect();
            close("thread load", &y[2 * n * n..], &tr1, 0.0);
        },
    )
}

/// Histograms with shared atomics (u32 counts, u64 weighted sums above 2^32), merged into global u32 and
/// u64 histograms with global atomics from several blocks.
pub fn histogram_atomics() -> Case {
    let (len, bins, blocks) = (3000usize, 40usize, 3i64);
    let mut b = KernelBuilder::new("p_histogram", 128);
    let x = b.tensor("x", DType::I32, &[Expr::Int(len as i64)], Access::Read);
    let h32 = b.tensor("h32", DType::U32, &[Expr::Int(bins as i64)], Access::ReadWrite);
    let h64 = b.tensor("h64", DType::U64, &[Expr::Int(bins as i64)], Access::ReadWrite);
    let s32 = b.shared("s32", DType::U32, 1, bins as u32, 1, Swizzle::None);
    let s64 = b.shared("s64", DType::U64, 1, bins as u32, 1, Swizzle::None);
    b.grid(blocks, 1i64, 1i64);
    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), bins as i64, 128i64, |b, i| {
            b.shared_store(s32, 0i64, 0i64, i.clone(), 0i64);
            b.shared_store(s64, 0i64, 0i64, i, 0i64);
        });
    });
    b.barrier();
    b.threads(|b| {
        let start = Expr::block_idx(0) * 128i64 + Expr::thread_idx();
        b.for_("i", start, len as i64, 128 * blocks, |b, i| {
            let v = b.let_("v", Expr::load(x, i.clone()));
            b.atomic_add_shared(s32, 0i64, 0i64, v.clone(), 1i64);
            b.atomic_add_shared(s64, 0i64, 0i64, v.clone(), v + (1i64 << 33));
        });
    });
    b.barrier();
    b.threads(|b| {
        b.for_("bin", Expr::thread_idx(), bins as i64, 128i64, |b, bin| {
            b.atomic_add_global(h32, bin.clone(), Expr::shared_load(s32, 0i64, 0i64, bin.clone()));
            b.atomic_add_global(h64, bin.clone(), Expr::shared_load(s64, 0i64, 0i64, bin));
        });
    });
    let xs: Vec<i64> = (0..len).map(|_| Rng::new(13).int(0, bins as i64)).collect();
    let init32: Vec<i64> = (0..bins as i64).collect();
    Case::new(
        "histogram_atomics",
        b.finish().unwrap(),
        vec![
            HostTensor::from_i64(DType::I32, &[len], &xs),
            HostTensor::from_i64(DType::U32, &[bins], &init32),
            HostTensor::zeros(DType::U64, &[bins]),
        ],
        move |ts| {
            for bin in 0..bins {
                let count = xs.iter().filter(|&&v| v == bin as i64).count() as i64;
                assert_eq!(ts[1].get_i64(bin), bin as i64 + count, "h32[{bin}]");
                assert_eq!(ts[2].get_i64(bin), count * ((1i64 << 33) + bin as i64), "h64[{bin}]");
            }
        },
    )
}

/// Global atomics of every operator and storage type, and fetching atomics: tickets drawn with a
/// fetch-add form a permutation of the threads.
pub fn atomic_ops() -> Case {
    let threads = 128u32;
    let mut b = KernelBuilder::new("p_atomic_ops", threads);
    let x = b.tensor("x", DType::F32, &[Expr::Int(threads as i64)], Access::Read);
    let gi = b.tensor("gi", DType::I32, &[Expr::Int(3)], Access::ReadWrite);
    let gu = b.tensor("gu", DType::U32, &[Expr::Int(3)], Access::ReadWrite);
    let gl = b.tensor("gl", DType::I64, &[Expr::Int(3)], Access::ReadWrite);
    let gq = b.tensor("gq", DType::U64, &[Expr::Int(3)], Access::ReadWrite);
    let gf = b.tensor("gf", DType::F32, &[Expr::Int(3)], Access::ReadWrite);
    let order = b.tensor("order", DType::I32, &[Expr::Int(threads as i64)], Access::Write);
    let sm = b.shared("sm", DType::F32, 1, 8, 1, Swizzle::None);
    let st = b.shared("st", DType::U32, 1, 8, 1, Swizzle::None);
    b.threads(|b| {
        b.if_(Expr::thread_idx().lt(8i64), |b| {
            // Column 0 collects a maximum, 1 a sum, 2 a minimum.
            let init =
                Expr::select(Expr::thread_idx().eq(1i64), 0.0, Expr::select(Expr::thread_idx().eq(2i64), 1e30, -1e30));
            b.shared_store(sm, 0i64, 0i64, Expr::thread_idx(), init);
            b.shared_store(st, 0i64, 0i64, Expr::thread_idx(), 0i64);
        });
    });
    b.barrier();
    b.threads(|b| {
        let t = Expr::thread_idx();
        let v = Expr::load(x, t.clone());
        let sv = &t - 60i64; // signed, both sides of zero
        for (tensor, val) in [(gi, sv.clone()), (gl, sv.clone() * 1_000_000_000i64)] {
            b.atomic_add_global(tensor, 0i64, val.clone());
            b.atomic(AtomicTarget::Global { tensor, index: Expr::Int(1) }, AtomicOp::Max, val.clone());
            b.atomic(AtomicTarget::Global { tensor, index: Expr::Int(2) }, AtomicOp::Min, val);
        }
        // Unsigned: -1 is the largest value.
        let uv = Expr::select(t.eq(77i64), Expr::Int(-1), t.clone() * 3i64);
        for tensor in [gu, gq] {
            b.atomic_add_global(tensor, 0i64, t.clone());
            b.atomic(AtomicTarget::Global { tensor, index: Expr::Int(1) }, AtomicOp::Max, uv.clone());
            b.atomic(AtomicTarget::Global { tensor, index: Expr::Int(2) }, AtomicOp::Min, uv.clone() + 5i64);
        }
        b.atomic_add_global(gf, 0i64, (&t % 7i64).to_float());
        b.atomic(AtomicTarget::Global { tensor: gf, index: Expr::Int(1) }, AtomicOp::Max, v.clone());
        b.atomic(AtomicTarget::Global { tensor: gf, index: Expr::Int(2) }, AtomicOp::Min, v.clone());
        let sh =
            |col: i64| AtomicTarget::Shared { buf: sm, index: Expr::Int(0), row: Expr::Int(0), col: Expr::Int(col) };
        b.atomic(sh(0), AtomicOp::Max, v.clone());
        b.atomic(sh(1), AtomicOp::Add, (&t % 7i64).to_float());
        b.atomic(sh(2), AtomicOp::Min, v);
        let ticket = b.atomic_fetch(
            "ticket",
            AtomicTarget::Shared { buf: st, index: Expr::Int(0), row: Expr::Int(0), col: Expr::Int(3) },
            AtomicOp::Add,
            1i64,
        );
        b.store_scalar(order, ticket, t);
    });
    b.barrier();
    b.threads(|b| {
        b.if_(Expr::thread_idx().eq(0i64), |b| {
            // gf[1] also receives the shared maximum (it equals the global one).
            b.atomic(
                AtomicTarget::Global { tensor: gf, index: Expr::Int(1) },
                AtomicOp::Max,
                Expr::shared_load(sm, 0i64, 0i64, 0i64),
            );
            // gf[0] also receives the shared sum (equal to the global one) and gf[2] the shared minimum.
            b.atomic_add_global(gf, 0i64, Expr::shared_load(sm, 0i64, 0i64, 1i64));
            b.atomic(
                AtomicTarget::Global { tensor: gf, index: Expr::Int(2) },
                AtomicOp::Min,
                Expr::shared_load(sm, 0i64, 0i64, 2i64),
            );
        });
    });
    let xs = Rng::new(14).vals(DType::F32, threads as usize, -50.0, 50.0);
    Case::new(
        "atomic_ops",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::F32, &[threads as usize], &xs),
            HostTensor::from_i64(DType::I32, &[3], &[0, i32::MIN as i64, i32::MAX as i64]),
            HostTensor::from_i64(DType::U32, &[3], &[0, 0, u32::MAX as i64]),
            HostTensor::from_i64(DType::I64, &[3], &[0, i64::MIN, i64::MAX]),
            HostTensor::from_i64(DType::U64, &[3], &[0, 0, -1]),
            HostTensor::from_f32(DType::F32, &[3], &[0.0, f32::NAN, f32::INFINITY]),
            poisoned(DType::I32, &[threads as usize]),
        ],
        move |ts| {
            let n = threads as i64;
            let sv: Vec<i64> = (0..n).map(|t| t - 60).collect();
            assert_eq!(ts[1].get_i64(0), sv.iter().sum::<i64>());
            assert_eq!(ts[1].get_i64(1), 67);
            assert_eq!(ts[1].get_i64(2), -60);
            assert_eq!(ts[3].get_i64(0), sv.iter().sum::<i64>() * 1_000_000_000);
            assert_eq!(ts[3].get_i64(1), 67_000_000_000);
            assert_eq!(ts[3].get_i64(2), -60_000_000_000);
            assert_eq!(ts[2].get_i64(0), n * (n - 1) / 2);
            assert_eq!(ts[2].get_i64(1), u32::MAX as i64);
            assert_eq!(ts[2].get_i64(2), 4, "u32 min wraps -1 + 5");
            assert_eq!(ts[4].get_i64(0), n * (n - 1) / 2);
            assert_eq!(ts[4].get_i64(1), -1, "u64 max");
            assert_eq!(ts[4].get_i64(2), 4, "u64 min");
            let fsum: f32 = (0..n).map(|t| (t % 7) as f32).sum();
            let gf = ts[5].to_f32_vec();
            assert_eq!(gf[0], fsum * 2.0, "global and shared f32 sums");
            assert_eq!(gf[1], xs.iter().copied().fold(f32::MIN, f32::max), "f32 max ignores the NaN start");
            assert_eq!(gf[2], xs.iter().copied().fold(f32::MAX, f32::min));
            let mut seen: Vec<i64> = (0..threads as usize).map(|i| ts[6].get_i64(i)).collect();
            seen.sort();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "tickets form a permutation");
        },
    )
}

/// `DequantFp4Stream` with `prefetch` over a loop of K slices (two 32-wide blocks each over 9 blocks: the last
/// slice is one block, its prefetch views lie past K), rows masked at 50 of 64, packed then natural layout
/// into the same tile (two raw-word buffers), NaN scale bytes: each slice's tile is its own views' decode.
pub fn dequant_fp4_stream_prefetch() -> Case {
    let (r, c, rows, nb, slices) = (64usize, 64usize, 50usize, 9usize, 5usize);
    let (kw, kb) = (nb * 4, nb);
    let mut b = KernelBuilder::new("p_dequant_fp4_stream_prefetch", 128);
    let dims = |a: usize, bb: usize| [Expr::Int(a as i64), Expr::Int(bb as i64)];
    let q = b.tensor("q", DType::U32, &dims(rows, kw), Access::Read);
    let sc = b.tensor("s", DType::U8, &dims(rows, kb), Access::Read);
    let y = b.tensor(
        "y",
        DType::Bf16,
        &[Expr::Int(2 * slices as i64), Expr::Int(r as i64), Expr::Int(c as i64)],
        Access::Write,
    );
    let t = b.tile("w", DType::Bf16, r as u32, c as u32, [4, 1]);
    let views = |s: Expr| {
        let qv = view(q, &s * 8i64, kw as i64, rows as i64, Expr::Int(kw as i64) - &s * 8i64, 4);
        let sv = view(sc, &s * 2i64, kb as i64, rows as i64, Expr::Int(kb as i64) - &s * 2i64, 1);
        (qv, sv)
    };
    for (v, packed) in [true, false].into_iter().enumerate() {
        b.for_("s", 0i64, slices as i64, 1i64, |b, s| {
            let (qv, sv) = views(s.clone());
            let (nq, ns) = views(&s + 1i64);
            let first = s.eq(0i64);
            b.dequant_fp4_stream_prefetch(
                t,
                qv,
                sv,
                packed,
                false,
                false,
                Fp4Prefetch { words: nq, scales: ns, first },
            );
            let off = (Expr::Int((v * slices) as i64) + s) * (r * c) as i64;
            b.store(t, Place::Global(view(y, off, c as i64, r as i64, c as i64, 2)));
        });
    }
    let qw: Vec<u32> = (0..rows * kw).map(|_| Rng::new(17).next_u64() as u32).collect();
    let sb: Vec<u8> = (0..rows * kb).map(|i| if i % 11 == 5 { 255 } else { 100 + (i % 40) as u8 }).collect();
    let mut want = vec![0f32; 2 * slices * r * c];
    for (v, packed) in [true, false].into_iter().enumerate() {
        for sl in 0..slices {
            for row in 0..rows {
                for col in 0..c {
                    let blk = 2 * sl + col / 32;
                    if blk >= nb {
                        continue;
                    }
                    let cc = col % 32;
                    let s = sb[row * kb + blk];
                    want[((v * slices + sl) * r + row) * c + col] =
                        fp4_value(&qw[row * kw + 4 * blk..], cc, packed, s) as f32;
                }
            }
        }
    }
    let qbytes: Vec<u8> = qw.iter().flat_map(|w| w.to_le_bytes()).collect();
    Case::new(
        "dequant_fp4_stream_prefetch",
        b.finish().unwrap(),
        vec![
            HostTensor::from_bytes(DType::U32, &[rows, kw], qbytes),
            HostTensor::from_bytes(DType::U8, &[rows, kb], sb),
            poisoned(DType::Bf16, &[2 * slices, r, c]),
        ],
        bitwise_f32(2, want, r, c, "prefetch slice"),
    )
}

/// The last-arriving-block pattern of [`Stmt::Fence`]: each of 37 blocks stores a partial row (every thread one
/// element), a barrier, thread 0 fences and bumps the arrival counter (atomic with fetch), fences again and
/// puts the count in shared memory; the block that saw the last count sums every block's partials in block
/// order (exact: small integers in f32) and resets the counter. On a GPU the blocks run concurrently, so a
/// missing fence shows as a stale partial.
pub fn last_block_reduction() -> Case {
    let (threads, blocks) = (128u32, 37i64);
    let mut b = KernelBuilder::new("p_last_block_reduction", threads);
    let part = b.tensor("part", DType::F32, &[Expr::Int(blocks), Expr::Int(threads as i64)], Access::ReadWrite);
    let sem = b.tensor("sem", DType::I32, &[Expr::Int(1)], Access::ReadWrite);
    let out = b.tensor("out", DType::F32, &[Expr::Int(threads as i64)], Access::Write);
    let arrived = b.shared("arrived", DType::I32, 1, 1, 1, Swizzle::None);
    b.grid(blocks, 1i64, 1i64);
    let blk = Expr::block_idx(0);
    b.threads(|b| {
        let v = (blk.clone() * 1000i64 + Expr::thread_idx()).to_float();
        b.store_scalar(part, blk.clone() * threads as i64 + Expr::thread_idx(), v);
    });
    b.barrier();
    b.threads(|b| {
        b.if_(Expr::thread_idx().eq(0i64), |b| {
            b.fence();
            let before = b.atomic_fetch(
                "before",
                AtomicTarget::Global { tensor: sem, index: Expr::Int(0) },
                AtomicOp::Add,
                1i64,
            );
            b.fence();
            b.shared_store(arrived, 0i64, 0i64, 0i64, before);
        });
    });
    b.barrier();
    b.if_(Expr::shared_load(arrived, 0i64, 0i64, 0i64).eq(blocks - 1), |b| {
        b.threads(|b| {
            let acc = b.let_var("acc", 0.0f64);
            b.for_("s", 0i64, blocks, 1i64, |b, s| {
                b.assign(acc, Expr::Var(acc) + Expr::load(part, s * threads as i64 + Expr::thread_idx()));
            });
            b.store_scalar(out, Expr::thread_idx(), Expr::Var(acc));
            b.if_(Expr::thread_idx().eq(0i64), |b| b.store_scalar(sem, 0i64, 0i64));
        });
    });
    Case::new(
        "last_block_reduction",
        b.finish().unwrap(),
        vec![
            poisoned(DType::F32, &[blocks as usize, threads as usize]),
            HostTensor::from_i64(DType::I32, &[1], &[0]),
            poisoned(DType::F32, &[threads as usize]),
        ],
        move |ts| {
            assert_eq!(ts[1].get_i64(0), 0, "the last block resets the counter");
            let got = ts[2].to_f32_vec();
            for (t, g) in got.iter().enumerate() {
                let want: f64 = (0..blocks).map(|s| (s * 1000 + t as i64) as f64).sum();
                assert_eq!(*g as f64, want, "thread {t}");
            }
        },
    )
}

/// Per-thread register arrays with unrolled constant indices: each thread keeps 8 floats and 4 ints.
pub fn arrays() -> Case {
    let threads = 64u32;
    let mut b = KernelBuilder::new("p_arrays", threads);
    let x = b.tensor("x", DType::F32, &[Expr::Int(threads as i64), Expr::Int(8)], Access::Read);
    let y = b.tensor("y", DType::F32, &[Expr::Int(threads as i64)], Access::Write);
    let z = b.tensor("z", DType::I32, &[Expr::Int(threads as i64), Expr::Int(4)], Access::Write);
    b.threads(|b| {
        let t = Expr::thread_idx();
        let a = b.let_array("a", 8, ScalarTy::Float, 0.0);
        let c = b.let_array("c", 4, ScalarTy::Int, &t * 10i64);
        b.for_unrolled("j", 0i64, 8i64, 1i64, |b, j| {
            b.array_set(a, j.clone(), Expr::load(x, &t * 8i64 + j.clone()) * j.to_float());
            b.array_set(c, &j % 4i64, Expr::array_get(c, &j % 4i64) + j.clone());
        });
        let s = b.let_var("s", 0.0);
        b.for_unrolled("j", 0i64, 8i64, 1i64, |b, j| {
            b.assign(s, Expr::Var(s) + Expr::array_get(a, Expr::Int(7) - j));
        });
        b.store_scalar(y, t.clone(), s);
        b.for_unrolled("j", 0i64, 4i64, 1i64, |b, j| {
            b.store_scalar(z, &t * 4i64 + j.clone(), Expr::array_get(c, j));
        });
    });
    let xs = Rng::new(15).vals(DType::F32, threads as usize * 8, -1.0, 1.0);
    Case::new(
        "arrays",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::F32, &[threads as usize, 8], &xs),
            poisoned(DType::F32, &[threads as usize]),
            poisoned(DType::I32, &[threads as usize, 4]),
        ],
        move |ts| {
            for t in 0..threads as usize {
                let a: Vec<f32> = (0..8).map(|j| xs[t * 8 + j] * j as f32).collect();
                let s = (0..8).fold(0f32, |s, j| s + a[7 - j]);
                close("y", &[ts[1].get_f32(t)], &[s], 1e-5);
                for j in 0..4 {
                    assert_eq!(ts[2].get_i64(t * 4 + j), (t * 10 + j + (j + 4)) as i64, "z[{t}][{j}]");
                }
            }
        },
    )
}

fn scan_case(
    name: &'static str,
    kname: &str,
    rows: u32,
    cols: u32,
    warps: [u32; 2],
    threads: u32,
    scratch: (u32, u32, Swizzle),
) -> Case {
    let (m, n) = (rows as usize, cols as usize);
    let mut b = KernelBuilder::new(kname, threads);
    let x = matrix(&mut b, "x", DType::F32, [m, n], Access::Read);
    let y = matrix(&mut b, "y", DType::F32, [m, n], Access::Write);
    let s = b.shared("scratch", DType::F32, scratch.0, scratch.1, 1, scratch.2);
    let t = b.tile("t", DType::F32, rows, cols, warps);
    let v = view(x, 0i64, n as i64, m as i64, n as i64, 2);
    b.load(t, Place::Global(v));
    b.scan_rows(t, s);
    b.store(t, Place::Global(view(y, 0i64, n as i64, m as i64, n as i64, 2)));
    let xs = Rng::new(16).vals(DType::F32, m * n, -1.0, 0.0);
    Case::new(
        name,
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::F32, &[m, n], &xs), poisoned(DType::F32, &[m, n])],
        move |ts| {
            let mut want = xs.clone();
            for c in 0..n {
                for r in 1..m {
                    want[r * n + c] += want[(r - 1) * n + c];
                }
            }
            // Sequential f32 order on both backends: bitwise.
            close("y", &ts[1].to_f32_vec(), &want, 0.0);
        },
    )
}

/// `scan_rows` on a [64, 64] tile on [2, 2] warps through a swizzled scratch of the same size.
pub fn scan_rows() -> Case {
    scan_case("scan_rows", "p_scan_rows", 64, 64, [2, 2], 128, (64, 64, Swizzle::Xor16B))
}

/// `scan_rows` with more columns than threads and a larger, plain scratch: [32, 128] on [2, 1] warps, 64
/// threads, scratch [48, 136].
pub fn scan_wide() -> Case {
    scan_case("scan_wide", "p_scan_wide", 32, 128, [2, 1], 64, (48, 136, Swizzle::None))
}

/// `scan_rows` on a tile replicated over the block's warps: [16, 32] on [1, 1] warps with 4 warps.
pub fn scan_replicated() -> Case {
    scan_case("scan_replicated", "p_scan_replicated", 16, 32, [1, 1], 128, (16, 32, Swizzle::Xor16B))
}

/// `store_scalar` converts to every storable dtype like the host tensors do (bf16 and f16 round to nearest
/// even, E4M3 saturates, ints wrap).
pub fn scalar_store_conversions() -> Case {
    let n = 64usize;
    let mut b = KernelBuilder::new("p_store_conv", 64);
    let x = b.tensor("x", DType::F32, &[Expr::Int(n as i64)], Access::Read);
    let dts = [DType::Bf16, DType::F16, DType::E4m3, DType::U8, DType::I32, DType::U32, DType::U64];
    let outs: Vec<TensorId> =
        dts.iter().map(|d| b.tensor(&format!("y_{d}"), *d, &[Expr::Int(n as i64)], Access::Write)).collect();
    b.threads(|b| {
        let t = Expr::thread_idx();
        let v = b.let_("v", Expr::load(x, t.clone()));
        for (d, o) in dts.iter().zip(&outs) {
            if d.is_int() {
                b.store_scalar(*o, t.clone(), (v.clone() * 1000.0).to_int() - 100_000i64);
            } else {
                b.store_scalar(*o, t.clone(), v.clone());
            }
        }
    });
    let mut xs = Rng::new(17).vals(DType::F32, n, -600.0, 600.0);
    xs[0] = 1.0 + 1.0 / 256.0; // a bf16 tie
    xs[1] = 0.0625 * 1.0625; // between two e4m3 values
    xs[2] = 1e6;
    xs[3] = f32::NAN;
    let xs2 = xs.clone();
    let mut tensors = vec![HostTensor::from_f32(DType::F32, &[n], &xs)];
    tensors.extend(dts.iter().map(|d| poisoned(*d, &[n])));
    Case::new("scalar_store_conversions", b.finish().unwrap(), tensors, move |ts| {
        for (di, d) in dts.iter().enumerate() {
            let out = &ts[1 + di];
            for (i, &v) in xs2.iter().enumerate() {
                if d.is_int() {
                    if v.is_nan() {
                        continue; // float -> int of NaN is unspecified
                    }
                    let want = HostTensor::from_i64(*d, &[1], &[(v * 1000.0) as i64 - 100_000]);
                    assert_eq!(out.get_i64(i), want.get_i64(0), "{d}[{i}] from {v}");
                } else {
                    let want = HostTensor::from_f32(*d, &[1], &[v]);
                    let (g, w) = (out.get_f32(i), want.get_f32(0));
                    assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{d}[{i}] from {v}: {g} vs {w}");
                }
            }
        }
    })
}

/// Byte formats through tiles: E4M3 loads (pairs and singles) into an f32 tile and E4M3 tile stores
/// (saturating), and packed u8 loaded into an i32 tile and split into nibbles with bit operations.
pub fn byte_formats() -> Case {
    let (m, n) = (16usize, 32usize);
    let mut b = KernelBuilder::new("p_byte_formats", 32);
    let q = matrix(&mut b, "q", DType::E4m3, [m, n], Access::Read);
    let u = matrix(&mut b, "u", DType::U8, [m, n], Access::Read);
    let yq = b.tensor("yq", DType::F32, &[Expr::Int(2), Expr::Int(m as i64), Expr::Int(n as i64)], Access::Write);
    let zq = matrix(&mut b, "zq", DType::E4m3, [m, n], Access::Write);
    let yn = matrix(&mut b, "yn", DType::I32, [m, n], Access::Write);
    let t = b.tile("t", DType::F32, 16, 32, [1, 1]);
    let i = b.tile("i", DType::I32, 16, 32, [1, 1]);
    let v = |tensor, off: i64, vec| view(tensor, off, n as i64, m as i64, n as i64, vec);
    for (k, vec) in [(0i64, 2u32), (1, 1)] {
        b.load(t, Place::Global(v(q, 0, vec)));
        b.store(t, Place::Global(v(yq, k * (m * n) as i64, 2)));
    }
    b.map(t, Expr::Elem(t) * 3.0);
    b.store(t, Place::Global(v(zq, 0, 2)));
    b.load(i, Place::Global(v(u, 0, 4)));
    b.map(i, Expr::Elem(i).shr(4i64).bitand(0xfi64) * 16i64 - Expr::Elem(i).bitand(0xfi64));
    b.store(i, Place::Global(v(yn, 0, 2)));
    let k = b.finish().unwrap();
    let mut rng = Rng::new(18);
    // Every code but NaN (0x7f, 0xff).
    let qs: Vec<u8> = (0..m * n).map(|i| if i & 0x7f == 0x7f { 0 } else { i as u8 }).collect();
    let us: Vec<u8> = (0..m * n).map(|_| rng.int(0, 256) as u8).collect();
    let (qs2, us2) = (qs.clone(), us.clone());
    Case::new(
        "byte_formats",
        k,
        vec![
            HostTensor::from_bytes(DType::E4m3, &[m, n], qs),
            HostTensor::from_bytes(DType::U8, &[m, n], us),
            poisoned(DType::F32, &[2, m, n]),
            poisoned(DType::E4m3, &[m, n]),
            poisoned(DType::I32, &[m, n]),
        ],
        move |ts| {
            let dec: Vec<f32> = qs2.iter().map(|&c| k3k_ir::tensor::e4m3_to_f32(c)).collect();
            let y = ts[2].to_f32_vec();
            close("pairs", &y[..m * n], &dec, 0.0);
            close("singles", &y[m * n..], &dec, 0.0);
            for (idx, d) in dec.iter().enumerate() {
                assert_eq!(ts[3].data[idx], k3k_ir::tensor::f32_to_e4m3(d * 3.0), "e4m3 store of {} at {idx}", d * 3.0);
                let c = us2[idx] as i64;
                assert_eq!(ts[4].get_i64(idx), (c >> 4) * 16 - (c & 0xf), "nibbles at {idx}");
            }
        },
    )
}

/// Banded (block-diagonal) products: each 16-row accumulator band multiplies by its own B window. `c1 = A_w @
/// B1_w^T` with B1 a [64, 32] buffer read as four [16, 32] windows stored [N, K] (shared A); `c2 = 1 + A2_w @
/// B2_w` with A2 a bf16 register tile and B2 a [128, 16] buffer read as four [32, 16] windows stored [K, N]
/// starting at row 0 (register A).
pub fn mma_banded() -> Case {
    let (m, kd) = (64usize, 32usize);
    let mut b = KernelBuilder::new("p_mma_banded", 128);
    let a = matrix(&mut b, "a", DType::Bf16, [m, kd], Access::Read);
    let w1 = b.tensor("w1", DType::Bf16, &[Expr::Int(64), Expr::Int(kd as i64)], Access::Read);
    let w2 = b.tensor("w2", DType::Bf16, &[Expr::Int(128), Expr::Int(16)], Access::Read);
    let c = b.tensor("c", DType::F32, &[Expr::Int(2), Expr::Int(m as i64), Expr::Int(16)], Access::Write);
    let sa = b.shared("sa", DType::Bf16, 64, 32, 1, Swizzle::Xor16B);
    let sw1 = b.shared("sw1", DType::Bf16, 64, 32, 1, Swizzle::Xor16B);
    let sw2 = b.shared("sw2", DType::Bf16, 128, 16, 1, Swizzle::Xor16B);
    let ta = b.tile("ta", DType::Bf16, 64, 32, [4, 1]);
    let acc = b.tile("acc", DType::F32, 64, 16, [4, 1]);
    for (s, t, rows, cols) in [(sa, a, 64i64, kd as i64), (sw1, w1, 64, kd as i64), (sw2, w2, 128, 16)] {
        let d = b.slot(s, 0i64);
        b.copy_async(d, view(t, 0i64, cols, rows, cols, 8));
    }
    b.commit();
    b.load(ta, Place::Global(view(a, 0i64, kd as i64, m as i64, kd as i64, 2)));
    b.wait(0);
    b.barrier();
    b.map(acc, 0.0);
    let oa = Operand::Shared { src: b.slot(sa, 0i64), transpose: false };
    let ob = Operand::Banded { src: b.window(sw1, 0i64, 0, 0, 16, 32), transpose: true };
    b.mma(acc, oa, ob);
    b.store(acc, Place::Global(view(c, 0i64, 16i64, m as i64, 16i64, 2)));
    b.map(acc, 1.0);
    let ob2 = Operand::Banded { src: b.window(sw2, 0i64, 0, 0, 32, 16), transpose: false };
    b.mma(acc, Operand::Reg(ta), ob2);
    b.store(acc, Place::Global(view(c, (m * 16) as i64, 16i64, m as i64, 16i64, 2)));
    let mut rng = Rng::new(19);
    let av = rng.vals(DType::Bf16, m * kd, -1.0, 1.0);
    let w1v = rng.vals(DType::Bf16, 64 * kd, -1.0, 1.0);
    let w2v = rng.vals(DType::Bf16, 128 * 16, -1.0, 1.0);
    let (av2, w1v2, w2v2) = (av.clone(), w1v.clone(), w2v.clone());
    Case::new(
        "mma_banded",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::Bf16, &[m, kd], &av),
            HostTensor::from_f32(DType::Bf16, &[64, kd], &w1v),
            HostTensor::from_f32(DType::Bf16, &[128, 16], &w2v),
            poisoned(DType::F32, &[2, m, 16]),
        ],
        move |ts| {
            let mut want = vec![0f32; 2 * m * 16];
            for band in 0..4 {
                let arows = &av2[band * 16 * kd..(band + 1) * 16 * kd];
                let c1 = gemm_check(16, 16, kd, arows, false, &w1v2[band * 16 * kd..(band + 1) * 16 * kd], true);
                let c2 = gemm_check(16, 16, kd, arows, false, &w2v2[band * 32 * 16..(band + 1) * 32 * 16], false);
                want[band * 256..(band + 1) * 256].copy_from_slice(&c1);
                for (i, v) in c2.iter().enumerate() {
                    want[m * 16 + band * 256 + i] = v + 1.0;
                }
            }
            close("c", &ts[3].to_f32_vec(), &want, 1e-4);
        },
    )
}

/// Warp shuffles (xor, broadcast, up) of floats and ints, a ballot, and a syncwarp ordering shared writes of
/// one lane before another lane's read; values computed before the warp statements in divergent code.
pub fn warp_shuffles() -> Case {
    let (threads, blocks) = (64usize, 2usize);
    let n = threads * blocks;
    let mut b = KernelBuilder::new("p_warp_shuffles", threads as u32);
    let x = b.tensor("x", DType::F32, &[Expr::Int(n as i64)], Access::Read);
    let xi = b.tensor("xi", DType::I32, &[Expr::Int(n as i64)], Access::Read);
    let out_f = b.tensor("out_f", DType::F32, &[Expr::Int(3), Expr::Int(n as i64)], Access::Write);
    let out_i = b.tensor("out_i", DType::I64, &[Expr::Int(3), Expr::Int(n as i64)], Access::Write);
    let sh = b.shared("sh", DType::F32, 1, threads as u32, 1, Swizzle::None);
    b.grid(blocks as i64, 1i64, 1i64);
    b.threads(|b| {
        let g = b.let_("g", Expr::block_idx(0) * threads as i64 + Expr::thread_idx());
        let v = b.let_var("v", Expr::load(x, g.clone()));
        // Divergent code before the collectives.
        b.if_(Expr::lane_idx().bitand(1i64).eq(1i64), |b| b.assign(v, Expr::Var(v) * 2.0f64));
        let vi = b.let_("vi", Expr::load(xi, g.clone()));
        let a = b.warp_shuffle("a", WarpOp::ShflXor(5), Expr::Var(v));
        let c = b.warp_shuffle("c", WarpOp::ShflIdx(7), Expr::Var(v));
        let u = b.warp_shuffle("u", WarpOp::ShflUp(3), vi.clone());
        let bl = b.warp_shuffle("bl", WarpOp::Ballot, Expr::Var(v).gt(0.5f64));
        let ux = b.warp_shuffle("ux", WarpOp::ShflXor(16), &vi * 3i64);
        b.shared_store(sh, 0i64, 0i64, Expr::thread_idx(), Expr::Var(v) + 1.0f64);
        b.warp_sync();
        let nb = Expr::warp_idx() * 32i64 + (Expr::lane_idx() + 1i64) % 32i64;
        let r = b.let_("r", Expr::shared_load(sh, 0i64, 0i64, nb));
        b.store_scalar(out_f, g.clone(), a);
        b.store_scalar(out_f, &g + n as i64, c);
        b.store_scalar(out_f, &g + 2 * n as i64, r);
        b.store_scalar(out_i, g.clone(), u);
        b.store_scalar(out_i, &g + n as i64, bl);
        b.store_scalar(out_i, &g + 2 * n as i64, ux);
    });
    let mut rng = Rng::new(29);
    let xs: Vec<f32> = (0..n).map(|_| rng.f32(0.0, 1.0)).collect();
    let xis: Vec<i64> = (0..n).map(|_| rng.int(-1000, 1000)).collect();
    let (xs2, xis2) = (xs.clone(), xis.clone());
    Case::new(
        "warp_shuffles",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::F32, &[n], &xs),
            HostTensor::from_i64(DType::I32, &[n], &xis),
            poisoned(DType::F32, &[3, n]),
            poisoned(DType::I64, &[3, n]),
        ],
        move |ts| {
            let v = |g: usize| if g % 2 == 1 { xs2[g] * 2.0 } else { xs2[g] };
            for g in 0..n {
                let (lane, w0) = (g % 32, g - g % 32);
                assert_eq!(ts[2].get_f32(g), v(w0 + (lane ^ 5)), "xor {g}");
                assert_eq!(ts[2].get_f32(n + g), v(w0 + 7), "idx {g}");
                assert_eq!(ts[2].get_f32(2 * n + g), v(w0 + (lane + 1) % 32) + 1.0, "syncwarp {g}");
                let up = if lane >= 3 { xis2[g - 3] } else { xis2[g] };
                assert_eq!(ts[3].get_i64(g), up, "up {g}");
                let mask: i64 = (0..32).filter(|&j| v(w0 + j) > 0.5).map(|j| 1i64 << j).sum();
                assert_eq!(ts[3].get_i64(n + g), mask, "ballot {g}");
                assert_eq!(ts[3].get_i64(2 * n + g), 3 * xis2[w0 + (lane ^ 16)], "int xor {g}");
            }
        },
    )
}

/// `DequantFp4` on [128, 64] bf16 tiles over 8 warps from swizzled shared words and scales: packed and natural
/// layouts, every scale byte 0..=255 (NaN, the subnormal 2^-127, overflow to inf) on the general path, and the
/// folded one-multiply paths on the scale bytes they promise; bitwise against `e2m1 * 2^(s-127)` computed here.
pub fn dequant_fp4() -> Case {
    let (r, c) = (128usize, 64usize);
    let (kw, kb) = (c / 8, c / 32);
    // (packed, fold, finite, scale tensor)
    let variants =
        [(true, false, false, 0usize), (false, false, false, 0), (true, true, false, 1), (false, true, true, 2)];
    let mut b = KernelBuilder::new("p_dequant_fp4", 256);
    let dims = |a: usize, bb: usize| [Expr::Int(a as i64), Expr::Int(bb as i64)];
    let q = b.tensor("q", DType::U32, &dims(r, kw), Access::Read);
    let scales: Vec<TensorId> =
        (0..3).map(|i| b.tensor(&format!("s{i}"), DType::U8, &dims(r, kb), Access::Read)).collect();
    let y = b.tensor("y", DType::Bf16, &[Expr::Int(4), Expr::Int(r as i64), Expr::Int(c as i64)], Access::Write);
    let sq = b.shared("sq", DType::U32, r as u32, kw as u32, 1, Swizzle::Xor16B);
    let ss = b.shared("ss", DType::U8, r as u32, kb as u32, 3, Swizzle::None);
    let t = b.tile("w", DType::Bf16, r as u32, c as u32, [8, 1]);
    b.copy_async(b.slot(sq, 0i64), view(q, 0i64, kw as i64, r as i64, kw as i64, 4));
    for (i, &st) in scales.iter().enumerate() {
        b.copy_async(b.slot(ss, i as i64), view(st, 0i64, kb as i64, r as i64, kb as i64, 2));
    }
    b.commit();
    b.wait(0);
    b.barrier();
    for (v, &(packed, fold, finite, si)) in variants.iter().enumerate() {
        let words = b.window(sq, 0i64, 0, 0, r as u32, kw as u32);
        let sc = b.window(ss, si as i64, 0, 0, r as u32, kb as u32);
        b.dequant_fp4(t, words, sc, packed, fold, finite);
        b.store(t, Place::Global(view(y, (v * r * c) as i64, c as i64, r as i64, c as i64, 2)));
    }
    let qw: Vec<u32> = (0..r * kw).map(|_| Rng::new(12).next_u64() as u32).collect();
    // Scale bytes: all 256 values; at most 128 or 255; at most 128.
    let sv: [Vec<u8>; 3] = [
        (0..r * kb).map(|i| i as u8).collect(),
        (0..r * kb).map(|i| if i % 7 == 3 { 255 } else { (i % 129) as u8 }).collect(),
        (0..r * kb).map(|i| ((i * 5) % 129) as u8).collect(),
    ];
    let mut want = vec![0f32; 4 * r * c];
    for (v, &(packed, _, _, si)) in variants.iter().enumerate() {
        for row in 0..r {
            for col in 0..c {
                let s = sv[si][row * kb + col / 32];
                want[(v * r + row) * c + col] = fp4_value(&qw[row * kw + 4 * (col / 32)..], col, packed, s) as f32;
            }
        }
    }
    let qbytes: Vec<u8> = qw.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut tensors = vec![HostTensor::from_bytes(DType::U32, &[r, kw], qbytes)];
    for v in &sv {
        tensors.push(HostTensor::from_bytes(DType::U8, &[r, kb], v.clone()));
    }
    tensors.push(poisoned(DType::Bf16, &[4, r, c]));
    Case::new("dequant_fp4", b.finish().unwrap(), tensors, bitwise_f32(4, want, r, c, "dequant_fp4 variant"))
}

/// `DequantFp4Stream` on [128, 256] bf16 tiles over 8 warps, straight from global views that start one block
/// into each row (offset 4 words / 1 scale byte), with 117 valid rows and 7 valid blocks of words (the 8th
/// block, and the rows past 117, must be zero although the scale view covers them): packed and natural
/// layouts, every scale byte 0..=255 on the general path (NaN, the subnormal 2^-127, overflow) and the folded
/// paths on the bytes they promise; bitwise against `e2m1 * 2^(s-127)` computed here.
pub fn dequant_fp4_stream() -> Case {
    let (r, c) = (128usize, 256usize);
    let (rows, blocks) = (117usize, 7usize);
    // Tensors: [rows, 9 blocks]; the views skip block 0.
    let (kw, kb) = (9 * 4, 9);
    let variants =
        [(true, false, false, 0usize), (false, false, false, 0), (true, true, false, 1), (false, true, true, 2)];
    let mut b = KernelBuilder::new("p_dequant_fp4_stream", 256);
    let dims = |a: usize, bb: usize| [Expr::Int(a as i64), Expr::Int(bb as i64)];
    let q = b.tensor("q", DType::U32, &dims(rows, kw), Access::Read);
    let scales: Vec<TensorId> =
        (0..3).map(|i| b.tensor(&format!("s{i}"), DType::U8, &dims(rows, kb), Access::Read)).collect();
    let y = b.tensor("y", DType::Bf16, &[Expr::Int(4), Expr::Int(r as i64), Expr::Int(c as i64)], Access::Write);
    let t = b.tile("w", DType::Bf16, r as u32, c as u32, [8, 1]);
    for (v, &(packed, fold, finite, si)) in variants.iter().enumerate() {
        let qv = view(q, 4i64, kw as i64, rows as i64, (4 * blocks) as i64, 4);
        let sv = view(scales[si], 1i64, kb as i64, rows as i64, 8i64, 1);
        b.dequant_fp4_stream(t, qv, sv, packed, fold, finite);
        b.store(t, Place::Global(view(y, (v * r * c) as i64, c as i64, r as i64, c as i64, 2)));
    }
    let qw: Vec<u32> = (0..rows * kw).map(|_| Rng::new(13).next_u64() as u32).collect();
    let sv: [Vec<u8>; 3] = [
        (0..rows * kb).map(|i| (i * 7) as u8).collect(),
        (0..rows * kb).map(|i| if i % 7 == 3 { 255 } else { (i % 129) as u8 }).collect(),
        (0..rows * kb).map(|i| ((i * 5) % 129) as u8).collect(),
    ];
    let mut want = vec![0f32; 4 * r * c];
    for (v, &(packed, _, _, si)) in variants.iter().enumerate() {
        for row in 0..rows {
            for col in 0..32 * blocks {
                let s = sv[si][row * kb + 1 + col / 32];
                want[(v * r + row) * c + col] = fp4_value(&qw[row * kw + 4 + 4 * (col / 32)..], col, packed, s) as f32;
            }
        }
    }
    let qbytes: Vec<u8> = qw.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut tensors = vec![HostTensor::from_bytes(DType::U32, &[rows, kw], qbytes)];
    for v in &sv {
        tensors.push(HostTensor::from_bytes(DType::U8, &[rows, kb], v.clone()));
    }
    tensors.push(poisoned(DType::Bf16, &[4, r, c]));
    Case::new(
        "dequant_fp4_stream",
        b.finish().unwrap(),
        tensors,
        bitwise_f32(4, want, r, c, "dequant_fp4_stream variant"),
    )
}

/// `wgmma` with A from registers and B stored `[K, N]` (N-contiguous, the transpose mode), as attention's
/// `O += P V`: A a bf16 register tile [64, 128] (an f32 load halved by a map), V [128, 64] in a swizzled shared
/// tile (eight k16 steps down its rows), acc [64, 64] on one warpgroup. The accumulator starts as NaN and the
/// product is issued with `accumulate = false`, so the NaNs must not survive.
pub fn mma_async_rs_bmn() -> Case {
    let (m, n, kd) = (64usize, 64usize, 128usize);
    let mut b = KernelBuilder::new("p_mma_async_rs_bmn", 128);
    let a = matrix(&mut b, "a", DType::F32, [m, kd], Access::Read);
    let v = matrix(&mut b, "v", DType::Bf16, [kd, n], Access::Read);
    let c = matrix(&mut b, "c", DType::F32, [m, n], Access::Write);
    let sv = b.shared("sv", DType::Bf16, kd as u32, n as u32, 1, Swizzle::Xor16B);
    let ta = b.tile("ta", DType::Bf16, m as u32, kd as u32, [4, 1]);
    let acc = b.tile("acc", DType::F32, m as u32, n as u32, [4, 1]);
    let dv = b.slot(sv, 0i64);
    b.copy_async(dv.clone(), view(v, 0i64, n as i64, kd as i64, n as i64, 8));
    b.commit();
    b.load(ta, Place::Global(view(a, 0i64, kd as i64, m as i64, kd as i64, 2)));
    b.map(ta, Expr::Elem(ta) * 0.5);
    b.map(acc, f64::NAN);
    b.wait(0);
    b.barrier();
    b.mma_async_init(acc, Operand::Reg(ta), Operand::Shared { src: dv, transpose: false }, false);
    b.mma_wait(0);
    b.store(acc, Place::Global(view(c, 0i64, n as i64, m as i64, n as i64, 2)));
    let k = b.finish().unwrap();
    let mut rng = Rng::new(31);
    let av = rng.vals(DType::F32, m * kd, -1.0, 1.0);
    let vv = rng.vals(DType::Bf16, kd * n, -1.0, 1.0);
    let a_bf: Vec<f32> = av.iter().map(|&x| half::bf16::from_f32(x * 0.5).to_f32()).collect();
    let want = gemm_check(m, n, kd, &a_bf, false, &vv, false);
    product_case(
        "mma_async_rs_bmn",
        k,
        vec![HostTensor::from_f32(DType::F32, &[m, kd], &av), HostTensor::from_f32(DType::Bf16, &[kd, n], &vv)],
        (m, n),
        want,
    )
}

/// Two warpgroups sharing one 64-row tile (the MLA decode's `VWG=2`): `s = A W^T` on a [64, 64] accumulator
/// on [4, 1] warps, replicated (both warpgroups compute it from the same shared A and W), `p = bf16(s / 8)`, then
/// `o = p V` on a [64, 64] accumulator on [4, 2] warps (column bands: each warpgroup multiplies 32 of V's 64
/// columns, V stored [K, N] in a swizzled shared tile). Both products start from NaN with `accumulate = false`.
pub fn mma_async_replicated_and_banded() -> Case {
    let (m, n, kd) = (64usize, 64usize, 64usize);
    let mut b = KernelBuilder::new("p_mma_async_replicated_banded", 256);
    let a = matrix(&mut b, "a", DType::Bf16, [m, kd], Access::Read);
    let w = matrix(&mut b, "w", DType::Bf16, [n, kd], Access::Read);
    let v = matrix(&mut b, "v", DType::Bf16, [n, n], Access::Read);
    let c = matrix(&mut b, "c", DType::F32, [m, n], Access::Write);
    let sa = b.shared("sa", DType::Bf16, m as u32, kd as u32, 1, Swizzle::Xor16B);
    let sw = b.shared("sw", DType::Bf16, n as u32, kd as u32, 1, Swizzle::Xor16B);
    let sv = b.shared("sv", DType::Bf16, n as u32, n as u32, 1, Swizzle::Xor16B);
    let s = b.tile("s", DType::F32, m as u32, n as u32, [4, 1]);
    let p = b.tile("p", DType::Bf16, m as u32, n as u32, [4, 1]);
    let o = b.tile("o", DType::F32, m as u32, n as u32, [4, 2]);
    let (da, dw, dv) = (b.slot(sa, 0i64), b.slot(sw, 0i64), b.slot(sv, 0i64));
    b.copy_async(da.clone(), view(a, 0i64, kd as i64, m as i64, kd as i64, 8));
    b.copy_async(dw.clone(), view(w, 0i64, kd as i64, n as i64, kd as i64, 8));
    b.copy_async(dv.clone(), view(v, 0i64, n as i64, n as i64, n as i64, 8));
    b.commit();
    b.map(s, f64::NAN);
    b.map(o, f64::NAN);
    b.wait(0);
    b.barrier();
    b.mma_async_init(
        s,
        Operand::Shared { src: da, transpose: false },
        Operand::Shared { src: dw, transpose: true },
        false,
    );
    b.mma_wait(0);
    b.map(p, Expr::Elem(s) * 0.125);
    b.mma_async_init(o, Operand::Reg(p), Operand::Shared { src: dv, transpose: false }, false);
    b.mma_wait(0);
    b.store(o, Place::Global(view(c, 0i64, n as i64, m as i64, n as i64, 2)));
    let sp = ScoresPv::new(33, m, n, kd);
    Case::new("mma_async_replicated_and_banded", b.finish().unwrap(), sp.tensors(), move |ts| {
        close("c", &ts[3].to_f32_vec(), &sp.pv, 1e-3)
    })
}

/// The data of the `S = A W^T`, `P = bf16(S / 8)`, `P V` cases: A [M, K] and W [N, K] in multiples of 1/8 (so the
/// scores are exact in f32 on both sides and P's bf16 rounding is the same), V [N, N], and the references.
struct ScoresPv {
    dims: (usize, usize, usize),
    a: Vec<f32>,
    w: Vec<f32>,
    v: Vec<f32>,
    /// S, [M, N].
    s: Vec<f32>,
    /// P V, [M, N].
    pv: Vec<f32>,
}

impl ScoresPv {
    fn new(seed: u64, m: usize, n: usize, kd: usize) -> Self {
        let mut rng = Rng::new(seed);
        let eighths = |v: Vec<f32>| v.into_iter().map(|x| (x * 8.0).round() / 8.0).collect::<Vec<f32>>();
        let a = eighths(rng.vals(DType::Bf16, m * kd, -1.0, 1.0));
        let w = eighths(rng.vals(DType::Bf16, n * kd, -1.0, 1.0));
        let v = rng.vals(DType::Bf16, n * n, -1.0, 1.0);
        let s = gemm_check(m, n, kd, &a, false, &w, true);
        let p_bf: Vec<f32> = s.iter().map(|&x| half::bf16::from_f32(x * 0.125).to_f32()).collect();
        let pv = gemm_check(m, n, n, &p_bf, false, &v, false);
        ScoresPv { dims: (m, n, kd), a, w, v, s, pv }
    }

    /// The kernel's tensors: a, w, v, and the poisoned f32 output [M, N].
    fn tensors(&self) -> Vec<HostTensor> {
        let (m, n, kd) = self.dims;
        vec![
            HostTensor::from_f32(DType::Bf16, &[m, kd], &self.a),
            HostTensor::from_f32(DType::Bf16, &[n, kd], &self.w),
            HostTensor::from_f32(DType::Bf16, &[n, n], &self.v),
            poisoned(DType::F32, &[m, n]),
        ]
    }
}

/// Warp specialization through shared memory (FlashMLA's decode split): in a block of two warpgroups, only
/// warpgroup 0 computes `S = A W^T` (`wgmma`, [64, 64] on [4, 1] warps), its row max, `P = bf16(S / 8)`, and
/// stores P and the row max (column 0 of a [64, 8] f32 buffer); then both warpgroups multiply P from shared
/// memory by their column halves of V ([4, 2] warps) and scale each row by the max they read back:
/// `c = (P V) * rowmax(S)`. The score tile starts as NaN inside the body, so a warpgroup reading its own stale
/// replica instead of the shared copy would show.
pub fn first_warpgroups_share_p() -> Case {
    let (m, n, kd) = (64usize, 64usize, 64usize);
    let mut b = KernelBuilder::new("p_first_warpgroups_share_p", 256);
    let a = matrix(&mut b, "a", DType::Bf16, [m, kd], Access::Read);
    let w = matrix(&mut b, "w", DType::Bf16, [n, kd], Access::Read);
    let v = matrix(&mut b, "v", DType::Bf16, [n, n], Access::Read);
    let c = matrix(&mut b, "c", DType::F32, [m, n], Access::Write);
    let sa = b.shared("sa", DType::Bf16, m as u32, kd as u32, 1, Swizzle::Xor16B);
    let sw = b.shared("sw", DType::Bf16, n as u32, kd as u32, 1, Swizzle::Xor16B);
    let sv = b.shared("sv", DType::Bf16, n as u32, n as u32, 1, Swizzle::Xor16B);
    let sp = b.shared("sp", DType::Bf16, m as u32, n as u32, 1, Swizzle::Xor16B);
    let sm = b.shared("smax", DType::F32, m as u32, 8, 1, Swizzle::None);
    let s = b.tile("s", DType::F32, m as u32, n as u32, [4, 1]);
    let p = b.tile("p", DType::Bf16, m as u32, n as u32, [4, 1]);
    let rm = b.vec("rowmax", m as u32, [4, 1]);
    let rt = b.tile("rowmax_t", DType::F32, m as u32, 8, [4, 1]);
    let o = b.tile("o", DType::F32, m as u32, n as u32, [4, 2]);
    let ro = b.vec("rowmax_o", m as u32, [4, 2]);
    let (da, dw, dv, dp, dm) =
        (b.slot(sa, 0i64), b.slot(sw, 0i64), b.slot(sv, 0i64), b.slot(sp, 0i64), b.slot(sm, 0i64));
    b.copy_async(da.clone(), view(a, 0i64, kd as i64, m as i64, kd as i64, 8));
    b.copy_async(dw.clone(), view(w, 0i64, kd as i64, n as i64, kd as i64, 8));
    b.copy_async(dv.clone(), view(v, 0i64, n as i64, n as i64, n as i64, 8));
    b.commit();
    b.map(o, f64::NAN);
    b.wait(0);
    b.barrier();
    b.first_warpgroups(1, |b| {
        b.map(s, f64::NAN);
        b.mma_async_init(
            s,
            Operand::Shared { src: da, transpose: false },
            Operand::Shared { src: dw, transpose: true },
            false,
        );
        b.mma_wait(0);
        b.reduce(rm, s, ReduceOp::Max, false);
        b.map(p, Expr::Elem(s) * 0.125);
        b.store(p, Place::Shared(dp.clone()));
        b.map(rt, Expr::RowVal(rm));
        b.store(rt, Place::Shared(dm));
    });
    b.wait(0);
    b.barrier();
    b.vec_map(ro, Expr::shared_load(sm, 0i64, Expr::RowIdx, 0i64));
    b.mma_async_init(
        o,
        Operand::Shared { src: dp, transpose: false },
        Operand::Shared { src: dv, transpose: false },
        false,
    );
    b.mma_wait(0);
    b.map(o, Expr::Elem(o) * Expr::RowVal(ro));
    b.store(o, Place::Global(view(c, 0i64, n as i64, m as i64, n as i64, 2)));
    let sp = ScoresPv::new(34, m, n, kd);
    let want: Vec<f32> = (0..m * n)
        .map(|i| {
            let r = i / n;
            let max = sp.s[r * n..(r + 1) * n].iter().copied().fold(f32::NEG_INFINITY, f32::max);
            sp.pv[i] * max
        })
        .collect();
    Case::new("first_warpgroups_share_p", b.finish().unwrap(), sp.tensors(), move |ts| {
        close("c", &ts[3].to_f32_vec(), &want, 1e-3)
    })
}

/// Two warpgroups (acc [128, 64] on [8, 1] warps), two chained `wgmma` products in flight before one wait:
/// `acc = A W^T` with both operands K-contiguous in shared memory (A [128, 64], W [64, 64] stored [N, K]),
/// then `acc += T V` with T a bf16 register tile [128, 64] and V [64, 64] stored [K, N] in a window starting
/// 64 rows into its buffer (f16 would take the same path; bf16 here).
pub fn mma_async_ss_then_rs() -> Case {
    let (m, n, kd) = (128usize, 64usize, 64usize);
    let mut b = KernelBuilder::new("p_mma_async_ss_then_rs", 256);
    let a = matrix(&mut b, "a", DType::Bf16, [m, kd], Access::Read);
    let w = matrix(&mut b, "w", DType::Bf16, [n, kd], Access::Read);
    let t = matrix(&mut b, "t", DType::F32, [m, kd], Access::Read);
    let v = matrix(&mut b, "v", DType::Bf16, [kd, n], Access::Read);
    let c = matrix(&mut b, "c", DType::F32, [m, n], Access::Write);
    let sa = b.shared("sa", DType::Bf16, m as u32, kd as u32, 1, Swizzle::Xor16B);
    let sw = b.shared("sw", DType::Bf16, n as u32, kd as u32, 1, Swizzle::Xor16B);
    let sv = b.shared("sv", DType::Bf16, 2 * kd as u32, n as u32, 1, Swizzle::Xor16B);
    let tt = b.tile("tt", DType::Bf16, m as u32, kd as u32, [8, 1]);
    let acc = b.tile("acc", DType::F32, m as u32, n as u32, [8, 1]);
    let da = b.slot(sa, 0i64);
    b.copy_async(da.clone(), view(a, 0i64, kd as i64, m as i64, kd as i64, 8));
    let dw = b.slot(sw, 0i64);
    b.copy_async(dw.clone(), view(w, 0i64, kd as i64, n as i64, kd as i64, 8));
    let dv = b.window(sv, 0i64, kd as u32, 0, kd as u32, n as u32);
    b.copy_async(dv.clone(), view(v, 0i64, n as i64, kd as i64, n as i64, 8));
    b.commit();
    b.load(tt, Place::Global(view(t, 0i64, kd as i64, m as i64, kd as i64, 2)));
    b.wait(0);
    b.barrier();
    b.mma_async_init(
        acc,
        Operand::Shared { src: da, transpose: false },
        Operand::Shared { src: dw, transpose: true },
        false,
    );
    b.mma_async(acc, Operand::Reg(tt), Operand::Shared { src: dv, transpose: false });
    b.mma_wait(0);
    b.store(acc, Place::Global(view(c, 0i64, n as i64, m as i64, n as i64, 2)));
    let k = b.finish().unwrap();
    let mut rng = Rng::new(32);
    let av = rng.vals(DType::Bf16, m * kd, -1.0, 1.0);
    let wv = rng.vals(DType::Bf16, n * kd, -1.0, 1.0);
    let tv = rng.vals(DType::F32, m * kd, -1.0, 1.0);
    let vv = rng.vals(DType::Bf16, kd * n, -1.0, 1.0);
    let t_bf: Vec<f32> = tv.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect();
    let w1 = gemm_check(m, n, kd, &av, false, &wv, true);
    let w2 = gemm_check(m, n, kd, &t_bf, false, &vv, false);
    let want: Vec<f32> = w1.iter().zip(&w2).map(|(x, y)| x + y).collect();
    product_case(
        "mma_async_ss_then_rs",
        k,
        vec![
            HostTensor::from_f32(DType::Bf16, &[m, kd], &av),
            HostTensor::from_f32(DType::Bf16, &[n, kd], &wv),
            HostTensor::from_f32(DType::F32, &[m, kd], &tv),
            HostTensor::from_f32(DType::Bf16, &[kd, n], &vv),
        ],
        (m, n),
        want,
    )
}

/// `Fp4Gemv` on 4 warps: a [32, 16] f32 result of 27 valid weight rows (a view one block into each row) times
/// 11 valid bf16 activation rows, over 61 valid blocks of words (16 quads, the last one block long; the scale view
/// covers 62 blocks, the tensors 64) and activation columns cut at 1915 (not a multiple of 8: the group 1912..1920
/// reads as zeros), in four variants that cover both layouts, the folded and general decodes (NaN scale bytes, the
/// subnormal 2^-127), chunks 1, 2, 4 and 8 (8: two warps take all quads, two none) and rings of 1 to 4 slots
/// (wrapping several times, and ring 3 not dividing a warp's quads); against an f64 sum computed here (rows past 27
/// and tokens past 11 must be 0). The GPU sums in its lane-permuted K order, so this checks that order too.
pub fn fp4_gemv() -> Case {
    fp4_gemv_case(false)
}

/// [`fp4_gemv`] with the ring in shared memory (`staged`: cp.async stages of 3 and 4 quads per warp, so the ring
/// wraps several times): the same data, views and checks (the scale view starts one byte into each 64-byte
/// row, so the lanes' aligned scale words sit at every offset).
pub fn fp4_gemv_staged() -> Case {
    fp4_gemv_case(true)
}

fn fp4_gemv_case(staged: bool) -> Case {
    let (r, t) = (32usize, 16usize);
    let (rows, toks, blocks, xcols) = (27usize, 11usize, 61usize, 1915usize);
    let (kw, kb, k) = (64 * 4, 64, 2048usize);
    // (packed, fold, finite, scale set, chunk, ring)
    let variants = [
        (true, true, true, 0usize, 1u32, 2u32),
        (false, false, false, 1, 2, 1),
        (true, false, false, 1, 4, 3),
        (false, true, true, 0, 8, 4),
    ];
    let mut b = KernelBuilder::new(if staged { "p_fp4_gemv_staged" } else { "p_fp4_gemv" }, 128);
    let dims = |a: usize, bb: usize| [Expr::Int(a as i64), Expr::Int(bb as i64)];
    let q = b.tensor("q", DType::U32, &dims(rows, kw), Access::Read);
    let scales: Vec<TensorId> =
        (0..2).map(|i| b.tensor(&format!("s{i}"), DType::U8, &dims(rows, kb), Access::Read)).collect();
    let x = b.tensor("x", DType::Bf16, &dims(toks, k), Access::Read);
    let y = b.tensor("y", DType::F32, &[Expr::Int(4), Expr::Int(r as i64), Expr::Int(t as i64)], Access::Write);
    let out = b.shared("out", DType::F32, r as u32, t as u32 + 1, 4, Swizzle::None);
    // Staged: 16 + 4 warps x 4 stages x 2 x 1280 bytes of rings (21 tiles of 2 KB), which the partials alias.
    let scratch = b.shared("scratch", DType::F32, r as u32, t as u32, if staged { 21 } else { 4 }, Swizzle::None);
    let o = b.tile("o", DType::F32, r as u32, t as u32, [2, 2]);
    for (v, &(packed, fold, finite, si, chunk, ring)) in variants.iter().enumerate() {
        let qv = view(q, 4i64, kw as i64, rows as i64, (4 * blocks) as i64, 4);
        let sv = view(scales[si], 1i64, kb as i64, rows as i64, (blocks + 1) as i64, 1);
        let xv = view(x, 32i64, k as i64, toks as i64, xcols as i64, 8);
        let w = b.window(out, v as i64, 0, 0, r as u32, t as u32);
        let flags = Fp4Flags { packed, fold, finite };
        let ring = if staged {
            // Stages 3 and 4 (ring + 2 of the register variants, capped at 4 by the 32-row tile), every L2 prefetch
            // size (a hint: the values are the same).
            let l2_prefetch = [0, 64, 128, 256][v];
            Fp4Ring::Shared(Fp4Staging {
                stages: (ring + 2).min(4),
                l2_prefetch,
                tiled: false,
                bulk: false,
                x_two_ahead: false,
            })
        } else {
            Fp4Ring::Registers(ring)
        };
        b.fp4_gemv(w.clone(), scratch, qv, sv, xv, flags, chunk, ring);
        b.load(o, Place::Shared(w));
        b.store(o, Place::Global(view(y, (v * r * t) as i64, t as i64, r as i64, t as i64, 2)));
    }
    let kern = b.finish().unwrap();
    let mut rng = Rng::new(29);
    let qw: Vec<u32> = (0..rows * kw).map(|_| rng.next_u64() as u32).collect();
    let sv: [Vec<u8>; 2] = [
        (0..rows * kb).map(|i| 118 + (i * 7 % 9) as u8).collect(),
        (0..rows * kb)
            .map(|i| {
                if i == 4 * kb + 1 {
                    255
                } else if i % 11 == 5 {
                    0
                } else {
                    100 + (i * 5 % 40) as u8
                }
            })
            .collect(),
    ];
    let xvals = rng.vals(DType::Bf16, toks * k, -1.0, 1.0);
    // (value, sum of |terms|) per output element.
    let mut want = vec![(0f64, 0f64); 4 * r * t];
    for (v, &(packed, _, _, si, _, _)) in variants.iter().enumerate() {
        for row in 0..rows {
            for tok in 0..toks {
                let (mut s, mut a) = (0f64, 0f64);
                for col in 0..32 * blocks {
                    let sc = sv[si][row * kb + 1 + col / 32];
                    let wv = fp4_value(&qw[row * kw + 4 + 4 * (col / 32)..], col, packed, sc);
                    let xe = if col / 8 * 8 + 8 <= xcols { xvals[tok * k + 32 + col] as f64 } else { 0.0 };
                    s += wv * xe;
                    a += (wv * xe).abs();
                }
                want[(v * r + row) * t + tok] = (s, a);
            }
        }
    }
    let qbytes: Vec<u8> = qw.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut tensors = vec![HostTensor::from_bytes(DType::U32, &[rows, kw], qbytes)];
    for s in &sv {
        tensors.push(HostTensor::from_bytes(DType::U8, &[rows, kb], s.clone()));
    }
    tensors.push(HostTensor::from_f32(DType::Bf16, &[toks, k], &xvals));
    tensors.push(poisoned(DType::F32, &[4, r, t]));
    Case::new(if staged { "fp4_gemv_staged" } else { "fp4_gemv" }, kern, tensors, move |ts| {
        let got = ts[4].to_f32_vec();
        let mut nans = 0;
        for (i, (g, &(w, a))) in got.iter().zip(&want).enumerate() {
            let ok = if w.is_nan() {
                nans += 1;
                g.is_nan()
            } else {
                (*g as f64 - w).abs() <= 1e-5 * a + 1e-30
            };
            assert!(
                ok,
                "fp4_gemv variant {} row {} token {}: got {g:e}, want {w:e} (sum of |terms| {a:e})",
                i / (r * t),
                (i / t) % r,
                i % t
            );
        }
        // The NaN block (scale byte 4 kb + 1: row 4, block 0 of the view) reaches the general-path variants.
        assert_eq!(nans, 2 * toks, "NaN rows");
    })
}

/// TMA box copies completing on mbarriers, through two phases of a two-stage ring: x bf16 [70, 72] (a 2-D map
/// [72, 70], boxes [64, 32]) and w bf16 [3, 40, 72] (a 3-D map [72, 40, 3], boxes [64, 32, 1]) into 128-byte-
/// swizzled tiles (read back through the swizzled shared layout, so a swizzle mismatch shows), with boxes
/// partly (K 64..128, rows 48..112, w rows 24..56) and fully-negative-offset (K -8.., rows -5..) outside the
/// tensors, which must read as zero. Stage s waits on `full[s]` with parity 0; stage 0 is then refilled and
/// waited on with parity 1; a block-wide `MbarArrive` barrier (count = threads) that thread 0 alone waits on
/// (`elected`, the producer's wait) separates the reads of stage 0 from its refill. Every element is checked exactly.
pub fn tma_mbarrier() -> Case {
    let (m, kd, g, n) = (70usize, 72usize, 3usize, 40usize);
    let mut b = KernelBuilder::new("p_tma_mbarrier", 128);
    let x = matrix(&mut b, "x", DType::Bf16, [m, kd], Access::Read);
    let w = b.tensor("w", DType::Bf16, &[Expr::Int(g as i64), Expr::Int(n as i64), Expr::Int(kd as i64)], Access::Read);
    let ya = b.tensor("ya", DType::F32, &[Expr::Int(3), Expr::Int(64), Expr::Int(64)], Access::Write);
    let yw = b.tensor("yw", DType::F32, &[Expr::Int(3), Expr::Int(32), Expr::Int(64)], Access::Write);
    let sa = b.shared("sa", DType::Bf16, 64, 64, 2, Swizzle::Xor16B);
    let sw = b.shared("sw", DType::Bf16, 32, 64, 2, Swizzle::Xor16B);
    let ta = b.tile("ta", DType::F32, 64, 64, [4, 1]);
    let tw = b.tile("tw", DType::F32, 32, 64, [2, 1]);
    let full = b.mbarriers("full", 2);
    let done = b.mbarriers("done", 1);
    let mx = b.tensor_map("x_map", x, &[64, 32], Swizzle::Xor16B);
    let mw = b.tensor_map("w_map", w, &[64, 32, 1], Swizzle::Xor16B);
    b.mbar_init(full, 1);
    b.mbar_init(done, 128);
    // (stage, k0, m0, n0, group) per load round.
    let rounds: [(i64, i64, i64, i64, i64); 3] = [(0, 0, 0, 0, 1), (1, 64, 48, 24, 2), (0, -8, -5, 30, 0)];
    let issue = |b: &mut KernelBuilder, r: (i64, i64, i64, i64, i64)| {
        let (s, k0, m0, n0, gi) = r;
        b.mbar_arrive_expect_tx(full, s, 2 * 32 * 64 * 2 + 32 * 64 * 2);
        for half in 0..2u32 {
            let dst = b.window(sa, s, 32 * half, 0, 32, 64);
            b.tma_load(mx, dst, vec![Expr::Int(k0), Expr::Int(m0 + 32 * half as i64)], full, s);
        }
        let dst = b.slot(sw, s);
        b.tma_load(mw, dst, vec![Expr::Int(k0), Expr::Int(n0), Expr::Int(gi)], full, s);
    };
    let read = |b: &mut KernelBuilder, s: i64, out: i64, parity: i64| {
        b.mbar_wait(full, s, parity);
        b.load(ta, Place::Shared(b.slot(sa, s)));
        b.load(tw, Place::Shared(b.slot(sw, s)));
        b.store(ta, Place::Global(view(ya, out * 64 * 64, 64i64, 64i64, 64i64, 2)));
        b.store(tw, Place::Global(view(yw, out * 32 * 64, 64i64, 32i64, 64i64, 2)));
    };
    issue(&mut b, rounds[0]);
    issue(&mut b, rounds[1]);
    read(&mut b, 0, 0, 0);
    read(&mut b, 1, 1, 0);
    // Every thread is done reading stage 0 before its refill: all arrive, the producer (thread 0) waits.
    b.mbar_arrive(done, 0i64);
    b.mbar_wait_elected(done, 0i64, 0i64);
    issue(&mut b, rounds[2]);
    read(&mut b, 0, 2, 1);
    let mut rng = Rng::new(41);
    let xv = rng.vals(DType::Bf16, m * kd, -2.0, 2.0);
    let wv = rng.vals(DType::Bf16, g * n * kd, -2.0, 2.0);
    let mut want_a = vec![0.0f32; 3 * 64 * 64];
    let mut want_w = vec![0.0f32; 3 * 32 * 64];
    for (o, &(_, k0, m0, n0, gi)) in rounds.iter().enumerate() {
        for r in 0..64i64 {
            for c in 0..64i64 {
                let (row, col) = (m0 + r, k0 + c);
                if (0..m as i64).contains(&row) && (0..kd as i64).contains(&col) {
                    want_a[o * 4096 + (r * 64 + c) as usize] = xv[(row * kd as i64 + col) as usize];
                }
            }
        }
        for r in 0..32i64 {
            for c in 0..64i64 {
                let (row, col) = (n0 + r, k0 + c);
                if (0..n as i64).contains(&row) && (0..kd as i64).contains(&col) {
                    want_w[o * 2048 + (r * 64 + c) as usize] = wv[((gi * n as i64 + row) * kd as i64 + col) as usize];
                }
            }
        }
    }
    Case::new(
        "tma_mbarrier",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::Bf16, &[m, kd], &xv),
            HostTensor::from_f32(DType::Bf16, &[g, n, kd], &wv),
            poisoned(DType::F32, &[3, 64, 64]),
            poisoned(DType::F32, &[3, 32, 64]),
        ],
        move |ts| {
            close("ya", &ts[2].to_f32_vec(), &want_a, 0.0);
            close("yw", &ts[3].to_f32_vec(), &want_w, 0.0);
        },
    )
}

/// Thread-block clusters of 2 CTAs (4 blocks, 2 warps each): in each of 3 rounds over a 2-slot ring, CTA r of a
/// cluster copies rows 32r..32r+32 of a 64x64 bf16 box of `x` with a `.multicast::cluster` TMA into slot
/// `u % 2` of BOTH CTAs, completing on both CTAs' full barriers; each CTA waits, reads the whole box (half of
/// it written by its peer) and stores it to `y[block, u]`. A slot is refilled only after the consumers of both
/// CTAs released it (remote arrivals on each CTA's empty barrier, counted 2 x 2 warps); the third round's box
/// lies partly outside `x` (zero fill). The boxes move with the cluster index. With `drop_peer_release`, CTAs
/// release only their own slot: the producers' waits can never return (a deadlock on the CPU); with
/// `skip_empty_wait`, producers refill without waiting for the releases.
pub fn tma_multicast_cluster_with(drop_peer_release: bool, skip_empty_wait: bool) -> Case {
    let (m, kd) = (90usize, 80usize);
    let rounds: [(i64, i64); 3] = [(0, 0), (16, 24), (40, 50)];
    let mut b = KernelBuilder::new(if drop_peer_release { "p_tma_mc_dropped" } else { "p_tma_multicast_cluster" }, 64);
    let x = matrix(&mut b, "x", DType::Bf16, [m, kd], Access::Read);
    let y = b.tensor("y", DType::F32, &[Expr::Int(4), Expr::Int(3), Expr::Int(64), Expr::Int(64)], Access::Write);
    b.grid(4i64, 1i64, 1i64);
    b.cluster([2, 1, 1]);
    let sa = b.shared("sa", DType::Bf16, 64, 64, 2, Swizzle::Xor16B);
    let ta = b.tile("ta", DType::F32, 64, 64, [2, 1]);
    let full = b.mbarriers("full", 2);
    let empty = b.mbarriers("empty", 2);
    let mx = b.tensor_map("x_map", x, &[64, 32], Swizzle::Xor16B);
    b.mbar_init(full, 1);
    b.mbar_init(empty, 2 * 2);
    // Both CTAs' barriers are initialized before any peer arrives on them or copies into them.
    b.cluster_sync();
    let rank = b.cluster_rank();
    let cid = Expr::block_idx(0) / 2i64;
    let issue = |b: &mut KernelBuilder, u: usize| {
        let (k0, m0) = rounds[u];
        let s = (u % 2) as i64;
        // The slot's previous use was released by both CTAs (a fresh barrier passes parity 1).
        if !skip_empty_wait {
            b.mbar_wait_elected(empty, s, ((u / 2 + 1) % 2) as i64);
        }
        b.mbar_arrive_expect_tx(full, s, 64 * 64 * 2);
        // Rank r's half lands at rows 32r.. of the slot: a window per rank, chosen by the (block-uniform) rank.
        for r in 0..2u32 {
            b.if_(rank.eq(r as i64), |b| {
                let dst = b.window(sa, s, 32 * r, 0, 32, 64);
                let coords = vec![Expr::Int(k0), Expr::Int(m0 + 32 * r as i64) + cid.clone() * 8i64];
                b.tma_load_multicast(mx, dst, coords, full, s, 3i64);
            });
        }
    };
    // Two rounds in flight: the third refills slot 0 once both CTAs have read round 0.
    issue(&mut b, 0);
    issue(&mut b, 1);
    for u in 0..rounds.len() {
        let s = (u % 2) as i64;
        b.mbar_wait(full, s, ((u / 2) % 2) as i64);
        b.load(ta, Place::Shared(b.slot(sa, s)));
        let out = (Expr::block_idx(0) * 3i64 + u as i64) * (64 * 64) as i64;
        b.store(ta, Place::Global(view(y, out, 64i64, 64i64, 64i64, 2)));
        // Release the slot in both CTAs (their producers multicast into this one's copy too).
        if drop_peer_release {
            b.mbar_arrive_cluster(empty, s, rank.clone());
        } else {
            b.mbar_arrive_cluster(empty, s, 0i64);
            b.mbar_arrive_cluster(empty, s, 1i64);
        }
        if u + 2 < rounds.len() {
            issue(&mut b, u + 2);
        }
    }
    // No CTA exits while a peer may still arrive on its barriers.
    b.cluster_sync();
    let xv = Rng::new(43).vals(DType::Bf16, m * kd, -2.0, 2.0);
    let mut want = vec![0.0f32; 4 * 3 * 64 * 64];
    for blk in 0..4i64 {
        for (u, &(k0, m0)) in rounds.iter().enumerate() {
            for r in 0..64i64 {
                for c in 0..64i64 {
                    let (row, col) = (m0 + 8 * (blk / 2) + r, k0 + c);
                    if (0..m as i64).contains(&row) && (0..kd as i64).contains(&col) {
                        want[((blk * 3 + u as i64) * 4096 + r * 64 + c) as usize] =
                            xv[(row * kd as i64 + col) as usize];
                    }
                }
            }
        }
    }
    Case::new(
        if drop_peer_release { "tma_mc_dropped" } else { "tma_multicast_cluster" },
        b.finish().unwrap(),
        vec![HostTensor::from_f32(DType::Bf16, &[m, kd], &xv), poisoned(DType::F32, &[4, 3, 64, 64])],
        move |ts| close("y", &ts[1].to_f32_vec(), &want, 0.0),
    )
}

/// See [`tma_multicast_cluster_with`].
pub fn tma_multicast_cluster() -> Case {
    tma_multicast_cluster_with(false, false)
}
/// Wide per-thread accesses (`load_wide` / `store_wide`): f32 x 4 and bf16 x 8 loads into float arrays at
/// offsets, u8 x 16 into an int array, every element changed by its lane position (so a wrong lane or element
/// order shows), stored back as f32 x 4, bf16 x 8 (rounded) and i32 x 2 (8 bytes); a few threads skip, leaving
/// their outputs poisoned.
pub fn wide_access() -> Case {
    let threads = 64u32;
    let blocks = 3usize;
    let n = blocks * threads as usize;
    let mut b = KernelBuilder::new("p_wide", threads);
    let xf = b.tensor("xf", DType::F32, &[Expr::Int(4 * n as i64)], Access::Read);
    let xb = b.tensor("xb", DType::Bf16, &[Expr::Int(8 * n as i64)], Access::Read);
    let xu = b.tensor("xu", DType::U8, &[Expr::Int(16 * n as i64)], Access::Read);
    let yf = b.tensor("yf", DType::F32, &[Expr::Int(4 * n as i64)], Access::Write);
    let yb = b.tensor("yb", DType::Bf16, &[Expr::Int(8 * n as i64)], Access::Write);
    let yi = b.tensor("yi", DType::I32, &[Expr::Int(2 * n as i64)], Access::Write);
    b.grid(blocks as i64, 1i64, 1i64);
    b.threads(|b| {
        let t = Expr::thread_idx();
        let g = b.let_("g", Expr::block_idx(0) * threads as i64 + t.clone());
        b.if_((&t % 7i64).ne(3i64), |b| {
            let a = b.let_array("a", 12, ScalarTy::Float, 0.0);
            b.load_wide(a, 4, xf, &g * 4i64, 4);
            for j in 0..4u32 {
                let v = Expr::array_get(a, 4 + j as i64) * (j as f64 + 1.0) + 0.25 * j as f64;
                b.array_set(a, 4 + j as i64, v);
            }
            b.store_wide(yf, &g * 4i64, a, 4, 4);
            let h = b.let_array("h", 8, ScalarTy::Float, 0.0);
            b.load_wide(h, 0, xb, &g * 8i64, 8);
            for j in 0..8u32 {
                b.array_set(h, j as i64, Expr::array_get(h, j as i64) * 3.0 + j as f64);
            }
            b.store_wide(yb, &g * 8i64, h, 0, 8);
            let u = b.let_array("u", 16, ScalarTy::Int, 0i64);
            b.load_wide(u, 0, xu, &g * 16i64, 16);
            let w = b.let_array("w", 2, ScalarTy::Int, 0i64);
            let mut sum = Expr::Int(0);
            for j in 0..16u32 {
                sum = sum + Expr::array_get(u, j as i64) * (j as i64 + 1);
            }
            b.array_set(w, 0i64, sum);
            b.array_set(w, 1i64, Expr::array_get(u, 0i64) - Expr::array_get(u, 15i64) * 256i64 - &g);
            b.store_wide(yi, &g * 2i64, w, 0, 2);
        });
    });
    let mut rng = Rng::new(77);
    let fv = rng.vals(DType::F32, 4 * n, -3.0, 3.0);
    let bv = rng.vals(DType::Bf16, 8 * n, -3.0, 3.0);
    let uv: Vec<i64> = (0..16 * n).map(|_| rng.int(0, 256)).collect();
    let (fv2, bv2, uv2) = (fv.clone(), bv.clone(), uv.clone());
    let poison = |d: DType, len: usize| poisoned(d, &[len]);
    let (pf, pb, pi) = (poison(DType::F32, 4 * n), poison(DType::Bf16, 8 * n), poison(DType::I32, 2 * n));
    Case::new(
        "wide_access",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::F32, &[4 * n], &fv),
            HostTensor::from_f32(DType::Bf16, &[8 * n], &bv),
            HostTensor::from_i64(DType::U8, &[16 * n], &uv),
            pf.clone(),
            pb.clone(),
            pi.clone(),
        ],
        move |ts| {
            for g in 0..n {
                let skip = (g % threads as usize) % 7 == 3;
                for j in 0..4 {
                    let i = 4 * g + j;
                    if skip {
                        assert_eq!(ts[3].get_f32(i).to_bits(), pf.get_f32(i).to_bits(), "yf[{i}] written");
                    } else {
                        let want = fv2[i] * (j as f32 + 1.0) + 0.25 * j as f32;
                        close(&format!("yf[{i}]"), &[ts[3].get_f32(i)], &[want], 1e-6);
                    }
                }
                for j in 0..8 {
                    let i = 8 * g + j;
                    if skip {
                        assert_eq!(ts[4].get_f32(i).to_bits(), pb.get_f32(i).to_bits(), "yb[{i}] written");
                    } else {
                        let want = HostTensor::from_f32(DType::Bf16, &[1], &[bv2[i] * 3.0 + j as f32]).get_f32(0);
                        assert_eq!(ts[4].get_f32(i), want, "yb[{i}]");
                    }
                }
                let u = &uv2[16 * g..16 * g + 16];
                let want =
                    [u.iter().enumerate().map(|(j, v)| v * (j as i64 + 1)).sum::<i64>(), u[0] - u[15] * 256 - g as i64];
                for (j, w) in want.iter().enumerate() {
                    let i = 2 * g + j;
                    if skip {
                        assert_eq!(ts[5].get_i64(i), pi.get_i64(i), "yi[{i}] written");
                    } else {
                        assert_eq!(ts[5].get_i64(i), *w, "yi[{i}]");
                    }
                }
            }
        },
    )
}

/// Tile stores through the wide 16-bit paths (`store_global` with vec 8 / 4: a quad of lanes regroups its pairs
/// into 16- or 8-byte accesses) over a ragged [40, *] problem in 32-row tiles on a replicated [2, 1] warp grid
/// (4 warps: the replicas store nothing):
/// - `y` (bf16 [40, 48], vec 8) from an f32 [32, 64] tile: 8 fragments per warp (16-byte groups), the view ends
///   at column 45, inside a group (the pair and element fallback), so columns 45..47 must stay poisoned;
/// - `z` (bf16 [40, 16], vec 4) from a bf16 [32, 16] tile: 2 fragments (8-byte groups), packed words as they are;
/// - `w` (f16 [40, 16], vec 8) from the same bf16 tile: 2 fragments (8 bytes), each pair converted.
pub fn wide_tile_stores() -> Case {
    let (m, ny, vy, nz) = (40usize, 48usize, 45usize, 16usize);
    let mut b = KernelBuilder::new("p_wide_tile_stores", 128);
    let md = b.dim("M");
    let x = b.tensor("x", DType::F32, &[md.clone(), Expr::Int(ny as i64)], Access::Read);
    let y = b.tensor("y", DType::Bf16, &[md.clone(), Expr::Int(ny as i64)], Access::Write);
    let z = b.tensor("z", DType::Bf16, &[md.clone(), Expr::Int(nz as i64)], Access::Write);
    let w = b.tensor("w", DType::F16, &[md.clone(), Expr::Int(nz as i64)], Access::Write);
    let t = b.tile("t", DType::F32, 32, 64, [2, 1]);
    let u = b.tile("u", DType::Bf16, 32, 16, [2, 1]);
    b.grid(md.ceil_div(32i64), 1i64, 1i64);
    let r0 = b.let_("r0", Expr::block_idx(0) * 32i64);
    let rows = md.clone() - r0.clone();
    b.load(t, Place::Global(view(x, &r0 * ny as i64, ny as i64, rows.clone(), vy as i64, 2)));
    b.map(t, Expr::Elem(t) * 1.5 + Expr::RowIdx.to_float() * 0.125 - Expr::ColIdx.to_float());
    b.store(t, Place::Global(view(y, &r0 * ny as i64, ny as i64, rows.clone(), vy as i64, 8)));
    b.map(u, Expr::RowIdx.to_float() * 0.5 + Expr::ColIdx.to_float() * 0.25 + Expr::block_idx(0).to_float());
    b.store(u, Place::Global(view(z, &r0 * nz as i64, nz as i64, rows.clone(), nz as i64, 4)));
    b.store(u, Place::Global(view(w, &r0 * nz as i64, nz as i64, rows, nz as i64, 8)));
    let xs = Rng::new(91).vals(DType::F32, m * ny, -4.0, 4.0);
    Case::new(
        "wide_tile_stores",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::F32, &[m, ny], &xs),
            poisoned(DType::Bf16, &[m, ny]),
            poisoned(DType::Bf16, &[m, nz]),
            poisoned(DType::F16, &[m, nz]),
        ],
        move |ts| {
            let round = |d: DType, v: f32| HostTensor::from_f32(d, &[1], &[v]).get_f32(0);
            for r in 0..m {
                for c in 0..ny {
                    let got = ts[1].get_f32(r * ny + c);
                    if c >= vy {
                        assert!(got.is_nan(), "y[{r}, {c}] past the view was written: {got}");
                    } else {
                        let want = round(DType::Bf16, xs[r * ny + c] * 1.5 + (r % 32) as f32 * 0.125 - c as f32);
                        assert_eq!(got, want, "y[{r}, {c}]");
                    }
                }
                for c in 0..nz {
                    let v = round(DType::Bf16, (r % 32) as f32 * 0.5 + c as f32 * 0.25 + (r / 32) as f32);
                    assert_eq!(ts[2].get_f32(r * nz + c), v, "z[{r}, {c}]");
                    assert_eq!(ts[3].get_f32(r * nz + c), round(DType::F16, v), "w[{r}, {c}]");
                }
            }
        },
    )
}

/// The pair-friendly swizzle (`Xor16BPairs`) on f32 buffers of 256-, 64- and 32-byte rows: tile stores and loads
/// (pairs), scalar reads (`shared_load`) and `cp.async` chunks must all agree on where an element lives.
/// `y1 = x^T` (pair stores, scalar reads across rows), `y2 = x[:, 0..16]` (64-byte rows, pairs both ways),
/// `y3 = x[:, 8..16]` (32-byte rows, filled by `cp.async`, read as pairs).
pub fn shared_pairs_swizzle() -> Case {
    let n = 32usize;
    let mut b = KernelBuilder::new("p_shared_pairs_swizzle", 128);
    let x = matrix(&mut b, "x", DType::F32, [n, n], Access::Read);
    let y1 = matrix(&mut b, "y1", DType::F32, [n, n], Access::Write);
    let y2 = b.tensor("y2", DType::F32, &[Expr::Int(n as i64), Expr::Int(16)], Access::Write);
    let y3 = b.tensor("y3", DType::F32, &[Expr::Int(n as i64), Expr::Int(8)], Access::Write);
    let sp = b.shared("sp", DType::F32, 32, 64, 1, Swizzle::Xor16BPairs);
    let sq = b.shared("sq", DType::F32, 32, 16, 1, Swizzle::Xor16BPairs);
    let sr = b.shared("sr", DType::F32, 32, 8, 2, Swizzle::Xor16BPairs);
    let t = b.tile("t", DType::F32, 32, 32, [2, 2]);
    let u = b.tile("u", DType::F32, 32, 32, [2, 1]);
    let h = b.tile("h", DType::F32, 32, 16, [2, 1]);
    let e = b.tile("e", DType::F32, 32, 8, [2, 1]);
    b.load(t, Place::Global(view(x, 0i64, n as i64, n as i64, n as i64, 2)));
    b.copy_async(b.slot(sr, 1i64), view(x, 8i64, n as i64, n as i64, 8i64, 4));
    b.commit();
    let win = b.window(sp, 0i64, 0, 8, 32, 32);
    b.store(t, Place::Shared(win));
    let winq = b.window(sq, 0i64, 0, 0, 32, 16);
    b.load(h, Place::Global(view(x, 0i64, n as i64, n as i64, 16i64, 2)));
    b.store(h, Place::Shared(winq.clone()));
    b.wait(0);
    b.barrier();
    b.map(u, Expr::shared_load(sp, 0i64, Expr::ColIdx, Expr::RowIdx + 8i64));
    b.store(u, Place::Global(view(y1, 0i64, n as i64, n as i64, n as i64, 2)));
    b.map(h, 0.0);
    b.load(h, Place::Shared(winq));
    b.store(h, Place::Global(view(y2, 0i64, 16i64, n as i64, 16i64, 2)));
    b.load(e, Place::Shared(b.slot(sr, 1i64)));
    b.store(e, Place::Global(view(y3, 0i64, 8i64, n as i64, 8i64, 2)));
    let xs = Rng::new(17).vals(DType::F32, n * n, -3.0, 3.0);
    Case::new(
        "shared_pairs_swizzle",
        b.finish().unwrap(),
        vec![
            HostTensor::from_f32(DType::F32, &[n, n], &xs),
            poisoned(DType::F32, &[n, n]),
            poisoned(DType::F32, &[n, 16]),
            poisoned(DType::F32, &[n, 8]),
        ],
        move |ts| {
            let t: Vec<f32> = (0..n * n).map(|i| xs[(i % n) * n + i / n]).collect();
            close("y1", &ts[1].to_f32_vec(), &t, 0.0);
            let h: Vec<f32> = (0..n * 16).map(|i| xs[(i / 16) * n + i % 16]).collect();
            close("y2", &ts[2].to_f32_vec(), &h, 0.0);
            let e: Vec<f32> = (0..n * 8).map(|i| xs[(i / 8) * n + 8 + i % 8]).collect();
            close("y3", &ts[3].to_f32_vec(), &e, 0.0);
        },
    )
}

/// The E4M3 form of `mma` (`mma.sync m16n8k32 .e4m3`): A `[64, 96]` codes from a window at word column 8 of a
/// wider swizzled buffer (128-byte rows), B stored `[N = 32, K]` (96-byte rows, read transposed), acc `[64, 32]` on
/// [2, 2] warps starting at 1.0 (the product adds to it); every non-NaN code, random. Each element is
/// `1 + sum_k a[m, k] w[n, k]` of exact f32 products, summed in any order (bounded by 2^-20 of the sum of
/// magnitudes); the interpreter sums in order k = 0, 1, ... and agrees to the bit with the same sum in Rust.
pub fn mma_ss_e4m3() -> Case {
    let (m, n, kd) = (64usize, 32usize, 96usize);
    let mut b = KernelBuilder::new("p_mma_ss_e4m3", 128);
    let a = matrix(&mut b, "a", DType::U32, [m, kd / 4], Access::Read);
    let w = matrix(&mut b, "w", DType::U32, [n, kd / 4], Access::Read);
    let c = matrix(&mut b, "c", DType::F32, [m, n], Access::Write);
    let sa = b.shared("sa", DType::U32, 64, 32, 1, Swizzle::Xor16B);
    let sw = b.shared("sw", DType::U32, 32, 24, 1, Swizzle::Xor16B);
    let acc = b.tile("acc", DType::F32, 64, 32, [2, 2]);
    let da = b.window(sa, 0i64, 0, 8, 64, 24);
    b.copy_async(da.clone(), view(a, 0i64, (kd / 4) as i64, m as i64, (kd / 4) as i64, 4));
    let dw = b.slot(sw, 0i64);
    b.copy_async(dw.clone(), view(w, 0i64, (kd / 4) as i64, n as i64, (kd / 4) as i64, 4));
    b.commit();
    b.wait(0);
    b.barrier();
    b.map(acc, 1.0);
    b.mma(acc, Operand::Shared { src: da, transpose: false }, Operand::Shared { src: dw, transpose: true });
    b.store(acc, Place::Global(view(c, 0i64, n as i64, m as i64, n as i64, 2)));
    let kernel = b.finish().unwrap();
    let mut rng = Rng::new(45);
    // Any code but the two NaNs (0x7f, 0xff).
    let mut codes = |len: usize| -> Vec<u8> {
        (0..len)
            .map(|_| {
                loop {
                    let c = rng.int(0, 256) as u8;
                    if c & 0x7f != 0x7f {
                        break c;
                    }
                }
            })
            .collect()
    };
    let (qa, qw) = (codes(m * kd), codes(n * kd));
    let val = |c: u8| k3k_ir::tensor::e4m3_to_f32(c);
    let mut want = vec![0f32; m * n];
    let mut mag = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 1f32;
            for p in 0..kd {
                let prod = val(qa[i * kd + p]) * val(qw[j * kd + p]);
                s += prod;
                mag[i * n + j] += prod.abs();
            }
            want[i * n + j] = s;
        }
    }
    Case::new(
        "mma_ss_e4m3",
        kernel,
        vec![
            HostTensor::from_bytes(DType::U32, &[m, kd / 4], qa),
            HostTensor::from_bytes(DType::U32, &[n, kd / 4], qw),
            poisoned(DType::F32, &[m, n]),
        ],
        move |ts| {
            let got = ts[2].to_f32_vec();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let tol = (1.0 + mag[i]) * 2f32.powi(-20);
                assert!((g - w).abs() <= tol, "c[{}, {}]: got {g:e}, want {w:e} (tolerance {tol:e})", i / n, i % n);
            }
        },
    )
}
