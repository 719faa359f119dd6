//! `kill -9` of a tuning driver mid-run, then `--resume`: no finished measurement is lost.

use k3k_tuner::{
    Abort, CandidateSpec, CheckRecord, KnobMap, Measurer, Outcome, ResultsStore, TimingStats, TuneKey, TuneOptions,
    tune,
};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FAKE: &str = env!("CARGO_BIN_EXE_k3k-fake-worker");
const N: u64 = 60;

#[derive(Default)]
struct Recorder {
    measured: Vec<String>,
    retimed: Vec<String>,
}

impl Measurer for Recorder {
    fn measure(&mut self, _: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
        self.measured.push(c.id.clone());
        Ok(Outcome::Timed(TimingStats::from_samples(&[5.0]).unwrap()))
    }
    fn retime(&mut self, _: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
        self.retimed.push(c.id.clone());
        Ok(Outcome::Timed(TimingStats::from_samples(&[5.0]).unwrap()))
    }
    fn check(&mut self, _: &TuneKey, _: &CandidateSpec) -> Result<CheckRecord, Abort> {
        Ok(CheckRecord { max_rel_err: 0.0, passed: true })
    }
}

#[test]
fn kill_9_mid_tune_then_resume_loses_no_finished_measurement() {
    let dir = tempfile::tempdir().unwrap();
    let store = ResultsStore::open(dir.path()).unwrap();
    let mut driver = Command::new(FAKE)
        .args(["drive", dir.path().to_str().unwrap(), &N.to_string(), "40"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let count = |store: &ResultsStore| {
        store.load("fake-gpu", "fake_op").unwrap().map_or(0, |f| f.entries.first().map_or(0, |e| e.candidates.len()))
    };
    let started = Instant::now();
    while count(&store) < 5 {
        assert!(started.elapsed() < Duration::from_secs(20), "the driver made no progress");
        assert!(driver.try_wait().unwrap().is_none(), "the driver finished too early");
        std::thread::sleep(Duration::from_millis(5));
    }
    driver.kill().unwrap(); // SIGKILL: no destructor, no flush, no cleanup
    let status = driver.wait().unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
    }
    let _ = status;

    // the file is valid and holds every measurement finished before the kill
    let before = store.load("fake-gpu", "fake_op").unwrap().unwrap();
    assert_eq!(before.entries.len(), 1);
    let entry = &before.entries[0];
    let finished: BTreeMap<String, Outcome> =
        entry.candidates.iter().map(|c| (c.id.clone(), c.outcome.clone())).collect();
    assert!(finished.len() >= 5 && finished.len() < N as usize, "{}", finished.len());

    // resume with the same plan
    let plan: Vec<CandidateSpec> =
        (0..N).map(|i| CandidateSpec::from_knobs(KnobMap::from([("i".to_string(), json!(i))]))).collect();
    let mut m = Recorder::default();
    let opts = TuneOptions { resume: true, retime_top: 2, ..TuneOptions::default() };
    let report = tune(&store, &entry.key, &plan, &opts, &mut m, &mut |_| {}).unwrap();
    assert_eq!(report.skipped, finished.len());
    let measured: BTreeSet<&str> = m.measured.iter().map(String::as_str).collect();
    assert!(finished.keys().all(|id| !measured.contains(id.as_str())), "a finished candidate was measured again");
    assert_eq!(measured.len() + finished.len(), N as usize);

    let after = store.load("fake-gpu", "fake_op").unwrap().unwrap();
    let e = after.entry(&entry.key).unwrap();
    assert_eq!(e.candidates.len(), N as usize);
    for (id, outcome) in &finished {
        if !m.retimed.contains(id) {
            assert_eq!(&e.candidate(id).unwrap().outcome, outcome, "{id} changed");
        }
    }
    assert!(e.winner.is_some());
}
