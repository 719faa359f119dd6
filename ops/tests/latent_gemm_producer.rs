//! `latent_moe_gemm` with `PRODUCER=warp`: the producer stream (`AHEAD`) on a dedicated producer warpgroup
//! ([`k3k_ir::Stmt::Producer`], warp specialization) instead of thread 0 of consumer warp 0. Against an f64
//! product on the CPU backends (interpreter and JIT, bit for bit), which run the producer's statements in program
//! order and check every mbarrier operation; the kernel must hold every copy, `expect_tx` and elected wait in its
//! producer bodies, and its empty barriers must count the consumer threads only. The GPU code of the bench shapes
//! must compile for sm_90a without spills, as two role slices that move registers with `setmaxnreg`.
#[path = "common/gemm_f64.rs"]
mod gemm_f64;

use gemm_f64::{Case, assert_renders, seeded, tma_knobs};

use k3k_ir::*;
use k3k_ops::latent_moe_gemm::*;
use rand::rngs::StdRng;

fn producer_knobs(bm: i64, bn: i64, stages: i64, ahead: i64, overlap: &str) -> Knobs {
    tma_knobs(bm, bn, stages).with(AHEAD_KNOB, ahead).with(OVERLAP_KNOB, overlap).with(PRODUCER_KNOB, "warp")
}

/// Where the producer's statements are: (inside producer bodies, outside them).
fn producer_split(k: &Kernel) -> (usize, usize) {
    fn walk(body: &[Stmt], inside: bool, n: &mut (usize, usize)) {
        for s in body {
            if matches!(s, Stmt::TmaLoad(_) | Stmt::MbarArriveExpectTx { .. } | Stmt::MbarWait { elected: true, .. }) {
                if inside {
                    n.0 += 1;
                } else {
                    n.1 += 1;
                }
            }
            match s {
                Stmt::For { body, .. } | Stmt::Threads { body } => walk(body, inside, n),
                Stmt::If { then_body, else_body, .. } => {
                    walk(then_body, inside, n);
                    walk(else_body, inside, n);
                }
                Stmt::Producer { body } => walk(body, true, n),
                _ => {}
            }
        }
    }
    let mut n = (0, 0);
    walk(&k.body, false, &mut n);
    n
}

fn check_case(seed: u64, rng: &mut StdRng, case: Case, knobs: &Knobs) {
    gemm_f64::check_case(seed, rng, case, knobs, &[1, 3], |kern| {
        assert!(kern.producer_warp, "{}", kern.name);
        assert_eq!(kern.launch_threads(), kern.threads + PRODUCER_THREADS, "{}", kern.name);
        let (inside, outside) = producer_split(kern);
        assert!(inside > 0 && outside == 0, "{}: producer statements {inside} inside, {outside} outside", kern.name);
        let mut inits = vec![];
        kern.visit_stmts(&mut |s| {
            if let Stmt::MbarInit { count, .. } = s {
                inits.push(*count);
            }
        });
        // Pairs count one arrival per consumer warp of both CTAs; otherwise every consumer thread arrives.
        let want = if kern.cluster_size() == 2 { 2 * kern.threads / 32 } else { kern.threads };
        assert_eq!(inits, vec![1, want], "{}: full and empty barrier counts", kern.name);
    });
}

#[test]
fn producer_warp_matches_f64_across_tile_boundaries() {
    let (seed, mut rng) = seeded();
    // BM=64: ragged groups with empty ones, 3 n-tiles at N=130: every block walks several tiles.
    let counts = [0usize, 17, 65, 0, 1, 130, 0, 63];
    let mut i = 0usize;
    for (bm, stages, ks) in [(64i64, 3i64, &[8usize, 72, 200][..]), (64, 4, &[8, 136, 320]), (128, 4, &[8, 200])] {
        for &k in ks {
            for ahead in 1..stages {
                let overlap = if i.is_multiple_of(2) { "off" } else { "on" };
                i += 1;
                let knobs = producer_knobs(bm, 64, stages, ahead, overlap);
                check_case(seed, &mut rng, Case::plain(&counts, k, 130), &knobs);
            }
        }
    }
}

