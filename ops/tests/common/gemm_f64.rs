//! The f64 check of one `latent_moe_gemm` case on both CPU backends, shared by the TMA and cluster tests: random
//! bf16 operands over ragged groups, the kernel of `knobs` run by the interpreter and the JIT (bit-identical) at
//! each of `num_sms` persistent grid sizes into a poisoned output, every row compared with an f64 product (with
//! the epilogue and routing weight). `expect` asserts what the caller's kernel must declare.

use k3k_codegen::cpu::interp::{InterpOptions, run};
use k3k_codegen::cpu::jit::{self, Engine};
use k3k_ir::*;
use k3k_ops::latent_moe_gemm::*;
use k3k_reference::gemm::{situ_glu, swiglu};
use rand::{Rng, SeedableRng, rngs::StdRng};

fn bf(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

/// The default knobs with tiles of `bm` x `bn` over `bm / 16` warps and `stages` stages loaded by tensor copies
/// (LOAD=tma). (The bulk-store tests do not use it.)
#[allow(dead_code)]
pub fn tma_knobs(bm: i64, bn: i64, stages: i64) -> Knobs {
    default_knobs().with("BM", bm).with("BN", bn).with("WM", bm / 16).with("STAGES", stages).with(LOAD_KNOB, "tma")
}

/// A fresh seed (printed by every failure) and its generator.
pub fn seeded() -> (u64, StdRng) {
    let seed: u64 = rand::rng().random();
    (seed, StdRng::seed_from_u64(seed))
}

/// The CUDA C of kernel `k` (built at `knobs`), asserting that it holds every line of `wants`.
#[allow(dead_code)]
pub fn assert_renders(k: &Kernel, knobs: &Knobs, wants: &[&str]) -> String {
    let src = k3k_codegen::render(k).unwrap();
    for want in wants {
        assert!(src.contains(want), "{knobs}: no `{want}` in the CUDA");
    }
    src
}

/// One case's shape: the rows of each group (`grouped`: one weight matrix a group, else one dense matrix), the
/// epilogue, whether rows carry routing weights, K and the output width N.
#[derive(Clone, Copy)]
pub struct Case<'a>(pub &'a [usize], pub bool, pub Epilogue, pub bool, pub usize, pub usize);

impl<'a> Case<'a> {
    /// Grouped rows `counts`, no epilogue, no routing weights.
    #[allow(dead_code)]
    pub fn plain(counts: &'a [usize], k: usize, n: usize) -> Self {
        Case(counts, true, Epilogue::None, false, k, n)
    }
}

pub fn check_case(seed: u64, rng: &mut StdRng, case: Case, knobs: &Knobs, num_sms: &[i64], expect: impl Fn(&Kernel)) {
    let Case(counts, grouped, epilogue, row_scale, k, n_out) = case;
    let g = counts.len();
    let m: usize = counts.iter().sum();
    let n = if epilogue.is_glu() { 2 * n_out } else { n_out };
    let offs: Vec<i64> = counts
        .iter()
        .scan(0i64, |s, c| {
            *s += *c as i64;
            Some(*s)
        })
        .collect();
    let x: Vec<f32> = (0..m * k).map(|_| bf(rng.random_range(-1.0..1.0))).collect();
    let w: Vec<f32> = (0..g * n * k).map(|_| bf(rng.random_range(-1.0..1.0))).collect();
    let p: Vec<f32> = (0..m).map(|_| rng.random_range(0.1..1.0)).collect();
    let spec = GemmSpec::for_shape(grouped, epilogue, row_scale, k, n_out);
    let kern = build_kernel(&spec, knobs).unwrap();
    expect(&kern);
    let mut ts = vec![
        HostTensor::from_f32(DType::Bf16, &[m, k], &x),
        if grouped {
            HostTensor::from_f32(DType::Bf16, &[g, n, k], &w)
        } else {
            HostTensor::from_f32(DType::Bf16, &[n, k], &w)
        },
    ];
    if grouped {
        ts.push(HostTensor::from_i64(DType::I32, &[g], &offs));
    }
    if row_scale {
        ts.push(HostTensor::from_f32(DType::F32, &[m], &p));
    }
    let mut y = HostTensor::zeros(DType::Bf16, &[m, n_out]);
    y.poison();
    ts.push(y);
    let yi = ts.len() - 1;
    for &num_sms in num_sms {
        let opts = InterpOptions { num_sms };
        let mut a = ts.clone();
        run(&kern, &mut a, &[], opts).unwrap_or_else(|e| panic!("seed {seed} {knobs}: {e}"));
        let mut j = ts.clone();
        assert_eq!(jit::run(&kern, &mut j, &[], opts).unwrap(), Engine::Jit, "{}", kern.name);
        assert_eq!(a[yi].data, j[yi].data, "seed {seed} {knobs}: JIT and interpreter differ");
        let got = a[yi].to_f32_vec();
        let mut row = 0;
        for (gi, &c) in counts.iter().enumerate() {
            let gw = if grouped { gi } else { 0 };
            for r in row..row + c {
                let dot = |col: usize| -> f64 {
                    (0..k).map(|q| x[r * k + q] as f64 * w[(gw * n + col) * k + q] as f64).sum()
                };
                for jn in 0..n_out {
                    let mut want = match epilogue {
                        Epilogue::None => dot(jn),
                        Epilogue::SwiGlu => swiglu(dot(jn), dot(n_out + jn)),
                        Epilogue::SituGlu => situ_glu(dot(jn), dot(n_out + jn)),
                    };
                    if row_scale {
                        want *= p[r] as f64;
                    }
                    let v = got[r * n_out + jn] as f64;
                    assert!(
                        (v - want).abs() <= 1e-2 * (1.0 + want.abs()),
                        "seed {seed} {knobs} {epilogue:?} sms {num_sms} K {k} N {n_out} r {r} j {jn}: {v} vs {want}"
                    );
                }
            }
            row += c;
        }
    }
}
