//! The on-disk schema of a results file, and the rules that keep one entry consistent.
//!
//! One file per (GPU, operator): `results/<gpu-slug>/<op>.json`. It keeps every candidate's outcome,
//! not only the winner's, so a result can be inspected, resumed and merged after the fact.
//!
//! **Winner rule.** The winner of an entry is the best candidate by [`crate::winner_order`] among those
//! that were timed *and* whose output passed the reference check. A candidate never becomes the winner
//! unchecked; [`TuneEntry::next_to_check`] names the candidate that must be checked next.

use crate::key::{GpuKey, TuneKey};
use crate::stats::{TimingStats, winner_order};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Knob name -> value, as the operator declares them (`k3k_ir::Knobs` serializes to the same JSON).
pub type KnobMap = BTreeMap<String, serde_json::Value>;

/// One results file: every tuned key of one operator on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    /// [`SCHEMA_VERSION`] when written by this build.
    pub schema: u32,
    pub op: String,
    pub gpu: GpuKey,
    /// Sorted by key (see [`ResultsFile::normalize`]).
    pub entries: Vec<TuneEntry>,
}

/// The results for one [`TuneKey`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneEntry {
    pub key: TuneKey,
    /// Sorted by id, ids unique.
    pub candidates: Vec<CandidateResult>,
    /// Id of the winning candidate (see the module doc for the rule).
    pub winner: Option<String>,
    /// The winner's reference check (a copy of its candidate's `check`).
    pub winner_check: Option<CheckRecord>,
    /// UTC date of the last change, `YYYY-MM-DD`.
    pub date: String,
    /// Median time of the operator's default knobs for this key, for "speed-up over default" reports.
    pub default_ms: Option<f64>,
}

/// One candidate (one knob setting) and what happened when it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateResult {
    /// Unique within the entry; by convention derived from the knobs (see `CandidateSpec::from_knobs`).
    pub id: String,
    pub knobs: KnobMap,
    pub outcome: Outcome,
    /// The reference check of this candidate's output, when it was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckRecord>,
}

/// Timed, or failed at a named stage. A failure scores as +inf: it never wins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    Timed(TimingStats),
    Failed { stage: FailStage, reason: String },
}

/// Where a candidate failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailStage {
    /// Dropped before compiling (shared memory, registers or threads over the limit).
    Prune,
    /// NVRTC or ptxas rejected it.
    Compile,
    /// The launch failed (e.g. too many resources requested).
    Launch,
    /// It did not finish within the timeout; the worker was killed.
    Timeout,
    /// The worker died (illegal address, abort, signal) or broke the protocol.
    Crash,
    /// Its output did not match the reference.
    WrongResult,
}

impl FailStage {
    /// Failures that may not happen again on a second try (a hang or crash can be a flaky machine);
    /// `--resume` can be asked to retry these.
    pub fn is_transient(self) -> bool {
        matches!(self, FailStage::Timeout | FailStage::Crash)
    }
}

/// The result of comparing a candidate's output with the CPU reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// Largest relative error seen; written as a string (`"inf"`, `"NaN"`) when not finite, because
    /// JSON has no such numbers and a NaN is exactly what a broken kernel produces.
    #[serde(with = "lenient_f64")]
    pub max_rel_err: f64,
    pub passed: bool,
}

impl CheckRecord {
    /// The check of a candidate checked twice (e.g. on two hosts): it passes only if both passed,
    /// and keeps the larger error. Associative and commutative, so merging shards in any grouping
    /// agrees.
    pub fn join(a: Option<CheckRecord>, b: Option<CheckRecord>) -> Option<CheckRecord> {
        match (a, b) {
            (None, x) | (x, None) => x,
            (Some(a), Some(b)) => Some(CheckRecord {
                max_rel_err: if a.max_rel_err.total_cmp(&b.max_rel_err).is_ge() {
                    a.max_rel_err
                } else {
                    b.max_rel_err
                },
                passed: a.passed && b.passed,
            }),
        }
    }
}

impl Outcome {
    pub fn timing(&self) -> Option<&TimingStats> {
        match self {
            Outcome::Timed(t) => Some(t),
            Outcome::Failed { .. } => None,
        }
    }

    pub fn failed(stage: FailStage, reason: impl Into<String>) -> Self {
        Outcome::Failed { stage, reason: reason.into() }
    }
}

