//! Kernels of the gated_mla builders at knob records outside the operators' spaces (records the CLI refuses:
//! PRODUCER=thread, PERSIST, HGROUP, LOAD=auto with other knobs, records that leave optional knobs out), the
//! combine's whole space, a strided sample of the decode space and a few bad records: one line per (builder,
//! problem, record) with the kernel's name, IR hash and CUDA hash, or the error. Copied into ops/tests/ and run
//! at the commit before and after the typed knobs of 2026-12-07 (`lab/2026-12-07/typed-knobs-mla.md`):
//!   cp lab/2026-12-07/typed-knobs-mla/mla_knob_records.rs ops/tests/ && \
//!   MLA_RECORDS_OUT=/tmp/x.txt cargo test -p k3k-ops --test mla_knob_records -- --nocapture
use k3k_codegen::render;
use k3k_ir::hash::{hash_str, stable_hash};
use k3k_ir::{Kernel, Knobs};
use k3k_ops::OpError;
use k3k_ops::gated_mla::*;
use std::fmt::Write as _;

fn line(out: &mut String, what: &str, knobs: &Knobs, r: Result<Kernel, OpError>) {
    let res = match r {
        Ok(k) => format!("{}\t{}\t{}", k.name, stable_hash(&k), hash_str(&render(&k).unwrap())),
        Err(e) => format!("ERR\t{e}"),
    };
    let _ = writeln!(out, "{what}\t{knobs}\t{res}");
}

fn without(k: Knobs, names: &[&str]) -> Knobs {
    let mut k = k;
    for n in names {
        k.0.remove(*n);
    }
    k
}

#[test]
fn records() {
    let mut out = String::new();
    // Prefill.
    let d = prefill_default_knobs();
    let mut pre = vec![
        d.clone(),
        prefill_sync_knobs(),
        prefill_wgmma_knobs(),
        without(prefill_sync_knobs(), &["MMA", "OVERLAP"]),
        without(prefill_wgmma_knobs(), &["OVERLAP"]),
        prefill_sync_knobs().with("LOAD", "auto"),
        d.clone().with("BM", 192i64).with("WM", 12i64).with("BN", 64i64),
        d.clone().with("BM", 192i64).with("WM", 12i64).with("BN", 64i64).with("PINGPONG", false).with("LOAD", "tma"),
        d.clone().with("PERSIST", true),
        d.clone().with("PERSIST", true).with("LOAD", "tma"),
        d.clone().with("PERSIST", false),
        d.clone().with("QORDER", "lpt").with("HGROUP", 2i64),
        d.clone().with("QORDER", "lpt").with("HGROUP", 0i64),
        d.clone().with("SMGUARD", true).with("PINGPONG", false),
        d.clone().with("PINGPONG", false),
        without(d.clone(), &["LOAD", "PRODUCER", "PINGPONG", "SOFTMAX", "QORDER"]),
        // Bad records (errors only).
        d.clone().with("LOAD", "dma"),
        d.clone().with("MMA", "tensor"),
        d.clone().with("QORDER", "rows"),
        d.clone().with("PRODUCER", "block"),
        d.clone().with("SOFTMAX", "slow"),
        d.clone().with("BM", true),
        d.clone().with("OVERLAP", 1i64),
        without(d.clone(), &["BM"]),
        without(d.clone(), &["QK_UNROLL"]),
    ];
    for p in [PrefillSpec::new(true, true, false), PrefillSpec::new(false, false, false)] {
        for k in prefill_knob_space().points() {
            for v in [
                k.clone().with("PRODUCER", "thread"),
                k.clone().with("PRODUCER", "warp").with("LOAD", "auto"),
                k.clone().with("PERSIST", true).with("PRODUCER", "warp"),
                k.clone().with("HGROUP", 3i64),
            ] {
                line(&mut out, &format!("prefill {p:?}"), &v, build_prefill(&p, &v));
            }
        }
    }
    pre.extend([d.clone().with("PRODUCER", "thread"), d.clone().with("PRODUCER", "thread").with("LOAD", "tma")]);
    for p in [
        PrefillSpec::new(true, true, false),
        PrefillSpec::new(false, false, true),
        PrefillSpec::new(true, true, true),
        PrefillSpec::new(false, true, false),
    ] {
        for k in &pre {
            line(&mut out, &format!("prefill {p:?}"), k, build_prefill(&p, k));
        }
    }
    // Decode.
    let spec = DecodeSpec::default();
    let mut dec = vec![
        decode_default_knobs(),
        decode_auto_wgmma_knobs(),
        decode_wgmma_knobs(1),
        decode_wgmma_knobs(2),
        decode_wgmma_knobs(4),
        decode_sync_knobs_for_rows(12),
        decode_sync_knobs_for_rows(32),
        decode_wgmma_knobs(2).with("OVERLAP", true).with("STAGES", 3i64),
        decode_wgmma_knobs(2).with("SOFTMAX", "fast"),
        decode_auto_wgmma_knobs().with("OVERLAP", true).with("STAGES", 3i64),
        without(decode_wgmma_knobs(2), &["SWN", "QK_ACCS", "BT_PREFETCH"]),
        decode_default_knobs().with("BT_PREFETCH", 2i64),
        decode_default_knobs().with("QK_UNROLL", 2i64),
        decode_default_knobs().with("SCORES", "split"),
        decode_default_knobs().with("LOAD", "auto"),
        decode_default_knobs().with("MMA", "tensor"),
        decode_default_knobs().with("OVERLAP", 1i64),
        without(decode_default_knobs(), &["SCORES"]),
    ];
    for r in [1usize, 12, 16, 17, 32, 64, 96, 192] {
        dec.push(decode_knobs_for_rows(r));
    }
    dec.extend(decode_knob_space().strided(60000));
    for k in &dec {
        line(&mut out, "decode", k, build_decode(&spec, k));
        line(&mut out, "decode_direct", k, build_decode_direct(&spec, k));
        let occ = (decode_blocks_per_sm(&spec, k), decode_blocks_per_request(&spec, k, 96));
        let _ = writeln!(
            out,
            "decode_occupancy\t{k}\t{:?}\t{:?}",
            occ.0.map_err(|e| e.to_string()),
            occ.1.map_err(|e| e.to_string())
        );
    }
    // Combine.
    let mut comb = combine_knob_space().points();
    comb.extend([
        combine_default_knobs(),
        without(combine_default_knobs(), &["BC"]),
        combine_default_knobs().with("BC", 256i64),
    ]);
    for k in &comb {
        line(&mut out, "combine", k, build_decode_combine(&spec, k));
    }
    // Gate.
    let mut gate = gate_knob_space().points();
    gate.extend([gate_default_knobs(), without(gate_default_knobs(), &["BK"]), gate_default_knobs().with("WN", "2")]);
    for g in [true, false] {
        for k in &gate {
            line(&mut out, &format!("gate {g}"), k, build_gate(&GateSpec::new(g), k));
        }
    }
    std::fs::write(std::env::var("MLA_RECORDS_OUT").expect("MLA_RECORDS_OUT"), out).unwrap();
}
