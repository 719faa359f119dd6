//! `latent_moe_gemm` with `AHEAD=a` (LOAD=tma: a producer stream over the block's whole tile walk, `a` stages in
//! flight, the next tile's first stages issued during the current tile's last k-steps) and `RELEASE=warp` (one
//! empty-barrier arrival per warp) against an f64 product on the CPU backends, which check every mbarrier
//! operation (a release missing or counted wrong, or a refill of a slot whose previous use was not released, is
//! a wait that cannot return or an arrival beyond the count: an error; a refill before the slot's product ran
//! gives wrong data). Grids of 1 and 3 blocks over 24 or more tiles (every block walks several tiles), K-step
//! counts below, equal to and above STAGES and below AHEAD (the producer runs two or three tiles ahead),
//! ragged groups with empty ones, N tails, both tile walks, GLU epilogues with routing weights, the dense
//! variant, no tiles at all. The JIT must lower every kernel and agree with the interpreter bit for bit; the
//! kernels of the bench shapes compile for sm_90a without spills.
#[path = "common/gemm_f64.rs"]
mod gemm_f64;

use gemm_f64::{Case, seeded, tma_knobs};

use k3k_ir::*;
use k3k_ops::latent_moe_gemm::*;
use rand::rngs::StdRng;

fn ahead_knobs(bm: i64, bn: i64, stages: i64, ahead: i64, release: &str, overlap: &str) -> Knobs {
    tma_knobs(bm, bn, stages)
        .with(AHEAD_KNOB, ahead)
        .with(RELEASE_KNOB, release)
        .with(OVERLAP_KNOB, overlap)
        // The thread-0 producer (latent_gemm_producer.rs covers the producer warpgroup).
        .with(PRODUCER_KNOB, "thread")
}

fn count_stmts(k: &Kernel, f: impl Fn(&Stmt) -> bool) -> usize {
    let mut n = 0;
    k.visit_stmts(&mut |s| n += f(s) as usize);
    n
}

/// The shared f64 check at grids of 1 and 3 blocks. The kernel must be the stream: tensor maps, mbarriers, no
/// block barrier, and its empty barriers counting one arrival per warp with RELEASE=warp (else per thread).
fn check_case(seed: u64, rng: &mut StdRng, case: Case, knobs: &Knobs) {
    let warp = knobs.str(RELEASE_KNOB).unwrap() == "warp";
    gemm_f64::check_case(seed, rng, case, knobs, &[1, 3], |kern| {
        assert!(!kern.tensor_maps.is_empty() && !kern.mbarriers.is_empty(), "{}", kern.name);
        assert_eq!(count_stmts(kern, |s| matches!(s, Stmt::Barrier)), 0, "{}: a block barrier in the walk", kern.name);
        let threads = kern.threads;
        let want = if warp { threads / 32 } else { threads };
        let inits: Vec<u32> = {
            let mut v = vec![];
            kern.visit_stmts(&mut |s| {
                if let Stmt::MbarInit { count, .. } = s {
                    v.push(*count);
                }
            });
            v
        };
        assert_eq!(inits, vec![1, want], "{}: full and empty barrier counts", kern.name);
        let per_warp = count_stmts(kern, |s| matches!(s, Stmt::MbarArriveCluster { .. }));
        let per_thread = count_stmts(kern, |s| matches!(s, Stmt::MbarArrive { .. }));
        assert!(if warp { per_warp > 0 && per_thread == 0 } else { per_warp == 0 && per_thread > 0 }, "{}", kern.name);
    });
}

#[test]
fn ahead_stream_matches_f64_across_tile_boundaries() {
    let (seed, mut rng) = seeded();
    // BM=64: m-tiles 0, 1, 2, 0, 1, 3, 0, 1; N=130 at BN=64: 3 n-tiles; 24 tiles.
    let counts = [0usize, 17, 65, 0, 1, 130, 0, 63];
    let mut i = 0usize;
    // K-step counts (BK=64): 1, 2, 3, 4, 5 against STAGES 3 and 4 and AHEAD 1..STAGES-1; the release and walk
    // variants rotate over the cases.
    for (bm, stages, ks) in
        [(64i64, 3i64, &[8usize, 72, 192, 200][..]), (64, 4, &[8, 72, 136, 256, 320]), (128, 4, &[8, 200, 320])]
    {
        for &k in ks {
            for ahead in 1..stages {
                let release = if i.is_multiple_of(2) { "warp" } else { "thread" };
                let overlap = if (i / 2).is_multiple_of(2) { "off" } else { "on" };
                i += 1;
                let knobs = ahead_knobs(bm, 64, stages, ahead, release, overlap);
                check_case(seed, &mut rng, Case::plain(&counts, k, 130), &knobs);
            }
        }
    }
}

