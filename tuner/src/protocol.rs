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
}

impl Default for BenchSettings {
    fn default() -> Self {
        Self { warmup_ms: 25.0, rep_ms: 100.0, min_samples: 10, max_samples: 1000, flush_l2: true }
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
}

impl MeasureResponse {
    pub fn outcome(outcome: Outcome) -> Self {
        Self { outcome: Some(outcome), check: None }
    }

    pub fn check(check: CheckRecord) -> Self {
        Self { outcome: None, check: Some(check) }
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
    fn response_json_omits_what_is_absent() {
        let r = MeasureResponse::check(CheckRecord { max_rel_err: 0.5, passed: false });
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"check":{"max_rel_err":0.5,"passed":false}}"#);
        let back: MeasureResponse = serde_json::from_str(r#"{"check":{"max_rel_err":0.5,"passed":false}}"#).unwrap();
        assert_eq!(back, r);
    }
}
