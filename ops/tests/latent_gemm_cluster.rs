//! `latent_moe_gemm` with `CLUSTER=2` (pairs of CTAs in thread-block clusters sharing one operand through
//! `.multicast::cluster` TMA copies, slots released on both CTAs' barriers) against an f64 product on the CPU
//! backends, which run the two CTAs of a cluster concurrently (`cpu::cluster`: a broken protocol deadlocks or
//! fails the checked barriers): pairs along M and along N, groups with odd m-tile counts and N tails with odd
//! n-tile counts (the idle sibling still copies its half and arrives, and stores nothing: y is poisoned, so a
//! stray store would also be caught by the checks of the rows it overwrote), empty groups, K tails, both tile
//! walks, the producer streams (AHEAD), GLU epilogues with routing weights, the dense variant, grids of one and
//! two clusters. The JIT must lower the kernel and agree with the interpreter bit for bit.
#[path = "common/gemm_f64.rs"]
mod gemm_f64;

use gemm_f64::{Case, seeded, tma_knobs};

use k3k_ir::*;
use k3k_ops::latent_moe_gemm::*;
use rand::rngs::StdRng;

fn cluster_knobs(bm: i64, bn: i64, stages: i64, along: &str) -> Knobs {
    tma_knobs(bm, bn, stages)
        .with(CLUSTER_KNOB, 2i64)
        .with(CLUSTER_ALONG_KNOB, along)
        // The thread-0 producer (latent_gemm_producer.rs covers the producer warpgroup).
        .with(PRODUCER_KNOB, "thread")
}

/// The shared f64 check at grids of 1, 3 and 5 blocks (one and two clusters, and an odd count that rounds down);
/// the kernel must use tensor maps, mbarriers and clusters of two.
fn check_case(seed: u64, rng: &mut StdRng, case: Case, knobs: &Knobs) {
    gemm_f64::check_case(seed, rng, case, knobs, &[1, 3, 5], |kern| {
        assert!(!kern.tensor_maps.is_empty() && !kern.mbarriers.is_empty(), "{}", kern.name);
        assert_eq!(kern.cluster, [2, 1, 1], "{}", kern.name);
    });
}

#[test]
fn cluster_pairs_match_f64_on_ragged_groups_k_and_n_tails() {
    let (seed, mut rng) = seeded();
    // BM=64: m-tiles per group 0, 1, 2, 0, 1, 3, 0, 1 (odd counts leave an idle sibling along M).
    let counts = [0usize, 17, 65, 0, 1, 130, 0, 63];
    for (k, n) in [(72usize, 130usize), (200, 64), (8, 65)] {
        for along in ["m", "n"] {
            for overlap in ["off", "on"] {
                for knobs in [cluster_knobs(64, 64, 3, along), cluster_knobs(128, 64, 4, along)] {
                    let knobs = knobs.with("OVERLAP", overlap);
                    check_case(seed, &mut rng, Case::plain(&counts, k, n), &knobs);
                }
                // The pair's producer streams (AHEAD): each CTA's producer runs ahead over the common walk.
                for (stages, ahead) in [(3i64, 2i64), (4, 3), (4, 1)] {
                    let knobs = cluster_knobs(64, 64, stages, along).with("OVERLAP", overlap).with(AHEAD_KNOB, ahead);
                    check_case(seed, &mut rng, Case::plain(&counts, k, n), &knobs);
                }
            }
        }
    }
}

#[test]
fn cluster_pairs_match_f64_with_glu_epilogues_routing_weights_and_dense() {
    let (seed, mut rng) = seeded();
    let counts = [3usize, 0, 70, 129];
    for along in ["m", "n"] {
        for epilogue in [Epilogue::SwiGlu, Epilogue::SituGlu] {
            // GLU: along M the two CTAs copy the gate and the up half of the weight tile.
            check_case(seed, &mut rng, Case(&counts, true, epilogue, true, 136, 40), &cluster_knobs(64, 128, 3, along));
            check_case(seed, &mut rng, Case(&counts, true, epilogue, false, 64, 65), &cluster_knobs(128, 64, 4, along));
            let stream = cluster_knobs(64, 128, 4, along).with(AHEAD_KNOB, 3i64);
            check_case(seed, &mut rng, Case(&counts, true, epilogue, true, 136, 40), &stream);
        }
        check_case(seed, &mut rng, Case(&[77], false, Epilogue::None, true, 200, 90), &cluster_knobs(64, 64, 3, along));
        check_case(
            seed,
            &mut rng,
            Case(&[0, 0], true, Epilogue::None, false, 64, 64),
            &cluster_knobs(64, 64, 3, along),
        );
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
    // The default tile (128x256, STAGES=4) with pairs along M and N, and a GLU variant; the pairs' streams too.
    let glu = GemmSpec::for_shape(true, Epilogue::SituGlu, true, 3584, 3072);
    let plain = GemmSpec::for_shape(true, Epilogue::None, false, 3584, 6144);
    let cases =
        [(plain, "m", None), (plain, "n", None), (glu, "m", None), (plain, "m", Some(3i64)), (plain, "n", Some(3))];
    for (spec, along, ahead) in cases {
        let knobs = default_knobs().with(CLUSTER_KNOB, 2i64).with(CLUSTER_ALONG_KNOB, along).with("OVERLAP", "on");
        let knobs = match ahead {
            Some(a) => knobs.with(AHEAD_KNOB, a),
            None => knobs,
        };
        let k = build_kernel(&spec, &knobs).unwrap();
        let m = k3k_codegen::build(&k, k3k_codegen::BuildOptions { assemble: true })
            .unwrap_or_else(|e| panic!("{knobs}: {e}"));
        let r = m.resources.clone().expect("assembled");
        eprintln!("{knobs}: {r:?}");
        assert!(!r.spills(), "{knobs}: {r:?}");
    }
}
