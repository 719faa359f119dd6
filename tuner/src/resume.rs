//! `--resume`: which planned candidates still need measuring.
//!
//! Every measurement is written to the store as soon as it finishes, so after an interruption
//! (`kill -9`, a reboot, a lost SSH session) the file holds every finished candidate. Resuming is then
//! a pure function: the plan minus what the file already has for the same key. A recorded failure is
//! a finished measurement too (a candidate that faulted once is not re-run by default), unless
//! `retry_transient` asks to try timeouts and crashes again.

use crate::record::{CandidateResult, FailStage, KnobMap, Outcome, TuneEntry};
use serde::{Deserialize, Serialize};

/// One candidate to measure: an id and the knobs it stands for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateSpec {
    pub id: String,
    pub knobs: KnobMap,
}

impl CandidateSpec {
    pub fn new(id: impl Into<String>, knobs: KnobMap) -> Self {
        Self { id: id.into(), knobs }
    }

    /// A candidate whose id is derived from its knobs, `name=value` pairs in name order joined by
    /// `,` (strings unquoted), e.g. `bm=128,bn=64,stages=3`: readable, and equal knobs give equal ids
    /// in every process and on every host, which `--resume`, sharding and merging rely on.
    pub fn from_knobs(knobs: KnobMap) -> Self {
        let id = knobs
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(",");
        Self { id, knobs }
    }
}

/// What counts as already done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResumeOptions {
    /// Measure candidates that timed out or crashed again (they may have been a flaky machine).
    pub retry_transient: bool,
}

/// The candidates of `planned` that `entry` (the stored results for the same key) has not finished,
/// in plan order. A stored result only counts when its knobs equal the planned ones.
pub fn remaining<'a>(
    planned: &'a [CandidateSpec],
    entry: Option<&TuneEntry>,
    opts: ResumeOptions,
) -> Vec<&'a CandidateSpec> {
    planned
        .iter()
        .filter(|spec| !entry.and_then(|e| e.candidate(&spec.id)).is_some_and(|done| is_finished(done, spec, opts)))
        .collect()
}

fn is_finished(done: &CandidateResult, spec: &CandidateSpec, opts: ResumeOptions) -> bool {
    if done.knobs != spec.knobs {
        return false;
    }
    match &done.outcome {
        Outcome::Timed(_) => true,
        Outcome::Failed { stage, .. } => !(opts.retry_transient && FailStage::is_transient(*stage)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::key;
    use crate::stats::tests::stats;

    fn spec(bm: i64) -> CandidateSpec {
        let mut k = KnobMap::new();
        k.insert("bm".into(), serde_json::json!(bm));
        k.insert("layout".into(), serde_json::json!("row"));
        CandidateSpec::from_knobs(k)
    }

    #[test]
    fn id_from_knobs_is_canonical() {
        assert_eq!(spec(64).id, "bm=64,layout=row");
    }

    #[test]
    fn finished_candidates_are_skipped() {
        let plan: Vec<CandidateSpec> = [16, 32, 64, 128, 256].into_iter().map(spec).collect();
        let mut e = TuneEntry::new(key("gemm", &[("m", 64)]));
        assert_eq!(remaining(&plan, None, ResumeOptions::default()).len(), 5);
        assert_eq!(remaining(&plan, Some(&e), ResumeOptions::default()).len(), 5);
        e.upsert_candidate(CandidateResult::new(&plan[1].id, plan[1].knobs.clone(), Outcome::Timed(stats(1.0))));
        e.upsert_candidate(CandidateResult::new(
            &plan[3].id,
            plan[3].knobs.clone(),
            Outcome::failed(FailStage::Timeout, "hung"),
        ));
        e.upsert_candidate(CandidateResult::new(
            &plan[4].id,
            plan[4].knobs.clone(),
            Outcome::failed(FailStage::Compile, "ptxas"),
        ));
        // a stored result under the id of plan[0] but with other knobs does not count
        let mut stale = plan[0].knobs.clone();
        stale.insert("bm".into(), serde_json::json!(1));
        e.upsert_candidate(CandidateResult::new(&plan[0].id, stale, Outcome::Timed(stats(1.0))));

        let ids = |v: Vec<&CandidateSpec>| v.into_iter().map(|s| s.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(remaining(&plan, Some(&e), ResumeOptions::default())), [plan[0].id.clone(), plan[2].id.clone()]);
        assert_eq!(
            ids(remaining(&plan, Some(&e), ResumeOptions { retry_transient: true })),
            [plan[0].id.clone(), plan[2].id.clone(), plan[3].id.clone()]
        );
    }
}
