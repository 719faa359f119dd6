//! Every gated-MLA kernel, at its default knobs and at a few other knob points, renders, compiles with NVRTC
//! and assembles with ptxas for sm_90a with 0 spill bytes (registers printed with `--nocapture`). Every point
//! of each knob space either builds a valid kernel or is rejected as invalid knobs; with
//! `K3K_COMPILE_ALL=1` every valid point is assembled and checked for spills too.
use k3k_codegen::{BuildOptions, build};
use k3k_ir::{Kernel, KnobSpace, Knobs};
use k3k_ops::OpError;
use k3k_ops::gated_mla::*;

#[path = "common/mla_knobs.rs"]
mod mla_knobs;
use mla_knobs::{bn64, prefill_bm192_points, prefill_fast_softmax_points, prefill_wgmma_points, rows32};

fn assemble(k: &Kernel) -> u32 {
    let m = build(k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    let r = m.resources.clone().expect("assembled");
    eprintln!(
        "{}: {} registers, {} B dynamic smem, spill st/ld {}/{} B, nvrtc {:.0} ms",
        k.name,
        r.registers,
        k.shared_bytes(),
        r.spill_store_bytes,
        r.spill_load_bytes,
        m.nvrtc_ms
    );
    assert!(!r.spills(), "{}: spills {r:?}", k.name);
    assert!(!r.wgmma_serialized, "{}: ptxas serialized the wgmma products {r:?}", k.name);
    assert!(r.registers <= 255, "{}: {r:?}", k.name);
    r.registers
}

/// Every point builds or is rejected as invalid knobs (never an IR error or a panic); the valid kernels.
fn valid_points(space: &KnobSpace, build_fn: impl Fn(&Knobs) -> Result<Kernel, OpError>) -> Vec<Kernel> {
    let mut ok = vec![];
    for p in space.points() {
        match build_fn(&p) {
            Ok(k) => ok.push(k),
            Err(OpError::InvalidKnobs { .. }) => {}
            Err(e) => panic!("knobs {p}: {e}"),
        }
    }
    eprintln!("{} of {} knob points valid", ok.len(), space.size());
    assert!(!ok.is_empty());
    if std::env::var("K3K_COMPILE_ALL").is_ok_and(|v| v == "1") {
        for k in &ok {
            assemble(k);
        }
    }
    ok
}

#[test]
fn prefill_kernels_compile_without_spills() {
    for causal in [true, false] {
        for gate in [true, false] {
            for varlen in [false, true] {
                let spec = PrefillSpec::new(causal, gate, varlen);
                assemble(&build_prefill(&spec, &prefill_default_knobs()).unwrap());
            }
        }
    }
    let spec = PrefillSpec::new(true, true, false);
    valid_points(&prefill_knob_space(), |k| build_prefill(&spec, k));
    for k in [
        prefill_sync_knobs(),
        prefill_sync_knobs().with("BN", 32i64).with("STAGES", 3i64),
        prefill_sync_knobs().with("BM", 64i64).with("WM", 4i64),
        prefill_sync_knobs().with("BM", 64i64).with("WM", 4i64).with("BN", 32i64).with("QK_UNROLL", false),
    ] {
        assemble(&build_prefill(&spec, &k).unwrap());
    }
    // The wgmma kernels, every variant of the spec at the wgmma knobs and the other tested points.
    for causal in [true, false] {
        for gate in [true, false] {
            for varlen in [false, true] {
                let spec = PrefillSpec::new(causal, gate, varlen);
                assemble(&build_prefill(&spec, &prefill_wgmma_knobs()).unwrap());
            }
        }
    }
    for k in prefill_wgmma_points() {
        assemble(&build_prefill(&spec, &k).unwrap());
    }
    // Three warpgroups (384 threads, so ptxas caps the registers at 168): every variant of the spec.
    for k in prefill_bm192_points() {
        for causal in [true, false] {
            for gate in [true, false] {
                for varlen in [false, true] {
                    let r = assemble(&build_prefill(&PrefillSpec::new(causal, gate, varlen), &k).unwrap());
                    assert!(r <= 168, "{k}: {r} registers");
                }
            }
        }
    }
    // Too many registers per thread or too much shared memory is rejected before anything is compiled.
    let bad = prefill_sync_knobs().with("BN", 128i64);
    assert!(matches!(build_prefill(&spec, &bad), Err(OpError::InvalidKnobs { .. })));
}

/// `SOFTMAX=fast` / `SMGUARD=true`: the causal gated kernel (fixed length and varlen) at each of their points
/// (BM = 192 under the 168-register cap of 384 threads), and every variant of the spec at fast + guard.
#[test]
fn prefill_fast_softmax_kernels_compile_without_spills() {
    for k in prefill_fast_softmax_points() {
        for varlen in [false, true] {
            let r = assemble(&build_prefill(&PrefillSpec::new(true, true, varlen), &k).unwrap());
            assert!(k.u32("BM").unwrap() != 192 || r <= 168, "{k}: {r} registers");
        }
    }
    let k = prefill_default_knobs().with("SOFTMAX", "fast").with("SMGUARD", true);
    for causal in [true, false] {
        for gate in [true, false] {
            for varlen in [false, true] {
                assemble(&build_prefill(&PrefillSpec::new(causal, gate, varlen), &k).unwrap());
            }
        }
    }
}

#[test]
fn decode_kernels_compile_without_spills() {
    let spec = DecodeSpec::default();
    assemble(&build_decode(&spec, &decode_default_knobs()).unwrap());
    assemble(&build_decode(&spec, &decode_sync_knobs_for_rows(16)).unwrap());
    valid_points(&decode_knob_space(), |k| build_decode(&spec, k));
    for k in [
        rows32(),
        decode_sync_knobs_for_rows(96),
        rows32().with("BN", 32i64).with("WN", 2i64).with("STAGES", 3i64),
        bn64(),
        bn64().with("SCORES", "replicated").with("BN", 32i64).with("STAGES", 3i64),
        rows32().with("SCORES", "replicated"),
        rows32().with("BM", 64i64).with("BN", 32i64).with("WM", 4i64).with("WN", 2i64).with("SCORES", "replicated"),
        // Two blocks per SM: 32-key stages on 4 warps (score columns on 2), 3 partial score accumulators.
        decode_sync_knobs_for_rows(16).with("QK_ACCS", 1i64),
        // (bn64() with QK_ACCS=3 spills 8 bytes since the copy_async fast paths of 2026-11-30; the tuner drops
        // spilling candidates before timing them.)
        // 96 rows in two m-tiles of 48 on [3, 4] warps (384 threads).
        rows32().with("BM", 48i64).with("WM", 3i64).with("BN", 32i64).with("SWN", 2i64),
        rows32()
            .with("BM", 48i64)
            .with("WM", 3i64)
            .with("BN", 32i64)
            .with("SWN", 2i64)
            .with("QK_ACCS", 3i64)
            .with("STAGES", 3i64),
        rows32().with("BN", 32i64).with("SWN", 2i64).with("QK_ACCS", 3i64),
    ] {
        assemble(&build_decode(&spec, &k).unwrap());
    }
    // 4-deep rings of 32-key stages at 16 rows (2026-12-01), split-KV and direct.
    for k in [
        bn64().with("BN", 32i64).with("SWN", 2i64).with("STAGES", 4i64),
        bn64().with("BN", 32i64).with("SWN", 2i64).with("STAGES", 3i64),
        bn64().with("BN", 32i64).with("WN", 2i64).with("STAGES", 4i64),
        bn64().with("BN", 16i64).with("SCORES", "replicated").with("STAGES", 4i64),
        bn64().with("BN", 16i64).with("SCORES", "replicated").with("WN", 2i64).with("STAGES", 4i64),
        bn64().with("BN", 32i64).with("SWN", 2i64).with("STAGES", 4i64).with("QK_ACCS", 3i64),
        bn64().with("BN", 32i64).with("SWN", 2i64).with("STAGES", 5i64).with("QK_ACCS", 3i64),
        bn64().with("BN", 16i64).with("SCORES", "replicated").with("STAGES", 4i64).with("QK_ACCS", 3i64),
        // 2026-12-04: the K/V ring by bulk tensor copies (LOAD=tma), 64-key stages and a 5-deep 32-key ring.
        bn64().with("LOAD", "tma"),
        bn64().with("LOAD", "tma").with("BN", 32i64).with("SWN", 2i64).with("STAGES", 5i64),
    ] {
        assemble(&build_decode(&spec, &k).unwrap());
        assemble(&build_decode_direct(&spec, &k).unwrap());
    }
    assemble(&build_decode_combine(&spec, &combine_default_knobs()).unwrap());
    valid_points(&combine_knob_space(), |k| build_decode_combine(&spec, k));
    assemble(&build_decode_combine(&spec, &Knobs::new().with("BM", 32i64).with("WM", 2i64).with("WN", 4i64)).unwrap());
    // 8 warps split the 64-column value tiles too finely for mma (16 columns per warp at least).
    let bad = decode_sync_knobs_for_rows(16).with("WN", 8i64);
    assert!(matches!(build_decode(&spec, &bad), Err(OpError::InvalidKnobs { .. })));
}

#[test]
fn decode_wgmma_kernels_compile_without_spills() {
    let spec = DecodeSpec::default();
    for k in [
        decode_wgmma_knobs(2),
        decode_wgmma_knobs(4),
        decode_wgmma_knobs(2).with("BT_PREFETCH", 1i64),
        decode_wgmma_knobs(2).with("QK_UNROLL", 0i64),
        decode_wgmma_knobs(2).with("BN", 32i64).with("STAGES", 3i64),
        decode_wgmma_knobs(2).with("BM", 128i64).with("WM", 8i64).with("BN", 32i64),
        // 4-deep rings (2026-12-01): 32-key stages on one warpgroup, 16-key stages on two.
        decode_wgmma_knobs(2).with("BN", 32i64).with("STAGES", 4i64),
        decode_wgmma_knobs(2).with("BM", 128i64).with("WM", 8i64).with("BN", 16i64).with("STAGES", 4i64),
        // 2026-12-04: the overlapped schedule (32-key stages, 3 and 4 deep) and the fast softmax (which spills 16
        // bytes at 64-key stages: 255 registers).
        decode_wgmma_knobs(2).with("BN", 32i64).with("STAGES", 3i64).with("OVERLAP", true),
        decode_wgmma_knobs(2).with("BN", 32i64).with("STAGES", 4i64).with("OVERLAP", true).with("SOFTMAX", "fast"),
        decode_wgmma_knobs(2).with("BN", 32i64).with("STAGES", 3i64).with("SOFTMAX", "fast"),
        // Two value warpgroups per block (256 threads at up to 255 registers each fit the 64 K register file).
        decode_wgmma_knobs(1).with("VWG", 2i64),
        decode_wgmma_knobs(2).with("VWG", 2i64),
        // The automatic knobs from 64 rows (the fast softmax, rolled: unrolled it spills 8-20 bytes), and with
        // the exact softmax unrolled.
        decode_knobs_for_rows(96),
        decode_knobs_for_rows(96).with("SOFTMAX", "exact").with("QK_UNROLL", 1i64),
        // 2026-12-04: warpgroup 0 alone computes the scores (SCORES=shared), both softmaxes, rolled and unrolled.
        decode_knobs_for_rows(96).with("SCORES", "shared"),
        decode_knobs_for_rows(96).with("SCORES", "shared").with("SOFTMAX", "exact").with("QK_UNROLL", 1i64),
        decode_knobs_for_rows(96).with("SCORES", "shared").with("BN", 32i64).with("STAGES", 4i64).with("OVERLAP", true),
        // LOAD=tma: the K/V ring by bulk tensor copies (238 registers for the automatic knobs instead of 254).
        decode_knobs_for_rows(96).with("LOAD", "tma"),
        decode_knobs_for_rows(96).with("LOAD", "tma").with("SCORES", "shared"),
        decode_knobs_for_rows(96)
            .with("LOAD", "tma")
            .with("SCORES", "shared")
            .with("BN", 32i64)
            .with("STAGES", 4i64)
            .with("OVERLAP", true),
    ] {
        assemble(&build_decode(&spec, &k).unwrap());
        assemble(&build_decode_direct(&spec, &k).unwrap());
    }
}

#[test]
fn gate_kernels_compile_without_spills() {
    for gate in [true, false] {
        assemble(&build_gate(&GateSpec::new(gate), &gate_default_knobs()).unwrap());
    }
    let spec = GateSpec::new(true);
    valid_points(&gate_knob_space(), |k| build_gate(&spec, k));
    for k in [
        gate_default_knobs().with("BM", 16i64).with("WM", 1i64).with("WN", 4i64).with("BK", 32i64),
        gate_default_knobs().with("BM", 128i64).with("WM", 4i64).with("WN", 2i64).with("STAGES", 2i64),
    ] {
        assemble(&build_gate(&spec, &k).unwrap());
    }
}
