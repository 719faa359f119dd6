//! A candidate that faults or hangs costs one candidate, not the run.

use k3k_tuner::protocol::BenchSettings;
use k3k_tuner::{
    CandidateSpec, FailStage, GpuKey, IsolationFailure, KnobMap, Outcome, ResultsStore, TuneEvent, TuneKey,
    TuneOptions, Worker, WorkerMeasurer, WorkerPool, WorkerSpec, run_isolated, tune,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const FAKE: &str = env!("CARGO_BIN_EXE_k3k-fake-worker");

#[derive(Serialize)]
struct Req {
    action: &'static str,
    id: u32,
    ms: f64,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Resp {
    id: u32,
    pid: u32,
}

fn req(id: u32, action: &'static str) -> Req {
    Req { action, id, ms: 0.0 }
}

fn pid_is_gone(pid: u32) -> bool {
    // A killed and reaped child leaves no /proc entry (Linux); elsewhere, trust the reaping.
    !cfg!(target_os = "linux") || !Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_crash_in_a_batch_of_ten_costs_one_request() {
    let mut pool = WorkerPool::new(vec![WorkerSpec::new(FAKE)], Duration::from_secs(10));
    let reqs: Vec<Req> = (0..10).map(|i| req(i, if i == 4 { "crash" } else { "ok" })).collect();
    let mut seen = Vec::new();
    let results: Vec<Result<Resp, IsolationFailure>> = pool.run_batch(&reqs, |i, r| seen.push((i, r.is_ok())));
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 9);
    match &results[4] {
        Err(IsolationFailure::Crashed { code, signal, stderr_tail }) => {
            assert_eq!((*code, *signal), (Some(17), None));
            assert!(stderr_tail.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{stderr_tail}");
        }
        other => panic!("expected a crash, got {other:?}"),
    }
    for (i, r) in results.iter().enumerate() {
        if i != 4 {
            assert_eq!(r.as_ref().unwrap().id, i as u32);
        }
    }
    // one worker served 0..4, a fresh one 5..10; the callback saw every result as it came
    let pid = |i: usize| results[i].as_ref().unwrap().pid;
    assert!((0..4).all(|i| pid(i) == pid(0)));
    assert!((5..10).all(|i| pid(i) == pid(5)));
    assert_ne!(pid(0), pid(5));
    assert_eq!(pool.workers()[0].spawn_count(), 2);
    assert_eq!(seen.len(), 10);
    assert!(pid_is_gone(pid(0)));
}

#[test]
fn an_abort_reports_the_signal_and_the_worker_recovers() {
    let mut w = Worker::new(WorkerSpec::new(FAKE), Duration::from_secs(10));
    let first: Resp = w.call(&req(1, "ok")).unwrap();
    let err = w.call::<_, Resp>(&req(2, "abort")).unwrap_err();
    if cfg!(unix) {
        assert!(matches!(err, IsolationFailure::Crashed { signal: Some(6), .. }), "{err}");
        assert!(err.to_string().contains("SIGABRT"), "{err}");
    }
    assert_eq!(err.stage(), FailStage::Crash);
    let after: Resp = w.call(&req(3, "ok")).unwrap();
    assert_ne!(first.pid, after.pid);
}

#[test]
fn a_hang_is_killed_after_the_timeout() {
    let timeout = Duration::from_millis(300);
    let mut w = Worker::new(WorkerSpec::new(FAKE), timeout);
    let before: Resp = w.call(&req(1, "ok")).unwrap();
    let started = Instant::now();
    let err = w.call::<_, Resp>(&req(2, "hang")).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, IsolationFailure::Timeout { after, .. } if after == timeout), "{err}");
    assert_eq!(err.stage(), FailStage::Timeout);
    assert!(took >= timeout && took < Duration::from_secs(5), "{took:?}");
    assert!(pid_is_gone(before.pid), "the hung worker was killed and reaped");
    let after: Resp = w.call(&req(3, "ok")).unwrap();
    assert_ne!(before.pid, after.pid);
}

#[test]
fn protocol_errors_and_silent_exits_are_reported_and_recovered_from() {
    let mut w = Worker::new(WorkerSpec::new(FAKE), Duration::from_secs(10));
    let err = w.call::<_, Resp>(&req(1, "bad_json")).unwrap_err();
    assert!(matches!(err, IsolationFailure::Protocol { .. }), "{err}");
    let err = w.call::<_, Resp>(&req(2, "silent_exit")).unwrap_err();
    assert!(matches!(err, IsolationFailure::Protocol { .. }), "{err}");
    assert_eq!(w.call::<_, Resp>(&req(3, "ok")).unwrap().id, 3);
    assert_eq!(w.spawn_count(), 3);
}

#[test]
fn a_pool_of_workers_shares_a_batch() {
    let specs = vec![WorkerSpec::new(FAKE).env("FAKE_GPU", "0"), WorkerSpec::new(FAKE).env("FAKE_GPU", "1")];
    let mut pool = WorkerPool::new(specs, Duration::from_secs(10));
    let reqs: Vec<Req> =
        (0..10).map(|i| Req { action: if i == 6 { "crash" } else { "sleep" }, id: i, ms: 20.0 }).collect();
    let results: Vec<Result<Resp, IsolationFailure>> = pool.run_batch(&reqs, |_, _| {});
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 9);
    assert!(matches!(results[6], Err(IsolationFailure::Crashed { .. })));
    let pids: std::collections::BTreeSet<u32> = results.iter().filter_map(|r| r.as_ref().ok().map(|r| r.pid)).collect();
    assert!(pids.len() >= 2, "both workers took requests: {pids:?}");
}

