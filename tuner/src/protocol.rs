//! The worker side of the JSON-lines protocol, and the request/response types of a measuring worker.
//!
//! A GPU worker binary (owned by the runtime crate, which has CUDA) is a loop around [`serve`]:
//!
//! ```no_run
//! use k3k_tuner::protocol::{serve, MeasureRequest, MeasureResponse, Task};
//! use k3k_tuner::{FailStage, Outcome};
//!
//! fn main() -> std::io::Result<()> {
//!     serve(|req: MeasureRequest| match req.task {
//!         // build the kernel for req.candidate.knobs, time it per req.bench, or check it
//!         Task::Time => MeasureResponse::outcome(Outcome::failed(FailStage::Compile, "not built")),
//!         Task::Check => MeasureResponse::default(),
//!     })
//! }
//! ```
//!
//! Stdout is the protocol channel: a worker must log to stderr only.

use crate::key::TuneKey;
use crate::record::{CheckRecord, Outcome};
use crate::resume::CandidateSpec;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, BufRead, Write};

/// Answer requests read from stdin, one JSON line each, with one JSON line each on stdout, until
/// stdin closes. A line that is not a valid request ends the loop with an `InvalidData` error (the
/// parent sees the worker exit and reports it).
pub fn serve<Req, Resp>(handler: impl FnMut(Req) -> Resp) -> io::Result<()>
where
    Req: DeserializeOwned,
    Resp: Serialize,
{
    let stdin = io::stdin();
    let stdout = io::stdout();
    serve_io(stdin.lock(), stdout.lock(), handler).map(|_| ())
}

/// [`serve`] over any reader and writer; returns how many requests were answered.
pub fn serve_io<Req, Resp>(
    input: impl BufRead,
    mut output: impl Write,
    mut handler: impl FnMut(Req) -> Resp,
) -> io::Result<usize>
where
    Req: DeserializeOwned,
    Resp: Serialize,
{
    let mut answered = 0;
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let req: Req = serde_json::from_str(&line)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad request: {e}")))?;
        let resp = handler(req);
        let mut text = serde_json::to_string(&resp).map_err(io::Error::other)?;
        text.push('\n');
        output.write_all(text.as_bytes())?;
        output.flush()?;
        answered += 1;
    }
    Ok(answered)
}

/// What a measuring worker is asked to do with a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Compile, launch and time it: answer with `outcome`.
    Time,
    /// Run it on fresh inputs and compare with the CPU reference: answer with `check`.
    Check,
}

/// How a worker times a candidate (Triton's `do_bench` method: budgets in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BenchSettings {
    /// Run the kernel for about this long before timing.
    pub warmup_ms: f64,
    /// Time runs for about this long in total...
    pub rep_ms: f64,
    /// ...but at least this many...
    pub min_samples: u32,
    /// ...and at most this many.
    pub max_samples: u32,
    /// Overwrite a buffer larger than L2 before each timed run, so every run starts cold.
    pub flush_l2: bool,
    /// A kernel so long that `min_samples` runs would take longer than this (ms) gets fewer samples (as many
    /// as fit, at least [`FEW_SAMPLES`]): a per-candidate cap on timing (0: none).
    #[serde(default)]
    pub cap_ms: f64,
    /// A kernel whose first run took longer than this (ms) gets only [`FEW_SAMPLES`] samples: it is far behind
    /// the best of its preset so far and will not win (a leader is re-timed with full samples anyway; 0: none).
    #[serde(default)]
    pub slow_ms: f64,
    /// Early stop: after the warm-up runs, time [`SCREEN_SAMPLES`] samples first; when their median is over this
    /// (ms), answer with them, flagged [`MeasureResponse::stopped`], instead of the full window: the candidate is
    /// clearly slower than the best of its key so far (the tuner sets this to a margin over that best; 0: off).
    #[serde(default)]
    pub stop_ms: f64,
}

/// The samples of an early-stop screen ([`BenchSettings::stop_ms`]).
pub const SCREEN_SAMPLES: usize = 5;

/// The samples a capped or hopelessly slow candidate gets.
pub const FEW_SAMPLES: usize = 3;

impl Default for BenchSettings {
    fn default() -> Self {
        Self {
            warmup_ms: 25.0,
            rep_ms: 100.0,
            min_samples: 10,
            max_samples: 1000,
            flush_l2: true,
            cap_ms: 300.0,
            slow_ms: 0.0,
            stop_ms: 0.0,
        }
    }
}