#[test]
fn producer_warp_matches_f64_with_pairs_glu_routing_weights_dense_and_no_tiles() {
    let (seed, mut rng) = seeded();
    let counts = [3usize, 0, 70, 129];
    for along in ["m", "n"] {
        let pair = producer_knobs(64, 64, 4, 2, "on").with(CLUSTER_KNOB, 2i64).with(CLUSTER_ALONG_KNOB, along);
        check_case(seed, &mut rng, Case::plain(&counts, 200, 130), &pair);
        check_case(
            seed,
            &mut rng,
            Case(&counts, true, Epilogue::SituGlu, true, 136, 40),
            &pair.clone().with("BN", 128i64),
        );
    }
    for epilogue in [Epilogue::SwiGlu, Epilogue::SituGlu] {
        check_case(seed, &mut rng, Case(&counts, true, epilogue, true, 136, 40), &producer_knobs(64, 128, 3, 2, "on"));
        check_case(seed, &mut rng, Case(&counts, true, epilogue, false, 64, 65), &producer_knobs(128, 64, 4, 3, "off"));
    }
    check_case(seed, &mut rng, Case(&[77], false, Epilogue::None, true, 200, 90), &producer_knobs(64, 64, 4, 3, "off"));
    // No rows at all: no tiles, the producer issues nothing.
    check_case(seed, &mut rng, Case(&[0, 0], true, Epilogue::None, false, 64, 64), &producer_knobs(64, 64, 4, 3, "on"));
}

#[test]
fn producer_knob_is_checked() {
    let spec = GemmSpec::for_shape(true, Epilogue::None, false, 3584, 6144);
    let d = build_kernel(&spec, &default_knobs().with(PRODUCER_KNOB, "thread")).unwrap();
    assert!(!d.producer_warp && d.launch_threads() == d.threads);
    let w = build_kernel(&spec, &default_knobs().with(PRODUCER_KNOB, "warp")).unwrap();
    assert!(w.producer_warp && w.launch_threads() == 384, "{}", w.launch_threads());
    let e = build_kernel(&spec, &default_knobs().with(PRODUCER_KNOB, "warps")).unwrap_err().to_string();
    assert!(e.contains("PRODUCER must be thread or warp"), "{e}");
    // Without the TMA ring (cp.async) the knob is ignored; with the ring but no producer stream, an error.
    let cp = build_kernel(&spec, &default_knobs().with(LOAD_KNOB, "cp_async")).unwrap();
    assert!(!cp.producer_warp && cp.tensor_maps.is_empty());
    let mut in_loop = default_knobs().with(LOAD_KNOB, "tma");
    in_loop.0.remove(AHEAD_KNOB);
    let e = build_kernel(&spec, &in_loop).unwrap_err().to_string();
    assert!(e.contains("PRODUCER=warp needs the producer stream"), "{e}");
    // LOAD=auto on a shape the copy engine cannot serve: the cp.async kernel, without a producer warp.
    let odd = GemmSpec::for_shape(true, Epilogue::None, false, 3583, 6144);
    let k = build_kernel(&odd, &default_knobs().with(PRODUCER_KNOB, "warp")).unwrap();
    assert!(!k.producer_warp && k.tensor_maps.is_empty());
}

#[test]
fn producer_warp_kernels_compile_without_spills_as_two_role_slices() {
    let glu = GemmSpec::for_shape(true, Epilogue::SituGlu, true, 3584, 3072);
    let plain = GemmSpec::for_shape(true, Epilogue::None, false, 3584, 6144);
    let w = default_knobs().with(PRODUCER_KNOB, "warp");
    let cases = [
        (plain, w.clone()),
        (glu, w.clone()),
        (plain, w.clone().with(OVERLAP_KNOB, "on")),
        (plain, w.clone().with(CLUSTER_KNOB, 2i64).with(CLUSTER_ALONG_KNOB, "n").with(OVERLAP_KNOB, "on")),
        (plain, w.clone().with(CLUSTER_KNOB, 2i64).with(CLUSTER_ALONG_KNOB, "m")),
    ];
    for (spec, knobs) in cases {
        let k = build_kernel(&spec, &knobs).unwrap();
        let src = assert_renders(
            &k,
            &knobs,
            &[
                "__launch_bounds__(384)",
                "#define K3K_ELECTED_TID 256",
                "setmaxnreg.dec.sync.aligned.u32 40;",
                "setmaxnreg.inc.sync.aligned.u32 232;",
            ],
        );
        // The copies are issued in the producer's slice only, the products in the consumers' only.
        let (_, slices) = src.split_once("// the producer warpgroup").expect("the producer's slice");
        let (prod, cons) = slices.split_once("// the consumer warpgroups").expect("the consumers' slice");
        assert!(prod.contains("k3k::tma_load") && !prod.contains("wgmma_commit"), "{knobs}");
        assert!(!cons.contains("k3k::tma_load") && cons.contains("wgmma_commit"), "{knobs}");
        let m = k3k_codegen::build(&k, k3k_codegen::BuildOptions { assemble: true })
            .unwrap_or_else(|e| panic!("{knobs}: {e}"));
        let r = m.resources.clone().expect("assembled");
        eprintln!("{knobs}: {r:?}");
        assert!(!r.spills(), "{knobs}: {r:?}");
        // ptxas allocates the launch's whole budget (what `setmaxnreg` moves between the roles assumes it).
        assert_eq!(r.registers, 168, "{knobs}: {r:?}");
    }
}