#[test]
fn ahead_stream_matches_f64_with_glu_epilogues_routing_weights_dense_and_no_tiles() {
    let (seed, mut rng) = seeded();
    let counts = [3usize, 0, 70, 129];
    for epilogue in [Epilogue::SwiGlu, Epilogue::SituGlu] {
        for (k, n_out) in [(136usize, 40usize), (64, 65)] {
            // GLU tiles: BN covers gate + up, so the accumulator is BN/2 wide.
            check_case(
                seed,
                &mut rng,
                Case(&counts, true, epilogue, true, k, n_out),
                &ahead_knobs(64, 128, 3, 2, "warp", "on"),
            );
            check_case(
                seed,
                &mut rng,
                Case(&counts, true, epilogue, false, k, n_out),
                &ahead_knobs(128, 64, 4, 3, "thread", "off"),
            );
        }
    }
    check_case(
        seed,
        &mut rng,
        Case(&[77], false, Epilogue::None, true, 200, 90),
        &ahead_knobs(64, 64, 4, 3, "warp", "off"),
    );
    check_case(
        seed,
        &mut rng,
        Case(&[77], false, Epilogue::SwiGlu, false, 72, 33),
        &ahead_knobs(64, 64, 3, 2, "warp", "on"),
    );
    // No rows at all: no tiles, the producer issues nothing.
    check_case(
        seed,
        &mut rng,
        Case(&[0, 0], true, Epilogue::None, false, 64, 64),
        &ahead_knobs(64, 64, 4, 3, "warp", "off"),
    );
    check_case(
        seed,
        &mut rng,
        Case(&[0, 0], true, Epilogue::None, false, 64, 64),
        &ahead_knobs(64, 64, 4, 3, "thread", "on"),
    );
}

