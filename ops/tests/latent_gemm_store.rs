//! `latent_moe_gemm` with `STORE=tma`: tiles whose rows all lie inside their group leave through two shared
//! staging buffers and bulk tensor stores ([`k3k_ir::Stmt::StoreCols`], [`k3k_ir::Stmt::TmaStore`]), 64 columns
//! at a time; a group's partial last m-tile keeps the register stores. Against an f64 product on both CPU
//! backends (bit for bit), over groups with full and partial tiles, a column edge inside a slice, GLU epilogues
//! with routing weights, a dense product and pairs; plus the knob's rules and the GPU code's resources.
#[path = "common/gemm_f64.rs"]
mod gemm_f64;

use gemm_f64::{Case, assert_renders, seeded};

use k3k_ir::*;
use k3k_ops::latent_moe_gemm::*;
use rand::rngs::StdRng;

fn store_knobs(bm: i64, bn: i64) -> Knobs {
    default_knobs().with("BM", bm).with("BN", bn).with("WM", bm / 16).with(STORE_KNOB, "tma")
}

fn bulk_stores(k: &Kernel) -> usize {
    let mut n = 0;
    k.visit_stmts(&mut |s| n += matches!(s, Stmt::TmaStore(_)) as usize);
    n
}

fn check_case(seed: u64, rng: &mut StdRng, case: Case, knobs: &Knobs, slices: usize) {
    gemm_f64::check_case(seed, rng, case, knobs, &[1, 3], |kern| {
        assert_eq!(bulk_stores(kern), slices, "{}: bulk stores", kern.name);
    });
}

#[test]
fn bulk_store_epilogue_matches_f64() {
    let (seed, mut rng) = seeded();
    // Full 64- and 128-row tiles next to partial ones and empty groups; N = 200: the last 64-column slice
    // crosses the tensor's edge (the copy engine clips it), the second n-tile of BN=128 holds one partial slice.
    let counts = [0usize, 130, 64, 0, 7, 257, 128];
    for (bm, bn) in [(64i64, 128i64), (128, 128), (128, 256)] {
        let knobs = store_knobs(bm, bn);
        check_case(seed, &mut rng, Case::plain(&counts, 136, 200), &knobs, bn as usize / 64);
        check_case(
            seed,
            &mut rng,
            Case(&counts, true, Epilogue::None, true, 64, 64),
            &knobs.clone().with(OVERLAP_KNOB, "off"),
            bn as usize / 64,
        );
    }
    // An odd number of slices per tile (BN=64: one, BN=192: three): the buffers alternate across tiles, so the
    // next tile's first slice does not rewrite the buffer of the store just issued (the interpreter reads each
    // store's source at its retiring wait, so it fails such a program; one block walks several tiles).
    for bn in [64i64, 192] {
        let knobs = store_knobs(64, bn);
        check_case(seed, &mut rng, Case::plain(&counts, 72, 392), &knobs, bn as usize / 64);
    }
    check_case(seed, &mut rng, Case(&counts, true, Epilogue::SituGlu, true, 72, 136), &store_knobs(64, 128), 1);
    // GLU epilogues with routing weights: 128 accumulator columns of 256, two slices.
    for epilogue in [Epilogue::SituGlu, Epilogue::SwiGlu] {
        check_case(seed, &mut rng, Case(&counts, true, epilogue, true, 72, 136), &store_knobs(128, 256), 2);
    }
    // Dense, thread-0 producer, pairs along m and n.
    check_case(seed, &mut rng, Case(&[300], false, Epilogue::None, false, 200, 128), &store_knobs(128, 256), 4);
    let thread = store_knobs(64, 128).with(PRODUCER_KNOB, "thread");
    check_case(seed, &mut rng, Case::plain(&counts, 136, 200), &thread, 2);
    for along in ["m", "n"] {
        let pair = store_knobs(64, 128).with(CLUSTER_KNOB, 2i64).with(CLUSTER_ALONG_KNOB, along);
        check_case(seed, &mut rng, Case(&counts, true, Epilogue::None, true, 136, 200), &pair, 2);
    }
}

#[test]
fn store_knob_is_checked_and_falls_back_where_the_copy_engine_cannot_serve() {
    let spec = GemmSpec::for_shape(true, Epilogue::None, false, 3584, 6144);
    let k = build_kernel(&spec, &store_knobs(128, 256)).unwrap();
    assert_eq!(bulk_stores(&k), 4);
    let e = build_kernel(&spec, &default_knobs().with(STORE_KNOB, "smem")).unwrap_err().to_string();
    assert!(e.contains("STORE must be reg or tma"), "{e}");
    let e = build_kernel(&spec, &store_knobs(128, 256).with(EPI_TURN_KNOB, "on")).unwrap_err().to_string();
    assert!(e.contains("do not combine"), "{e}");
    // y rows not a multiple of 8 elements, the cp.async kernel, a 32-column GLU accumulator: register stores.
    let odd = GemmSpec::for_shape(true, Epilogue::None, false, 3584, 6146);
    assert_eq!(bulk_stores(&build_kernel(&odd, &store_knobs(128, 256)).unwrap()), 0);
    let cp = build_kernel(&spec, &store_knobs(128, 256).with(LOAD_KNOB, "cp_async").with(AHEAD_KNOB, "auto")).unwrap();
    assert_eq!(bulk_stores(&cp), 0);
    let glu = GemmSpec::for_shape(true, Epilogue::SituGlu, false, 3584, 3072);
    assert_eq!(bulk_stores(&build_kernel(&glu, &store_knobs(64, 64)).unwrap()), 0);
}

#[test]
fn bulk_store_kernels_compile_without_spills_inside_the_shared_memory_limit() {
    for (spec, knobs) in [
        (GemmSpec::for_shape(true, Epilogue::None, false, 3584, 6144), store_knobs(128, 256)),
        (GemmSpec::for_shape(true, Epilogue::SituGlu, true, 3584, 3072), store_knobs(128, 256)),
        (GemmSpec::for_shape(true, Epilogue::None, false, 3584, 6144), store_knobs(128, 256).with(CLUSTER_KNOB, 2i64)),
    ] {
        let k = build_kernel(&spec, &knobs).unwrap();
        assert_renders(
            &k,
            &knobs,
            &[
                "k3k::tma_store_fence();",
                "k3k::tma_store_wait<1>();",
                "k3k::store_shared_cols<",
                "k3k::tma_store_drain();",
            ],
        );
        let (_, total) = k.shared_layout();
        assert!(total <= 227 * 1024, "{knobs}: {total} bytes of shared memory");
        let m = k3k_codegen::build(&k, k3k_codegen::BuildOptions { assemble: true })
            .unwrap_or_else(|e| panic!("{knobs}: {e}"));
        let r = m.resources.clone().expect("assembled");
        eprintln!("{knobs}: {r:?}");
        assert!(!r.spills(), "{knobs}: {r:?}");
    }
}