impl BenchSettings {
    /// `(warm-up runs, timed samples)` for a kernel whose first run took `est_ms`: about `warmup_ms` and
    /// `rep_ms` worth, at least `min_samples` and at most `max_samples`, then the caps of `cap_ms` and
    /// `slow_ms`.
    pub fn runs_for(&self, est_ms: f64) -> (usize, usize) {
        let est = if est_ms.is_finite() { est_ms.max(1e-3) } else { f64::MAX };
        let lo = self.min_samples.max(1) as usize;
        let hi = (self.max_samples as usize).max(lo);
        let mut reps = ((self.rep_ms / est) as usize).clamp(lo, hi);
        let mut warmup = ((self.warmup_ms / est) as usize).clamp(1, 50);
        if self.cap_ms > 0.0 && reps as f64 * est > self.cap_ms {
            reps = ((self.cap_ms / est) as usize).clamp(FEW_SAMPLES.min(reps), reps);
            warmup = warmup.min(2);
        }
        if self.slow_ms > 0.0 && est > self.slow_ms {
            reps = reps.min(FEW_SAMPLES);
            warmup = 1;
        }
        (warmup, reps)
    }
}

/// One request to a measuring worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasureRequest {
    pub task: Task,
    pub key: TuneKey,
    pub candidate: CandidateSpec,
    /// The exact problem sizes to run (the key only holds their bucket).
    pub dims: BTreeMap<String, u64>,
    pub bench: BenchSettings,
}

/// A measuring worker's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MeasureResponse {
    /// For [`Task::Time`]: timed (stats of the samples) or failed at a stage (compile, launch, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// For [`Task::Check`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckRecord>,
    /// For [`Task::Time`]: the screen of [`BenchSettings::stop_ms`] stopped the measurement (the outcome holds
    /// the screen's samples only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
}

impl MeasureResponse {
    pub fn outcome(outcome: Outcome) -> Self {
        Self { outcome: Some(outcome), check: None, stopped: false }
    }

    /// Timed by the early-stop screen only (see [`BenchSettings::stop_ms`]).
    pub fn stopped(outcome: Outcome) -> Self {
        Self { outcome: Some(outcome), check: None, stopped: true }
    }

    pub fn check(check: CheckRecord) -> Self {
        Self { outcome: None, check: Some(check), stopped: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_answers_each_line_and_skips_blank_ones() {
        let input = b"{\"n\":1}\n\n{\"n\":2}\n";
        let mut out = Vec::new();
        #[derive(Deserialize)]
        struct Req {
            n: u32,
        }
        let answered = serve_io(&input[..], &mut out, |r: Req| r.n * 10).unwrap();
        assert_eq!(answered, 2);
        assert_eq!(String::from_utf8(out).unwrap(), "10\n20\n");
    }

    #[test]
    fn serve_stops_on_a_bad_request() {
        let mut out = Vec::new();
        let err = serve_io(&b"{\"n\":1}\nnope\n{\"n\":3}\n"[..], &mut out, |v: serde_json::Value| v).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(String::from_utf8(out).unwrap(), "{\"n\":1}\n");
    }

    #[test]
    fn runs_are_capped_for_long_and_hopeless_kernels() {
        let b = BenchSettings::default();
        // 0.1 ms: 1000 samples would be 100 ms, the default budget
        assert_eq!(b.runs_for(0.1), (50, 1000));
        assert_eq!(b.runs_for(1.0), (25, 100));
        assert_eq!(b.runs_for(20.0), (1, 10), "min_samples");
        // 60 ms: 10 samples would be 600 ms > cap 300 ms: 5 samples
        assert_eq!(b.runs_for(60.0), (1, 5));
        assert_eq!(b.runs_for(1000.0), (1, FEW_SAMPLES));
        let uncapped = BenchSettings { cap_ms: 0.0, ..b };
        assert_eq!(uncapped.runs_for(1000.0), (1, 10));
        let slow = BenchSettings { slow_ms: 2.0, ..b };
        assert_eq!(slow.runs_for(1.0), (25, 100));
        assert_eq!(slow.runs_for(3.0), (1, FEW_SAMPLES));
        // an old request without the new fields parses, with the caps off
        let old: BenchSettings = serde_json::from_str(
            r#"{"warmup_ms":25.0,"rep_ms":100.0,"min_samples":10,"max_samples":1000,"flush_l2":true}"#,
        )
        .unwrap();
        assert_eq!((old.cap_ms, old.slow_ms, old.stop_ms), (0.0, 0.0, 0.0));
    }

    #[test]
    fn response_json_omits_what_is_absent() {
        let r = MeasureResponse::check(CheckRecord { max_rel_err: 0.5, passed: false });
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"check":{"max_rel_err":0.5,"passed":false}}"#);
        let back: MeasureResponse = serde_json::from_str(r#"{"check":{"max_rel_err":0.5,"passed":false}}"#).unwrap();
        assert_eq!(back, r);
    }
}