impl CandidateResult {
    pub fn new(id: impl Into<String>, knobs: KnobMap, outcome: Outcome) -> Self {
        Self { id: id.into(), knobs, outcome, check: None }
    }

    /// Timed and checked against the reference with success: may win.
    pub fn is_eligible(&self) -> bool {
        self.outcome.timing().is_some() && self.check.is_some_and(|c| c.passed)
    }
}

impl TuneEntry {
    pub fn new(key: TuneKey) -> Self {
        Self { key, candidates: Vec::new(), winner: None, winner_check: None, date: utc_date_today(), default_ms: None }
    }

    pub fn candidate(&self, id: &str) -> Option<&CandidateResult> {
        self.candidates.iter().find(|c| c.id == id)
    }

    /// Insert or replace the candidate with the same id, then recompute the winner.
    ///
    /// A replacement without a check keeps the previous check when the knobs are unchanged: a re-timing
    /// changes how fast a candidate is, not whether its output is right.
    pub fn upsert_candidate(&mut self, mut result: CandidateResult) {
        match self.candidates.iter_mut().find(|c| c.id == result.id) {
            Some(old) => {
                if result.check.is_none() && old.knobs == result.knobs {
                    result.check = old.check;
                }
                *old = result;
            }
            None => self.candidates.push(result),
        }
        self.normalize();
    }

    /// Record a reference check of candidate `id`; returns false when there is no such candidate.
    pub fn set_check(&mut self, id: &str, check: CheckRecord) -> bool {
        match self.candidates.iter_mut().find(|c| c.id == id) {
            Some(c) => {
                c.check = Some(check);
                self.recompute_winner();
                true
            }
            None => false,
        }
    }

    /// Apply the winner rule of the module doc to `winner` and `winner_check`.
    pub fn recompute_winner(&mut self) {
        let best = self.candidates.iter().filter(|c| c.is_eligible()).min_by(|a, b| {
            winner_order(
                (&a.id, a.outcome.timing().expect("eligible means timed")),
                (&b.id, b.outcome.timing().expect("eligible means timed")),
            )
        });
        self.winner = best.map(|c| c.id.clone());
        self.winner_check = best.and_then(|c| c.check);
    }

    /// The unchecked timed candidate that would beat the current winner, best first: the one to check
    /// against the reference next. `None` means the winner is final.
    pub fn next_to_check(&self) -> Option<&CandidateResult> {
        self.next_to_check_among(|_| true)
    }

    /// Like [`TuneEntry::next_to_check`], considering only candidates whose id passes `filter`
    /// (e.g. the ones this shard owns).
    pub fn next_to_check_among(&self, mut filter: impl FnMut(&str) -> bool) -> Option<&CandidateResult> {
        let winner = self
            .winner
            .as_deref()
            .and_then(|w| self.candidate(w))
            .and_then(|c| c.outcome.timing().map(|t| (c.id.as_str(), t)));
        self.candidates
            .iter()
            .filter(|c| c.check.is_none() && filter(&c.id))
            .filter_map(|c| c.outcome.timing().map(|t| (c, t)))
            .filter(|(c, t)| winner.is_none_or(|w| winner_order((&c.id, t), w).is_lt()))
            .min_by(|a, b| winner_order((&a.0.id, a.1), (&b.0.id, b.1)))
            .map(|(c, _)| c)
    }

    /// Sort candidates by id and recompute the winner.
    pub fn normalize(&mut self) {
        self.candidates.sort_by(|a, b| a.id.cmp(&b.id));
        self.recompute_winner();
    }

    /// The reasons this entry is inconsistent, if any.
    fn problems(&self, out: &mut Vec<String>) {
        let mut ids = BTreeSet::new();
        for c in &self.candidates {
            if !ids.insert(c.id.as_str()) {
                out.push(format!("{}: candidate `{}` appears twice", self.key, c.id));
            }
            if let Some(t) = c.outcome.timing()
                && !t.is_valid()
            {
                out.push(format!("{}: candidate `{}` has a non-finite or negative timing", self.key, c.id));
            }
        }
        match self.winner.as_deref().map(|w| (w, self.candidate(w))) {
            Some((w, None)) => {
                out.push(format!("{}: winner `{w}` is not among the candidates", self.key));
            }
            Some((w, Some(c))) if !c.is_eligible() || c.check != self.winner_check => {
                out.push(format!(
                    "{}: winner `{w}` is not timed with a passed check matching `winner_check`",
                    self.key
                ));
            }
            None if self.winner_check.is_some() => {
                out.push(format!("{}: `winner_check` without a winner", self.key));
            }
            _ => {}
        }
        if let Some(d) = self.default_ms
            && !(d.is_finite() && d >= 0.0)
        {
            out.push(format!("{}: default_ms is {d}", self.key));
        }
    }
}

