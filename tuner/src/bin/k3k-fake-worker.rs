//! A stand-in for a GPU worker, used by the tuner's tests to misbehave on demand.
//!
//! `k3k-fake-worker` serves JSON lines on stdin/stdout:
//! - `{"action": A, "id": N, "ms": M}` answers `{"id": N, "pid": P}`;
//! - a `MeasureRequest` takes `A` and `M` from the candidate's knobs `action` and `ms`, and answers
//!   with a timing of `M` ms or a passed check (a failed one when the knob `wrong` is true).
//!
//! Actions: `ok`, `sleep` (M ms, then ok), `crash` (exit 17, like a process that saw an illegal
//! address), `abort` (SIGABRT), `hang` (never answers), `bad_json` (answers JSON of the wrong shape),
//! `silent_exit` (exits 0 without answering).
//!
//! `k3k-fake-worker drive <results-dir> <n> <delay-ms>` is a tuning driver: it tunes `n` candidates
//! into the store, taking `delay-ms` per measurement, so a test can `kill -9` it midway.

use k3k_tuner::protocol::{MeasureRequest, MeasureResponse, Task, serve};
use k3k_tuner::{
    Abort, CandidateSpec, CheckRecord, GpuKey, KnobMap, Measurer, Outcome, ResultsStore, TimingStats, TuneKey,
    TuneOptions, stable_hash, tune,
};
use serde_json::{Value, json};
use std::time::Duration;

fn act(action: &str, ms: f64) -> bool {
    match action {
        "crash" => {
            eprintln!("fake worker: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered");
            std::process::exit(17);
        }
        "abort" => {
            eprintln!("fake worker: aborting");
            std::process::abort();
        }
        "hang" => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        "silent_exit" => std::process::exit(0),
        "sleep" => std::thread::sleep(Duration::from_secs_f64(ms / 1000.0)),
        _ => {}
    }
    action != "bad_json"
}

fn handle(req: Value) -> Value {
    if req.get("task").is_some() {
        let req: MeasureRequest = serde_json::from_value(req).expect("a MeasureRequest");
        let knobs = &req.candidate.knobs;
        let action = knobs.get("action").and_then(Value::as_str).unwrap_or("ok");
        let ms = knobs.get("ms").and_then(Value::as_f64).unwrap_or(1.0);
        if !act(action, 0.0) {
            return json!({"unexpected": true});
        }
        let resp = match req.task {
            Task::Time => MeasureResponse::outcome(Outcome::Timed(
                TimingStats::from_samples(&[ms, ms * 1.01, ms * 0.99]).unwrap(),
            )),
            Task::Check => {
                let wrong = knobs.get("wrong").and_then(Value::as_bool).unwrap_or(false);
                MeasureResponse::check(CheckRecord { max_rel_err: if wrong { 0.5 } else { 1e-5 }, passed: !wrong })
            }
        };
        return serde_json::to_value(resp).unwrap();
    }
    let action = req["action"].as_str().unwrap_or("ok");
    let ms = req["ms"].as_f64().unwrap_or(0.0);
    if !act(action, ms) {
        return json!({"unexpected": true});
    }
    json!({"id": req["id"], "pid": std::process::id()})
}

/// Sleeps, then reports a timing derived from the candidate id.
struct Sleepy(Duration);

impl Measurer for Sleepy {
    fn measure(&mut self, _: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
        std::thread::sleep(self.0);
        let ms = 1.0 + (stable_hash(&c.id) % 1000) as f64 / 100.0;
        Ok(Outcome::Timed(TimingStats::from_samples(&[ms]).unwrap()))
    }

    fn check(&mut self, _: &TuneKey, _: &CandidateSpec) -> Result<CheckRecord, Abort> {
        Ok(CheckRecord { max_rel_err: 0.0, passed: true })
    }
}

fn drive(args: &[String]) -> Result<(), String> {
    let [dir, n, delay] = args else {
        return Err("usage: k3k-fake-worker drive <results-dir> <n> <delay-ms>".into());
    };
    let n: u64 = n.parse().map_err(|e| format!("n: {e}"))?;
    let delay: u64 = delay.parse().map_err(|e| format!("delay-ms: {e}"))?;
    let store = ResultsStore::open(dir).map_err(|e| e.to_string())?;
    let key = TuneKey::fake("fake_op", "0123456789abcdef", &[("m", 100)], &GpuKey::new("Fake GPU", (9, 0), 132));
    let plan: Vec<CandidateSpec> =
        (0..n).map(|i| CandidateSpec::from_knobs(KnobMap::from([("i".to_string(), json!(i))]))).collect();
    let opts = TuneOptions { resume: true, retime_top: 2, ..TuneOptions::default() };
    tune(&store, &key, &plan, &opts, &mut Sleepy(Duration::from_millis(delay)), &mut |ev| eprintln!("{ev:?}"))
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("drive") => drive(&args[1..]),
        Some(other) => Err(format!("unknown command `{other}`")),
        None => serve(handle).map_err(|e| e.to_string()),
    };
    if let Err(e) = result {
        eprintln!("k3k-fake-worker: {e}");
        std::process::exit(2);
    }
}
