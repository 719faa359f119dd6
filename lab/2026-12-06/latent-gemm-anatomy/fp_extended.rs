//! Scratch check (not part of the suite): fingerprints of `latent_moe_gemm` kernels over the knobs that
//! `k3k fingerprint --every-point` does not walk (the accepted values and absent knobs: LOAD=auto, OVERLAP,
//! PRODUCER, STORE, RELEASE, EPI_TURN, CLUSTER, CLUSTER_ALONG, AHEAD), on the bench presets and odd shapes.
//! Every point prints its IR and CUDA hashes, or the error it was refused with. Run with
//! `cargo test --release --test zz_lmg_fp_extended -- --nocapture > out.txt`.

use k3k::codegen::render;
use k3k::ir::hash::{hash_str, stable_hash};
use k3k::ir::{KnobValue, Knobs};
use k3k::ops::latent_moe_gemm::*;
use k3k::ops::op::{Operator, Preset};
use rayon::prelude::*;

fn options() -> Vec<(&'static str, Vec<Option<KnobValue>>)> {
    let s = |v: &[&str]| v.iter().map(|x| Some(KnobValue::from(*x))).collect::<Vec<_>>();
    let i = |v: &[i64]| v.iter().map(|x| Some(KnobValue::from(*x))).collect::<Vec<_>>();
    let with_absent = |mut v: Vec<Option<KnobValue>>| {
        v.insert(0, None);
        v
    };
    vec![
        ("BM", i(&[64, 128])),
        ("BN", i(&[64, 128, 256])),
        ("BK", i(&[32, 64])),
        ("STAGES", i(&[2, 3, 4])),
        ("WM", i(&[1, 2, 4, 8])),
        ("WN", i(&[1, 2, 4])),
        ("RASTER", s(&["m", "n"])),
        ("MMA", with_absent(s(&["sync", "wgmma"]))),
        ("LOAD", with_absent(s(&["auto", "cp_async", "tma"]))),
        ("STORE", with_absent(s(&["reg", "tma"]))),
        ("OVERLAP", with_absent(s(&["on", "off"]))),
        ("PRODUCER", with_absent(s(&["thread", "warp"]))),
        ("RELEASE", with_absent(s(&["thread", "warp"]))),
        ("EPI_TURN", with_absent(s(&["off", "on"]))),
        ("CLUSTER", with_absent(i(&[1, 2]))),
        ("CLUSTER_ALONG", with_absent(s(&["m", "n"]))),
        (
            "AHEAD",
            with_absent({
                let mut v = s(&["auto"]);
                v.extend(i(&[1, 2, 3]));
                v
            }),
        ),
    ]
}

/// A fixed pseudo-random sample: point `j` picks option `(h(j, axis)) % len` per axis.
fn point(opts: &[(&'static str, Vec<Option<KnobValue>>)], j: u64) -> Knobs {
    let mut k = Knobs::new();
    for (a, (name, vals)) in opts.iter().enumerate() {
        let mut h = j.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (a as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 31;
        h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 29;
        if let Some(v) = &vals[(h % vals.len() as u64) as usize] {
            k.set(name, v.clone());
        }
    }
    k
}

#[test]
fn extended_fingerprints() {
    let op = LatentMoeGemm;
    let mut presets = op.bench_presets();
    presets.push(Preset::new("odd K", &[("G", 5), ("mean", 40), ("K", 100), ("N", 96)]));
    presets.push(Preset::new("dense swiglu", &[("M", 77), ("K", 256), ("N", 512), ("epilogue", 2), ("p", 1)]));
    presets.push(Preset::new("glu odd out", &[("G", 3), ("mean", 30), ("K", 64), ("N", 20), ("epilogue", 1)]));
    let opts = options();
    let n: u64 = std::env::var("LMG_FP_POINTS").ok().and_then(|s| s.parse().ok()).unwrap_or(4000);
    let mut fixed = vec![default_knobs(), sync_knobs()];
    // Each extra knob alone on top of the defaults.
    for (name, vals) in &opts[7..] {
        for v in vals {
            let mut k = default_knobs();
            match v {
                Some(v) => k.set(name, v.clone()),
                None => {
                    k.0.remove(*name);
                }
            }
            fixed.push(k);
        }
    }
    let mut lines = vec![];
    for p in &presets {
        let pts: Vec<Knobs> = fixed.iter().cloned().chain((0..n).map(|j| point(&opts, j))).collect();
        let out: Vec<String> = pts
            .par_iter()
            .map(|k| match op.kernels(p, k) {
                Ok(ks) => ks
                    .iter()
                    .map(|kern| {
                        let cuda = render(kern).map(|c| hash_str(&c)).unwrap_or_else(|e| format!("render error {e}"));
                        format!("{}\t{k}\t{}\t{}\t{cuda}", p.name, kern.name, stable_hash(kern))
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                Err(e) => format!("{}\t{k}\terror\t{e}", p.name),
            })
            .collect();
        lines.extend(out);
    }
    let ok = lines.iter().filter(|l| !l.contains("\terror\t")).count();
    eprintln!("{} points, {ok} built", lines.len());
    for l in lines {
        println!("{l}");
    }
}