#[test]
fn run_isolated_uses_one_child_per_request() {
    let ok: Resp = run_isolated(Path::new(FAKE), &[], &req(7, "ok"), Duration::from_secs(10)).unwrap();
    assert_eq!(ok.id, 7);
    let err = run_isolated::<_, Resp>(Path::new(FAKE), &[], &req(8, "crash"), Duration::from_secs(10)).unwrap_err();
    assert!(matches!(err, IsolationFailure::Crashed { code: Some(17), .. }), "{err}");
    let err = run_isolated::<_, Resp>(Path::new(FAKE), &[], &req(9, "hang"), Duration::from_millis(300)).unwrap_err();
    assert!(matches!(err, IsolationFailure::Timeout { .. }), "{err}");
}

fn knobs(action: &str, ms: f64) -> CandidateSpec {
    let k: KnobMap = [("action".to_string(), json!(action)), ("ms".to_string(), json!(ms))].into_iter().collect();
    CandidateSpec::from_knobs(k)
}

#[test]
fn a_tuning_run_survives_faulting_and_hanging_candidates_and_persists_each_result() {
    let dir = tempfile::tempdir().unwrap();
    let store = ResultsStore::open(dir.path()).unwrap();
    let key = TuneKey::fake("fake_op", "feed", &[("m", 64)], &GpuKey::new("Fake GPU", (9, 0), 132));
    let mut wrong = knobs("ok", 0.5);
    wrong.knobs.insert("wrong".into(), json!(true));
    wrong = CandidateSpec::from_knobs(wrong.knobs);
    let plan = vec![
        knobs("ok", 3.0),
        knobs("crash", 0.1),
        knobs("ok", 2.0),
        knobs("hang", 0.1),
        knobs("abort", 0.1),
        wrong.clone(),
        knobs("ok", 4.0),
    ];
    let worker = Worker::new(WorkerSpec::new(FAKE), Duration::from_millis(500));
    let mut m = WorkerMeasurer::new(worker, BTreeMap::from([("m".to_string(), 64)]));
    m.bench = BenchSettings { rep_ms: 1.0, ..BenchSettings::default() };
    let mut persisted_before_next = 0;
    let report = tune(&store, &key, &plan, &TuneOptions::default(), &mut m, &mut |ev| {
        if let TuneEvent::Measured { id, .. } = ev {
            // write-through: the result is on disk before the next candidate starts
            let f = store.load(&key.gpu().slug(), &key.op).unwrap().unwrap();
            assert!(f.entry(&key).unwrap().candidate(id).is_some());
            persisted_before_next += 1;
        }
    })
    .unwrap();
    assert_eq!(persisted_before_next, 7);
    assert_eq!((report.measured, report.failed), (7, 3));
    assert_eq!(report.winner.as_deref(), Some(plan[2].id.as_str()));
    let f = store.load(&key.gpu().slug(), &key.op).unwrap().unwrap();
    let e = f.entry(&key).unwrap();
    let stage = |c: &CandidateSpec| match &e.candidate(&c.id).unwrap().outcome {
        Outcome::Failed { stage, .. } => Some(*stage),
        Outcome::Timed(_) => None,
    };
    assert_eq!(stage(&plan[1]), Some(FailStage::Crash));
    assert_eq!(stage(&plan[3]), Some(FailStage::Timeout));
    assert_eq!(stage(&plan[4]), Some(FailStage::Crash));
    // the fastest candidate computed the wrong answer: checked, rejected, not the winner
    assert!(!e.candidate(&wrong.id).unwrap().check.unwrap().passed);
    assert!(e.winner_check.unwrap().passed);
}
