//! `k3k tune` over many presets under a small budget, on the CPU interpreter backend (no GPU): every preset is
//! tuned (defaults timed, a checked winner), presets of the same tuning key are tuned once, and the early stop
//! drops slow candidates but never the winner. Times are a fixed function of each candidate's id
//! (`K3K_TEST_TIME_BY_ID`), and every measurement is slowed to a fixed wall time (`K3K_TEST_MEASURE_MS`), so the
//! budget binds as it would on a GPU.

mod common;

use common::{k3k_command, run};
use k3k::tuner::read_results_file;
use std::time::{Duration, Instant};

const OP: &str = "mx.quantize";
/// Eight problems, the first twice (the same key: tuned once).
const DIMS: [&str; 9] = [
    "K=256,R=16,fmt=0,rule=0",
    "K=128,R=32,fmt=1,rule=1,src=1",
    "K=256,R=8,fmt=1,rule=0",
    "K=512,R=4,fmt=0,rule=1",
    "K=128,R=64,fmt=0,rule=0,src=1",
    "K=384,R=8,fmt=1,rule=1",
    "K=256,R=24,fmt=0,rule=1,src=1",
    "K=640,R=2,fmt=1,rule=0",
    "K=256,R=16,fmt=0,rule=0",
];

/// The id-derived time of the CPU worker's test hook (src/cli/worker.rs).
fn hook_ms(id: &str) -> f64 {
    1.0 + (k3k::tuner::stable_hash(id) % 1_000_000) as f64 * 1e-5
}

#[test]
fn a_small_budget_tunes_every_preset_once_with_early_stops() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 12.0;
    let mut c = k3k_command();
    c.args(["tune", "--backend", "cpu", "--op", OP, "--budget", "12s", "--max-candidates", "12"])
        .args(["--results", dir.path().to_str().unwrap()])
        .env("K3K_TEST_TIME_BY_ID", "1")
        .env("K3K_TEST_MEASURE_MS", "120");
    for d in DIMS {
        c.args(["--dims", d]);
    }
    let t = Instant::now();
    let r = run(c, "tune", Duration::from_secs(120));
    let wall = t.elapsed().as_secs_f64();
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(!r.stdout.contains("not tuned"), "{}", r.all());
    // Past the budget by at most about one job (a re-time and a check of 120 ms each, plus start-up).
    assert!(wall < budget + 6.0, "{wall} s\n{}", r.all());
    let rows: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with(OP)).collect();
    assert_eq!(rows.len(), DIMS.len(), "{}", r.stdout);
    assert!(rows[8].contains("= mx.quantize / custom K=256,R=16,fmt=0,rule=0"), "the repeat shares: {}", rows[8]);
    let file = read_results_file(&dir.path().join("cpu-interp").join(format!("{OP}.json"))).unwrap();
    assert_eq!(file.entries.len(), DIMS.len() - 1, "one entry per key");
    let mut stopped = 0;
    for e in &file.entries {
        assert!(e.default_ms.is_some(), "{:?}: the defaults timed", e.key);
        let w = e.winner.as_deref().expect("a winner");
        assert!(e.winner_check.is_some_and(|c| c.passed), "{:?}: the winner checked", e.key);
        let wc = e.candidate(w).unwrap();
        assert!(wc.outcome.timing().unwrap().samples >= 10, "the winner was timed in full");
        // The winner is the fastest candidate timed for the key, and no stopped candidate was faster.
        for c in &e.candidates {
            let Some(t) = c.outcome.timing() else { continue };
            assert!(hook_ms(&c.id) >= hook_ms(w), "{} beats the winner {w}", c.id);
            if t.samples as usize == k3k::tuner::protocol::SCREEN_SAMPLES {
                stopped += 1;
                assert!(t.median_ms > hook_ms(w) * 1.25, "{} stopped at {} ms", c.id, t.median_ms);
            }
        }
    }
    assert!(stopped > 0, "the early stop dropped some candidates\n{}", r.all());
}