#[test]
fn ahead_and_release_knobs_are_checked() {
    let spec = GemmSpec::for_shape(true, Epilogue::None, false, 64, 64);
    let tma = default_knobs().with(LOAD_KNOB, "tma");
    let err = |knobs: Knobs| build_kernel(&spec, &knobs).unwrap_err().to_string();
    assert!(err(tma.clone().with(AHEAD_KNOB, 0i64)).contains("AHEAD=0 must be in 1..=STAGES-1 = 3"));
    assert!(err(tma.clone().with(AHEAD_KNOB, 4i64)).contains("AHEAD=4 must be in 1..=STAGES-1 = 3"));
    assert!(err(tma.clone().with(AHEAD_KNOB, "x")).contains("AHEAD"));
    assert!(err(tma.clone().with(RELEASE_KNOB, "block")).contains("RELEASE must be thread or warp"));
    // A pair's stream: remote releases on both CTAs, no block barrier in the walk.
    let pair = build_kernel(&spec, &tma.clone().with(AHEAD_KNOB, 3i64).with(CLUSTER_KNOB, 2i64)).unwrap();
    assert!(count_stmts(&pair, |s| matches!(s, Stmt::MbarArriveCluster { .. })) > 0);
    assert_eq!(count_stmts(&pair, |s| matches!(s, Stmt::Barrier)), 0);
    let cp = default_knobs().with(LOAD_KNOB, "cp_async");
    assert!(err(cp.clone().with(AHEAD_KNOB, 3i64)).contains("need LOAD=tma"));
    assert!(err(cp.with(RELEASE_KNOB, "warp")).contains("need LOAD=tma"));
    // LOAD=auto on a shape the copy engine cannot serve: the cp.async kernel, the knobs ignored.
    let odd = GemmSpec::for_shape(true, Epilogue::None, false, 60, 64);
    let k = build_kernel(&odd, &default_knobs().with(AHEAD_KNOB, 3i64).with(RELEASE_KNOB, "warp")).unwrap();
    assert!(k.tensor_maps.is_empty() && k.mbarriers.is_empty());
    // LOAD=auto where TMA serves the shape: the stream.
    let k = build_kernel(&spec, &default_knobs().with(AHEAD_KNOB, 3i64)).unwrap();
    assert!(!k.mbarriers.is_empty() && count_stmts(&k, |s| matches!(s, Stmt::Barrier)) == 0);
    // AHEAD=auto with the thread-0 producer is the stream at STAGES-1 = 3: the same kernel as AHEAD=3; with the
    // default producer warpgroup, STAGES-2 = 2.
    let t = default_knobs().with(PRODUCER_KNOB, "thread");
    let d = build_kernel(&spec, &t).unwrap();
    assert_eq!(count_stmts(&d, |s| matches!(s, Stmt::Barrier)), 0);
    let a3 = build_kernel(&spec, &t.clone().with(AHEAD_KNOB, 3i64)).unwrap();
    assert!(d.body == a3.body && d.shared == a3.shared && d.mbarriers == a3.mbarriers, "auto is AHEAD=3 here");
    let w = build_kernel(&spec, &default_knobs()).unwrap();
    let w2 = build_kernel(&spec, &default_knobs().with(AHEAD_KNOB, 2i64)).unwrap();
    assert!(w.producer_warp && w.body == w2.body, "auto is AHEAD=2 with the producer warpgroup");
    // AHEAD=auto with a cluster: the pair's stream at STAGES-2 = 2; on the cp.async path: no ring, no error.
    let c2 = build_kernel(&spec, &default_knobs().with(LOAD_KNOB, "tma").with(CLUSTER_KNOB, 2i64)).unwrap();
    assert!(count_stmts(&c2, |s| matches!(s, Stmt::MbarArriveCluster { .. })) > 0);
    let c2a2 =
        build_kernel(&spec, &default_knobs().with(LOAD_KNOB, "tma").with(CLUSTER_KNOB, 2i64).with(AHEAD_KNOB, 2i64))
            .unwrap();
    assert!(c2.body == c2a2.body, "auto is AHEAD=2 for a pair");
    let cp = build_kernel(&spec, &default_knobs().with(LOAD_KNOB, "cp_async")).unwrap();
    assert!(cp.mbarriers.is_empty());
    // Knob sets without AHEAD (records written before it): the in-loop schedule, per-thread releases.
    let mut old = default_knobs();
    old.0.remove(AHEAD_KNOB);
    old.0.remove(PRODUCER_KNOB);
    old.0.remove(OVERLAP_KNOB);
    let d = build_kernel(&spec, &old).unwrap();
    assert_eq!(count_stmts(&d, |s| matches!(s, Stmt::MbarArriveCluster { .. })), 0);
    assert!(count_stmts(&d, |s| matches!(s, Stmt::Barrier)) > 0);
}

/// The stream kernels at the bench presets' shapes (and a GLU one) compile for sm_90a without spills; the
/// per-warp release renders as a local arrival (no cluster primitives in a kernel without a cluster).
#[test]
fn ahead_kernels_compile_without_spills() {
    for (epilogue, row_scale, k, knobs) in [
        (Epilogue::None, false, 3584usize, default_knobs().with(AHEAD_KNOB, 3i64)),
        (Epilogue::None, false, 3584, default_knobs().with(AHEAD_KNOB, 3i64).with(RELEASE_KNOB, "warp")),
        (Epilogue::None, false, 3072, default_knobs().with(AHEAD_KNOB, 2i64).with(OVERLAP_KNOB, "on")),
        (Epilogue::None, false, 3584, default_knobs().with(RELEASE_KNOB, "warp")),
        (Epilogue::SituGlu, true, 3584, default_knobs().with(AHEAD_KNOB, 3i64).with(RELEASE_KNOB, "warp")),
    ] {
        let spec = GemmSpec::for_shape(true, epilogue, row_scale, k, 1024);
        let kern = build_kernel(&spec, &knobs).unwrap();
        let src = k3k_codegen::render(&kern).unwrap();
        let warp = knobs.0.contains_key(RELEASE_KNOB);
        assert_eq!(src.contains("k3k::mbar_arrive_warp("), warp, "{}", kern.name);
        assert!(!src.contains("mapa.shared::cluster"), "{}: cluster primitives without a cluster", kern.name);
        let m = k3k_codegen::build(&kern, k3k_codegen::BuildOptions { assemble: true })
            .unwrap_or_else(|e| panic!("{e}\n{src}"));
        let r = m.resources.clone().expect("assembled");
        eprintln!("{}: {r:?}", kern.name);
        assert!(!r.spills() && r.stack_frame_bytes == 0, "{}: {r:?}", kern.name);
    }
}
