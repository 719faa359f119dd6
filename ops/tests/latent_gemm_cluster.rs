//! `latent_moe_gemm` with `CLUSTER=2` (pairs of CTAs in thread-block clusters sharing one operand through
//! `.multicast::cluster` TMA copies, slots released on both CTAs' barriers) against an f64 product on the CPU
//! backends, which run the two CTAs of a cluster concurrently (`cpu::cluster`: a broken protocol deadlocks or
//! fails the checked barriers): pairs along M and along N, groups with odd m-tile counts and N tails with odd
//! n-tile counts (the idle sibling still copies its half and arrives, and stores nothing: y is poisoned, so a
//! stray store would also be caught by the checks of the rows it overwrote), empty groups, K tails, both tile
//! walks, GLU epilogues with routing weights, the dense variant, grids of one and two clusters. The JIT must
//! lower the kernel and agree with the interpreter bit for bit.
use k3k_codegen::cpu::interp::{InterpOptions, run};
use k3k_codegen::cpu::jit::{self, Engine};
use k3k_ir::*;
use k3k_ops::latent_moe_gemm::*;
use k3k_reference::gemm::{situ_glu, swiglu};
use rand::{Rng, SeedableRng, rngs::StdRng};

fn bf(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

fn cluster_knobs(bm: i64, bn: i64, stages: i64, along: &str) -> Knobs {
    default_knobs()
        .with("BM", bm)
        .with("BN", bn)
        .with("WM", bm / 16)
        .with("STAGES", stages)
        .with(LOAD_KNOB, "tma")
        .with(CLUSTER_KNOB, 2i64)
        .with(CLUSTER_ALONG_KNOB, along)
}

#[allow(clippy::too_many_arguments)]
fn check_case(
    seed: u64,
    rng: &mut StdRng,
    counts: &[usize],
    grouped: bool,
    epilogue: Epilogue,
    row_scale: bool,
    k: usize,
    n_out: usize,
    knobs: &Knobs,
) {
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
    assert!(!kern.tensor_maps.is_empty() && !kern.mbarriers.is_empty(), "{}", kern.name);
    assert_eq!(kern.cluster, [2, 1, 1], "{}", kern.name);
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
    for num_sms in [1i64, 3, 5] {
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

#[test]
fn cluster_pairs_match_f64_on_ragged_groups_k_and_n_tails() {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    // BM=64: m-tiles per group 0, 1, 2, 0, 1, 3, 0, 1 (odd counts leave an idle sibling along M).
    let counts = [0usize, 17, 65, 0, 1, 130, 0, 63];
    for (k, n) in [(72usize, 130usize), (200, 64), (8, 65)] {
        for along in ["m", "n"] {
            for overlap in ["off", "on"] {
                for knobs in [cluster_knobs(64, 64, 3, along), cluster_knobs(128, 64, 4, along)] {
                    let knobs = knobs.with("OVERLAP", overlap);
                    check_case(seed, &mut rng, &counts, true, Epilogue::None, false, k, n, &knobs);
                }
            }
        }
    }
}

#[test]
fn cluster_pairs_match_f64_with_glu_epilogues_routing_weights_and_dense() {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    let counts = [3usize, 0, 70, 129];
    for along in ["m", "n"] {
        for epilogue in [Epilogue::SwiGlu, Epilogue::SituGlu] {
            // GLU: along M the two CTAs copy the gate and the up half of the weight tile.
            check_case(seed, &mut rng, &counts, true, epilogue, true, 136, 40, &cluster_knobs(64, 128, 3, along));
            check_case(seed, &mut rng, &counts, true, epilogue, false, 64, 65, &cluster_knobs(128, 64, 4, along));
        }
        check_case(seed, &mut rng, &[77], false, Epilogue::None, true, 200, 90, &cluster_knobs(64, 64, 3, along));
        check_case(seed, &mut rng, &[0, 0], true, Epilogue::None, false, 64, 64, &cluster_knobs(64, 64, 3, along));
    }
}

#[test]
fn cluster_knob_is_checked() {
    let spec = GemmSpec::for_shape(true, Epilogue::None, false, 64, 64);
    let e = build_kernel(&spec, &default_knobs().with(CLUSTER_KNOB, 3i64)).unwrap_err().to_string();
    assert!(e.contains("CLUSTER must be 1 or 2"), "{e}");
    let e = build_kernel(&spec, &default_knobs().with(CLUSTER_KNOB, 2i64).with(LOAD_KNOB, "cp_async"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("CLUSTER=2 needs LOAD=tma"), "{e}");
    // LOAD=auto where TMA cannot serve the shape (K % 8 != 0): the cp.async kernel, no cluster.
    let odd = GemmSpec::for_shape(true, Epilogue::None, false, 65, 64);
    let k = build_kernel(&odd, &default_knobs().with(CLUSTER_KNOB, 2i64)).unwrap();
    assert!(k.tensor_maps.is_empty() && k.cluster == [1, 1, 1], "{}", k.name);
    let e = build_kernel(&spec, &default_knobs().with(CLUSTER_KNOB, 2i64).with(CLUSTER_ALONG_KNOB, "k"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("CLUSTER_ALONG must be m or n"), "{e}");
    // The default stays one CTA per tile; CLUSTER=1 is the same kernel as no knob but for its name.
    let d = build_kernel(&spec, &default_knobs()).unwrap();
    assert_eq!(d.cluster, [1, 1, 1]);
    let one = build_kernel(&spec, &default_knobs().with(CLUSTER_KNOB, 1i64)).unwrap();
    assert_eq!(one.body, d.body);
    let two = build_kernel(&spec, &default_knobs().with(CLUSTER_KNOB, 2i64)).unwrap();
    assert_eq!(two.cluster, [2, 1, 1]);
    // Along M at 128x256: each CTA copies its x tile and half of the weight tile (BN/2 rows).
    assert_eq!(two.tensor_maps[1].box_dims[1], 128);
}

#[test]
fn cluster_kernels_compile_without_spills() {
    // The default tile (128x256, STAGES=4) with pairs along M and N, and a GLU variant.
    let glu = GemmSpec::for_shape(true, Epilogue::SituGlu, true, 3584, 3072);
    let plain = GemmSpec::for_shape(true, Epilogue::None, false, 3584, 6144);
    for (spec, along) in [(plain, "m"), (plain, "n"), (glu, "m")] {
        let knobs = default_knobs().with(CLUSTER_KNOB, 2i64).with(CLUSTER_ALONG_KNOB, along).with("OVERLAP", "on");
        let k = build_kernel(&spec, &knobs).unwrap();
        let m = k3k_codegen::build(&k, k3k_codegen::BuildOptions { assemble: true })
            .unwrap_or_else(|e| panic!("{knobs}: {e}"));
        let r = m.resources.clone().expect("assembled");
        eprintln!("{knobs}: {r:?}");
        assert!(!r.spills(), "{knobs}: {r:?}");
    }
}