impl ResultsFile {
    pub fn new(op: impl Into<String>, gpu: GpuKey) -> Self {
        Self { schema: SCHEMA_VERSION, op: op.into(), gpu, entries: Vec::new() }
    }

    pub fn entry(&self, key: &TuneKey) -> Option<&TuneEntry> {
        self.entries.iter().find(|e| &e.key == key)
    }

    /// The entry for `key`, created empty (dated today) when missing.
    pub fn entry_mut(&mut self, key: &TuneKey) -> &mut TuneEntry {
        let pos = match self.entries.iter().position(|e| &e.key == key) {
            Some(p) => p,
            None => {
                self.entries.push(TuneEntry::new(key.clone()));
                self.entries.len() - 1
            }
        };
        &mut self.entries[pos]
    }

    /// Sort entries by key and candidates by id, and recompute winners: the canonical form that is
    /// written to disk, so equal contents give byte-identical files.
    pub fn normalize(&mut self) {
        for e in &mut self.entries {
            e.normalize();
        }
        self.entries.sort_by(|a, b| a.key.cmp(&b.key));
    }

    /// Check the invariants a file on disk must hold; returns every problem found.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut out = Vec::new();
        if self.schema != SCHEMA_VERSION {
            out.push(format!("schema {} (this build reads {SCHEMA_VERSION})", self.schema));
        }
        let mut keys = BTreeSet::new();
        for e in &self.entries {
            if e.key.op != self.op {
                out.push(format!("{}: entry of op `{}` in the file of op `{}`", e.key, e.key.op, self.op));
            }
            if e.key.gpu() != self.gpu {
                out.push(format!("{}: entry for GPU {} in the file of GPU {}", e.key, e.key.gpu(), self.gpu));
            }
            if !keys.insert(&e.key) {
                out.push(format!("{}: key appears twice", e.key));
            }
            e.problems(&mut out);
        }
        if out.is_empty() { Ok(()) } else { Err(out) }
    }
}

/// Today's date in UTC, `YYYY-MM-DD`.
pub fn utc_date_today() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    utc_date(secs)
}

