//! A tune split over a job array and merged back, on the CPU interpreter backend (no GPU): the shards merged with
//! `k3k results merge` hold the winners of one unsharded run, and the shard that a Slurm array task or a Kubernetes
//! Indexed Job's pod takes from its variables is the one `--shard` names.

mod common;

use common::{Run, k3k_command, run};
use k3k::tuner::{ResultsFile, TuneKey, read_results_file};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// mx.quantize has a knob space of 12 points (BR x W), 11 of which build for these shapes. With `--max-candidates
/// 18` the first round (two thirds: 12) takes every point and the second round finds no neighbour left to time, so
/// the search is exhaustive: which candidates exist does not depend on which one led, in the whole run or in a
/// shard. (With a larger space a shard's second round explores the neighbours of its own leader, not the whole
/// run's, and a merge of shards holds other candidates than one run does.)
const OP: &str = "mx.quantize";
const DIMS: [&str; 2] = ["K=256,R=16,fmt=0,rule=0", "K=128,R=32,fmt=1,rule=1,src=1"];
const SHARDS: u32 = 3;
const LIMIT: Duration = Duration::from_secs(180);

/// `k3k tune` of the two problems into `dir`, with each candidate's time a fixed function of its id
/// (`K3K_TEST_TIME_BY_ID`): the interpreter's wall times are noise, which would pick a different winner in each
/// run; with the hook, the fastest candidate is the same one in every process.
fn tune_run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut c = k3k_command();
    c.args(["tune", "--backend", "cpu", "--op", OP, "--budget", "10m", "--max-candidates", "18"])
        .args(["--results", dir.to_str().unwrap()])
        .env("K3K_TEST_TIME_BY_ID", "1");
    for d in DIMS {
        c.args(["--dims", d]);
    }
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run(c, "tune", LIMIT)
}

/// [`tune_run`], which must succeed and say which shard it took.
fn tune(dir: &Path, args: &[&str], env: &[(&str, &str)], says: &str) -> ResultsFile {
    let r = tune_run(dir, args, env);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.lines().any(|l| l.starts_with(says)), "expected a line starting `{says}`:\n{}", r.all());
    read_results_file(&results_file(dir)).unwrap()
}

fn results_file(dir: &Path) -> PathBuf {
    dir.join("cpu-interp").join(format!("{OP}.json"))
}

/// Per key: every candidate's knobs (as JSON) by id.
fn candidates(f: &ResultsFile) -> BTreeMap<TuneKey, BTreeMap<String, String>> {
    f.entries
        .iter()
        .map(|e| {
            let c = e.candidates.iter().map(|c| (c.id.clone(), serde_json::to_string(&c.knobs).unwrap())).collect();
            (e.key.clone(), c)
        })
        .collect()
}

#[test]
fn shards_merged_hold_the_winners_of_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let whole = tune(&dir.path().join("whole"), &[], &[], "no shard: the whole run");
    let mut files = vec![];
    let mut timed_by: BTreeMap<(TuneKey, String), u32> = BTreeMap::new();
    for i in 0..SHARDS {
        let d = dir.path().join(format!("shard{i}"));
        let part = tune(&d, &["--shard", &format!("{i}/{SHARDS}")], &[], &format!("shard {i}/{SHARDS} from --shard"));
        for (key, cands) in candidates(&part) {
            assert!(!cands.is_empty(), "shard {i} timed nothing for {key:?}");
            for id in cands.into_keys() {
                // The shards partition the work: no candidate is timed twice (a shard's second round skips the
                // other shards' part of the first).
                if let Some(j) = timed_by.insert((key.clone(), id.clone()), i) {
                    panic!("{id} timed by shards {j} and {i}");
                }
            }
        }
        files.push(results_file(&d).to_str().unwrap().to_string());
    }
    let merged_path = dir.path().join("merged.json");
    let mut c = k3k_command();
    c.args(["results", "merge"]).args(&files).args(["-o", merged_path.to_str().unwrap()]);
    let r = run(c, "results merge", LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let merged = read_results_file(&merged_path).unwrap();

    // What must be equal whatever the times: the keys, and every candidate (id and knobs) of each key, since the
    // shards partition an exhaustive search (see OP).
    assert_eq!(candidates(&merged), candidates(&whole));
    assert_eq!(whole.entries.len(), DIMS.len());
    for w in &whole.entries {
        assert!(w.candidates.len() > SHARDS as usize, "{} candidates: too few to split", w.candidates.len());
        let m = merged.entry(&w.key).expect("the same keys");
        // What is equal because the times are a function of the id (see `tune_run`): the winner (the fastest
        // candidate whose check passed), its time, and the defaults' time (timed in one shard only; the merge
        // keeps it). Dates and the checks' error values are not compared.
        assert!(w.winner.is_some(), "{:?}", w.key);
        assert_eq!(m.winner, w.winner, "{:?}", w.key);
        let id = w.winner.as_deref().unwrap();
        let (wc, mc) = (w.candidate(id).unwrap(), m.candidate(id).unwrap());
        assert_eq!(mc.knobs, wc.knobs);
        assert_eq!(mc.outcome.timing().map(|t| t.median_ms), wc.outcome.timing().map(|t| t.median_ms));
        assert_eq!(m.default_ms, w.default_ms);
        assert!(w.default_ms.is_some());
        assert!(m.winner_check.as_ref().is_some_and(|c| c.passed) && w.winner_check.as_ref().is_some_and(|c| c.passed));
    }
}

