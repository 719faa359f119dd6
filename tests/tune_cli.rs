//! The tuning machinery end to end, on the CPU interpreter backend (no GPU needed): results are written as each
//! candidate finishes, a candidate that crashes its worker costs one candidate, and `kill -9` followed by
//! `--resume` loses no finished measurement.

use k3k::ops::latent_moe_gemm::default_knobs;
use k3k::tuner::{CandidateSpec, Outcome, read_results_file};
use std::path::Path;
use std::process::Command;

const DIMS: &str = "G=2,c0=17,c1=5,K=32,N=48";

/// `k3k`, without the shard variables of a job scheduler the tests may run under.
fn k3k() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_k3k"));
    for k in k3k::tuner::scheduler::SCHEDULER_VARS {
        c.env_remove(k);
    }
    c
}

fn results_file(dir: &Path) -> std::path::PathBuf {
    dir.join("cpu-interp").join("latent_moe_gemm.json")
}

fn tune(dir: &Path, max: usize, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = k3k();
    c.args(["tune", "--backend", "cpu", "--op", "latent_moe_gemm", "--dims", DIMS, "--budget", "10m"])
        .args(["--max-candidates", &max.to_string(), "--results", dir.to_str().unwrap()])
        .args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn a_crashing_candidate_costs_one_candidate() {
    let dir = tempfile::tempdir().unwrap();
    let default_id = CandidateSpec::from_knobs(k3k::tuning::knob_map(&default_knobs())).id;
    let out = tune(dir.path(), 4, &[], &[("K3K_TEST_CRASH_CANDIDATE", &default_id)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let file = read_results_file(&results_file(dir.path())).unwrap();
    let entry = &file.entries[0];
    assert_eq!(entry.candidates.len(), 4, "every candidate recorded");
    let crashed: Vec<_> = entry.candidates.iter().filter(|c| matches!(c.outcome, Outcome::Failed { .. })).collect();
    assert_eq!(crashed.len(), 1, "exactly the injected crash failed");
    assert_eq!(crashed[0].id, default_id);
    let timed = entry.candidates.iter().filter(|c| c.outcome.timing().is_some()).count();
    assert_eq!(timed, 3);
    let winner = entry.winner.as_ref().expect("a checked winner");
    assert_ne!(winner, &default_id);
    assert!(entry.winner_check.as_ref().is_some_and(|c| c.passed));
}

#[test]
fn kill_9_then_resume_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = results_file(dir.path());
    let mut child = k3k()
        .args(["tune", "--backend", "cpu", "--op", "latent_moe_gemm", "--dims", DIMS, "--max-candidates", "12"])
        .args(["--results", dir.path().to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until at least two candidates are on disk, then kill the tuner (its worker dies with its pipes).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    let before = loop {
        if let Ok(f) = read_results_file(&path)
            && f.entries.first().is_some_and(|e| e.candidates.len() >= 2)
        {
            break f;
        }
        assert!(std::time::Instant::now() < deadline, "no candidate recorded in time");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let after_kill = read_results_file(&path).expect("the file is valid JSON after kill -9");
    let out = tune(dir.path(), 12, &["--resume"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let done = read_results_file(&path).unwrap();
    let entry = &done.entries[0];
    assert_eq!(entry.candidates.len(), 12);
    // Every measurement finished before the kill is still there (leaders may be re-timed at the end, which
    // updates their stats), and the resumed run measured only the candidates that were missing.
    for c in &after_kill.entries[0].candidates {
        let now = entry.candidates.iter().find(|d| d.id == c.id).expect("kept");
        assert_eq!(now.outcome.timing().is_some(), c.outcome.timing().is_some(), "candidate {}", c.id);
    }
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table.lines().find(|l| l.starts_with("latent_moe_gemm")).expect("summary row");
    // Columns: op, the two words of the preset name ("custom <dims>"), timed, failed, ...
    let measured: usize = row.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert_eq!(measured, 12 - after_kill.entries[0].candidates.len(), "resume re-measured finished candidates: {row}");
    assert!(before.entries[0].candidates.len() <= after_kill.entries[0].candidates.len());
    assert!(entry.winner.is_some());
}

#[test]
fn shards_merge_into_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![];
    for i in 0..2 {
        let d = dir.path().join(format!("shard{i}"));
        let out = tune(&d, 6, &["--shard", &format!("{i}/2")], &[]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        files.push(results_file(&d));
    }
    let merged = dir.path().join("merged.json");
    let out = k3k()
        .args([
            "results",
            "merge",
            files[0].to_str().unwrap(),
            files[1].to_str().unwrap(),
            "-o",
            merged.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = read_results_file(&merged).unwrap();
    assert_eq!(m.entries[0].candidates.len(), 6, "the two shards cover the candidate list");
    assert!(m.entries[0].winner.is_some());
}

/// Three presets, every measurement slowed to 300 ms, and a budget that the first preset alone would spend at 24
/// candidates: each preset still gets its defaults and a few candidates timed, a checked winner, and the run
/// ends near the budget.
#[test]
fn the_budget_is_shared_by_every_preset() {
    let dir = tempfile::tempdir().unwrap();
    let all_dims = ["G=2,c0=17,c1=5,K=32,N=48", "G=2,c0=9,c1=3,K=32,N=96", "G=2,c0=1,c1=15,K=32,N=200"];
    let mut c = k3k();
    c.args(["tune", "--backend", "cpu", "--op", "latent_moe_gemm", "--budget", "9s", "--max-candidates", "24"])
        .args(["--min-candidates", "3", "--results", dir.path().to_str().unwrap()])
        .env("K3K_TEST_MEASURE_MS", "300");
    for d in all_dims {
        c.args(["--dims", d]);
    }
    let t = std::time::Instant::now();
    let out = c.output().unwrap();
    let wall = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("not tuned"), "{stdout}");
    let file = read_results_file(&results_file(dir.path())).unwrap();
    assert_eq!(file.entries.len(), 3, "one entry per preset");
    let default_id = CandidateSpec::from_knobs(k3k::tuning::knob_map(&default_knobs())).id;
    let mut total = 0;
    for e in &file.entries {
        let timed = e.candidates.iter().filter(|c| c.outcome.timing().is_some()).count();
        assert!(timed >= 3, "{timed} timed in {:?}", e.key);
        assert!(e.candidate(&default_id).is_some_and(|c| c.outcome.timing().is_some()), "defaults timed");
        assert!(e.default_ms.is_some() && e.winner.is_some());
        total += e.candidates.len();
    }
    assert!(total < 3 * 24, "the budget cut the candidate lists ({total})");
    assert!(wall < std::time::Duration::from_secs(9 + 8), "{wall:?}\n{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("latent_moe_gemm")).count(), 3, "{stdout}");
}

/// `--plan` needs no GPU: every preset of `--op all` listed once, the anchor presets (SEMANTICS.md section 4) first and each with
/// at least the minimum, within the budget.
#[test]
fn plan_covers_every_preset_spec_anchors_first() {
    let out = k3k()
        .args(["tune", "--plan", "--op", "all", "--budget", "9m", "--max-candidates", "24", "--compile-s", "3"])
        .args(["--jobs", "16", "--gpus", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with(['0', '1', '2']) && l.ends_with("given"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let presets: usize = k3k::ops::registry::all().iter().map(|o| o.bench_presets().len()).sum();
    assert_eq!(rows.len(), presets, "{stdout}");
    let tiers: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert!(tiers.windows(2).all(|w| w[0] <= w[1]), "tiers in order: {tiers:?}");
    assert_eq!(tiers.iter().filter(|t| **t == "0").count(), 18);
    for r in rows.iter().filter(|r| r[0] == "0") {
        let plan: usize = r[r.len() - 3].parse().unwrap();
        assert!(plan >= 4, "{r:?}");
    }
    let est = stdout.lines().find(|l| l.starts_with("estimated wall")).expect("estimate line");
    let secs: f64 = est.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(secs <= 540.0, "{est}");
}