/// The UTC date of a Unix time, `YYYY-MM-DD` (proleptic Gregorian; Howard Hinnant's `civil_from_days`).
pub fn utc_date(unix_secs: u64) -> String {
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Serialize an `f64` as a JSON number when finite, else as the string `"inf"`, `"-inf"` or `"NaN"`;
/// read either back.
mod lenient_f64 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrStr {
        Num(f64),
        Str(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match NumOrStr::deserialize(d)? {
            NumOrStr::Num(v) => Ok(v),
            NumOrStr::Str(s) => match s.as_str() {
                "NaN" | "nan" => Ok(f64::NAN),
                "inf" | "+inf" | "infinity" => Ok(f64::INFINITY),
                "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
                other => Err(D::Error::custom(format!("expected a number, got `{other}`"))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::{h200, key};
    use crate::stats::tests::stats;

    fn timed(id: &str, median: f64) -> CandidateResult {
        CandidateResult::new(id, KnobMap::new(), Outcome::Timed(stats(median)))
    }

    fn pass() -> CheckRecord {
        CheckRecord { max_rel_err: 1e-3, passed: true }
    }

    #[test]
    fn dates_match_known_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_709_164_800 + 86_399), "2024-02-29");
        assert_eq!(utc_date(1_709_164_800 + 86_400), "2024-03-01");
        assert_eq!(utc_date(4_102_444_800), "2100-01-01");
        assert_eq!(utc_date_today().len(), 10);
    }

    #[test]
    fn outcome_json_is_tagged_and_readable() {
        let c = timed("a", 1.5);
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["outcome"]["status"], "timed");
        assert_eq!(v["outcome"]["median_ms"], 1.5);
        assert!(v.get("check").is_none(), "no check written when absent");
        let f = CandidateResult::new("b", KnobMap::new(), Outcome::failed(FailStage::WrongResult, "max err 3.0"));
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["outcome"]["status"], "failed");
        assert_eq!(v["outcome"]["stage"], "wrong_result");
        let back: CandidateResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn non_finite_check_errors_survive_json() {
        for e in [f64::INFINITY, f64::NEG_INFINITY, 0.25] {
            let c = CheckRecord { max_rel_err: e, passed: false };
            let s = serde_json::to_string(&c).unwrap();
            let back: CheckRecord = serde_json::from_str(&s).unwrap();
            assert_eq!(back, c, "{s}");
        }
        let s = serde_json::to_string(&CheckRecord { max_rel_err: f64::NAN, passed: false }).unwrap();
        assert_eq!(s, r#"{"max_rel_err":"NaN","passed":false}"#);
        let back: CheckRecord = serde_json::from_str(&s).unwrap();
        assert!(back.max_rel_err.is_nan());
    }

    #[test]
    fn only_a_checked_candidate_wins() {
        let mut e = TuneEntry::new(key("kda", &[("t", 64)]));
        e.upsert_candidate(timed("slow", 3.0));
        e.upsert_candidate(timed("fast", 1.0));
        e.upsert_candidate(CandidateResult::new(
            "broken",
            KnobMap::new(),
            Outcome::failed(FailStage::Crash, "illegal address"),
        ));
        assert_eq!(e.winner, None);
        assert_eq!(e.next_to_check().unwrap().id, "fast");
        // the fastest fails its check: the next one is asked for
        assert!(e.set_check("fast", CheckRecord { max_rel_err: 0.5, passed: false }));
        assert_eq!(e.winner, None);
        assert_eq!(e.next_to_check().unwrap().id, "slow");
        assert!(e.set_check("slow", pass()));
        assert_eq!(e.winner.as_deref(), Some("slow"));
        assert_eq!(e.winner_check, Some(pass()));
        assert!(e.next_to_check().is_none());
        assert!(!e.set_check("nope", pass()));
        // a faster newcomer must be checked before it can take over
        e.upsert_candidate(timed("newer", 0.5));
        assert_eq!(e.winner.as_deref(), Some("slow"));
        assert_eq!(e.next_to_check().unwrap().id, "newer");
        assert!(e.next_to_check_among(|id| id != "newer").is_none());
        // a slower unchecked candidate never needs a check
        e.upsert_candidate(timed("slower", 9.0));
        e.set_check("newer", pass());
        assert_eq!(e.winner.as_deref(), Some("newer"));
        assert!(e.next_to_check().is_none());
    }

    #[test]
    fn retiming_keeps_the_check_and_moves_the_winner() {
        let mut e = TuneEntry::new(key("kda", &[("t", 64)]));
        e.upsert_candidate(timed("a", 1.0));
        e.upsert_candidate(timed("b", 2.0));
        e.set_check("a", pass());
        e.set_check("b", pass());
        assert_eq!(e.winner.as_deref(), Some("a"));
        e.upsert_candidate(timed("a", 5.0)); // re-timed, slower
        assert_eq!(e.candidate("a").unwrap().check, Some(pass()));
        assert_eq!(e.winner.as_deref(), Some("b"));
        assert_eq!(e.candidates.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn validate_reports_inconsistent_files() {
        let mut f = ResultsFile::new("kda", h200());
        f.entry_mut(&key("kda", &[("t", 64)])).upsert_candidate(timed("a", 1.0));
        assert_eq!(f.validate(), Ok(()));
        let mut bad = f.clone();
        bad.entries[0].candidates.push(timed("a", 2.0));
        bad.entries[0].winner = Some("ghost".into());
        bad.entries.push(TuneEntry::new(key("gated_mla", &[("t", 64)])));
        let problems = bad.validate().unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        let mut other_gpu = f.clone();
        other_gpu.gpu.sm_count = 114;
        assert_eq!(other_gpu.validate().unwrap_err().len(), 1);
        let mut nan = f;
        nan.entries[0].candidates[0].outcome = Outcome::Timed(stats(f64::NAN));
        assert_eq!(nan.validate().unwrap_err().len(), 1);
    }
}