#[test]
fn scheduler_variables_give_the_split_of_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let mut splits = vec![];
    for i in 0..SHARDS {
        let n = SHARDS.to_string();
        let d = |name: &str| dir.path().join(format!("{name}{i}"));
        let flag =
            candidates(&tune(&d("flag"), &["--shard", &format!("{i}/{n}")], &[], &format!("shard {i}/{n} from")));
        // A Slurm array `--array=10-14:2`: task ids 10, 12, 14 are shards 0, 1, 2.
        let id = (10 + 2 * i).to_string();
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", id.as_str()),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_MAX", "14"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
            ("SLURM_ARRAY_TASK_COUNT", n.as_str()),
        ];
        let from_slurm = tune(&d("slurm"), &[], &slurm, &format!("shard {i}/{n} from Slurm (SLURM_ARRAY_TASK_ID={id}"));
        assert_eq!(candidates(&from_slurm), flag, "Slurm task {id}");
        // A Kubernetes Indexed Job's pod, the count from the variable, then from the flag.
        let index = i.to_string();
        let k8s = [("JOB_COMPLETION_INDEX", index.as_str()), ("K3K_SHARD_COUNT", n.as_str())];
        let says = format!("shard {i}/{n} from Kubernetes (JOB_COMPLETION_INDEX={i}, K3K_SHARD_COUNT={n})");
        assert_eq!(candidates(&tune(&d("k8s-var"), &[], &k8s, &says)), flag, "pod {i}");
        let says = format!("shard {i}/{n} from Kubernetes (JOB_COMPLETION_INDEX={i}, --shard-count {n})");
        let from_flag = tune(&d("k8s-flag"), &["--shard-count", &n], &k8s[..1], &says);
        assert_eq!(candidates(&from_flag), flag, "pod {i}, --shard-count");
        splits.push(flag);
    }
    // The three shards differ (a test that compared three copies of the whole run would pass above).
    assert!(splits[0] != splits[1] && splits[1] != splits[2] && splits[0] != splits[2]);
}

/// Environment variables of one run: (name, value).
type Vars<'a> = &'a [(&'a str, &'a str)];

#[test]
fn the_flag_wins_and_bad_variables_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = [("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_MIN", "0"), ("SLURM_ARRAY_TASK_COUNT", "2")];
    tune(
        &dir.path().join("flag"),
        &["--shard", "1/3"],
        &slurm,
        "shard 1/3 from --shard (overrides SLURM_ARRAY_TASK_ID=0 of the environment)",
    );
    let cases: [(Vars, &[&str], &str); 4] = [
        (
            &[("SLURM_ARRAY_TASK_ID", "4"), ("SLURM_ARRAY_TASK_MIN", "1"), ("SLURM_ARRAY_TASK_COUNT", "3")],
            &[],
            "SLURM_ARRAY_TASK_ID=4, SLURM_ARRAY_TASK_MIN=1, SLURM_ARRAY_TASK_STEP=1, SLURM_ARRAY_TASK_COUNT=3: the task \
             id is not one of the array's 3 ids",
        ),
        (&[("JOB_COMPLETION_INDEX", "0")], &[], "JOB_COMPLETION_INDEX is set but a shard count"),
        (&[("K3K_SHARD_COUNT", "3")], &[], "K3K_SHARD_COUNT=3 is set but a shard index"),
        (&[("JOB_COMPLETION_INDEX", "3")], &["--shard-count", "3"], "JOB_COMPLETION_INDEX=3 with --shard-count 3"),
    ];
    for (i, (env, args, says)) in cases.into_iter().enumerate() {
        let d = dir.path().join(format!("bad{i}"));
        let r = tune_run(&d, args, env);
        assert_eq!(r.code, Some(2), "{env:?}: {}", r.all());
        assert!(r.stderr.contains(&format!("error: {says}")), "{env:?}: {}", r.stderr);
        assert!(!results_file(&d).exists(), "{env:?}: nothing tuned");
    }
    // `k3k doctor` says which shard a tune would take.
    let mut c = k3k_command();
    c.arg("doctor").envs(slurm);
    let r = run(c, "doctor", LIMIT);
    assert!(
        r.stdout.contains("  scheduler: SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=2 SLURM_ARRAY_TASK_MIN=0"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("without --shard, shard 0/2 from Slurm (SLURM_ARRAY_TASK_ID=0"), "{}", r.stdout);
}
