//! Combining results files tuned in shards, on different hosts or at different times.
//!
//! **Rules** (each is associative and commutative, so shards can be merged in any order and grouping
//! and give byte-identical files):
//! - Only files of one op and one GPU ([`crate::GpuKey`] equal, SM count included) merge; anything else
//!   is an error, never a silent mix.
//! - Entries are united by key. Within an entry, candidates are united by id.
//! - The same id twice (measured by two shards or two runs): its knobs must be equal (else
//!   [`StoreError::Conflict`]); the copy kept is the timed one over a failed one, then the one with
//!   more samples, then the faster median (then p80, p20, min; then the JSON text, so the choice is
//!   total). The reference checks of both copies are joined ([`CheckRecord::join`]: passes only if
//!   both passed).
//! - `date` is the later date; `default_ms` the smaller one.
//! - The winner is recomputed with the usual rule (fastest timed candidate whose check passed). A
//!   faster candidate from a shard that never checked it does not win until it is checked
//!   (`TuneEntry::next_to_check` names it; `k3k tune --resume` checks it).

use crate::error::StoreError;
use crate::key::TuneKey;
use crate::record::{CandidateResult, CheckRecord, ResultsFile, SCHEMA_VERSION, TuneEntry};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// Merge results files of one op on one GPU (see the module doc for the rules).
pub fn merge(files: &[ResultsFile]) -> Result<ResultsFile, StoreError> {
    let first = files.first().ok_or(StoreError::NothingToMerge)?;
    let mut entries: BTreeMap<TuneKey, TuneEntry> = BTreeMap::new();
    for f in files {
        if f.op != first.op {
            return Err(StoreError::OpMismatch { expected: first.op.clone(), found: f.op.clone() });
        }
        if f.gpu != first.gpu {
            return Err(StoreError::GpuMismatch { expected: first.gpu.clone(), found: f.gpu.clone() });
        }
        f.validate().map_err(|problems| StoreError::Invalid { problems })?;
        for e in &f.entries {
            let merged = match entries.remove(&e.key) {
                Some(prev) => merge_entry(&prev, e)?,
                None => e.clone(),
            };
            entries.insert(e.key.clone(), merged);
        }
    }
    let mut out = ResultsFile {
        schema: SCHEMA_VERSION,
        op: first.op.clone(),
        gpu: first.gpu.clone(),
        entries: entries.into_values().collect(),
    };
    out.normalize();
    Ok(out)
}

fn merge_entry(a: &TuneEntry, b: &TuneEntry) -> Result<TuneEntry, StoreError> {
    let mut by_id: BTreeMap<String, CandidateResult> = a.candidates.iter().map(|c| (c.id.clone(), c.clone())).collect();
    for c in &b.candidates {
        let merged = match by_id.get(&c.id) {
            Some(prev) => merge_candidate(&a.key, prev, c)?,
            None => c.clone(),
        };
        by_id.insert(c.id.clone(), merged);
    }
    let mut out = TuneEntry {
        key: a.key.clone(),
        candidates: by_id.into_values().collect(),
        winner: None,
        winner_check: None,
        date: a.date.clone().max(b.date.clone()),
        default_ms: match (a.default_ms, b.default_ms) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        },
    };
    out.normalize();
    Ok(out)
}

fn merge_candidate(key: &TuneKey, a: &CandidateResult, b: &CandidateResult) -> Result<CandidateResult, StoreError> {
    if a.knobs != b.knobs {
        return Err(StoreError::Conflict {
            key: key.to_string(),
            id: a.id.clone(),
            reason: format!(
                "the same id has different knobs ({} vs {})",
                serde_json::to_string(&a.knobs).unwrap_or_default(),
                serde_json::to_string(&b.knobs).unwrap_or_default()
            ),
        });
    }
    let mut kept = match preference(a, b) {
        Ordering::Less => b.clone(),
        _ => a.clone(),
    };
    kept.check = CheckRecord::join(a.check, b.check);
    Ok(kept)
}

/// `Greater` when copy `a` is the one to keep.
fn preference(a: &CandidateResult, b: &CandidateResult) -> Ordering {
    let by_outcome = match (a.outcome.timing(), b.outcome.timing()) {
        (Some(_), None) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (Some(x), Some(y)) => x
            .samples
            .cmp(&y.samples)
            .then(y.median_ms.total_cmp(&x.median_ms))
            .then(y.p80_ms.total_cmp(&x.p80_ms))
            .then(y.p20_ms.total_cmp(&x.p20_ms))
            .then(y.min_ms.total_cmp(&x.min_ms)),
        (None, None) => Ordering::Equal,
    };
    by_outcome.then_with(|| {
        let text = |c: &CandidateResult| serde_json::to_string(&c.outcome).unwrap_or_default();
        text(b).cmp(&text(a))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::{h200, key};
    use crate::record::{FailStage, KnobMap, Outcome};
    use crate::stats::{TimingStats, tests::stats};

    fn cand(id: &str, outcome: Outcome, check: Option<bool>) -> CandidateResult {
        let mut knobs = KnobMap::new();
        knobs.insert("id".into(), serde_json::json!(id));
        CandidateResult {
            check: check.map(|passed| CheckRecord { max_rel_err: if passed { 1e-4 } else { 0.3 }, passed }),
            ..CandidateResult::new(id, knobs, outcome)
        }
    }

    fn timed(median: f64, samples: u32) -> Outcome {
        Outcome::Timed(TimingStats { samples, ..stats(median) })
    }

    fn shard(date: &str, items: &[(u64, CandidateResult)], default_ms: Option<f64>) -> ResultsFile {
        let mut f = ResultsFile::new("gemm", h200());
        for (m, c) in items {
            let e = f.entry_mut(&key("gemm", &[("m", *m)]));
            e.upsert_candidate(c.clone());
            e.date = date.to_string();
            e.default_ms = default_ms;
        }
        f.normalize();
        f
    }

    fn three_shards() -> [ResultsFile; 3] {
        [
            shard(
                "2026-01-02",
                &[
                    (64, cand("a", timed(2.0, 10), Some(true))),
                    (64, cand("b", timed(1.5, 10), None)),
                    (128, cand("a", timed(3.0, 10), Some(true))),
                ],
                Some(4.0),
            ),
            shard(
                "2026-01-05",
                &[
                    (64, cand("b", timed(1.4, 20), Some(true))),
                    (64, cand("c", Outcome::failed(FailStage::Crash, "illegal address"), None)),
                    (256, cand("z", timed(9.0, 10), Some(true))),
                ],
                None,
            ),
            shard(
                "2026-01-03",
                &[
                    (64, cand("c", timed(1.0, 10), Some(false))),
                    (64, cand("a", timed(1.9, 10), None)),
                    (128, cand("d", timed(2.5, 5), Some(true))),
                ],
                Some(3.5),
            ),
        ]
    }

    #[test]
    fn merge_unites_entries_and_candidates() {
        let [a, b, c] = three_shards();
        let m = merge(&[a, b, c]).unwrap();
        assert_eq!(m.entries.len(), 3);
        let e64 = m.entry(&key("gemm", &[("m", 64)])).unwrap();
        let ids: Vec<&str> = e64.candidates.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        // b: the copy with more samples is kept, with its check
        let b = e64.candidate("b").unwrap();
        assert_eq!(b.outcome.timing().unwrap().samples, 20);
        assert!(b.check.unwrap().passed);
        // a: equal samples, the faster median is kept; the check carries over
        let a = e64.candidate("a").unwrap();
        assert_eq!(a.outcome.timing().unwrap().median_ms, 1.9);
        assert!(a.check.unwrap().passed);
        // c: timed beats crashed; but its check failed so it cannot win
        let c = e64.candidate("c").unwrap();
        assert!(c.outcome.timing().is_some());
        assert!(!c.check.unwrap().passed);
        assert_eq!(e64.winner.as_deref(), Some("b"));
        assert!(e64.winner_check.unwrap().passed);
        assert_eq!(e64.date, "2026-01-05");
        assert_eq!(e64.default_ms, Some(3.5));
        let e128 = m.entry(&key("gemm", &[("m", 128)])).unwrap();
        assert_eq!(e128.winner.as_deref(), Some("d"));
    }

    #[test]
    fn merge_is_associative_and_commutative() {
        let [a, b, c] = three_shards();
        let all = merge(&[a.clone(), b.clone(), c.clone()]).unwrap();
        let ab_c = merge(&[merge(&[a.clone(), b.clone()]).unwrap(), c.clone()]).unwrap();
        let a_bc = merge(&[a.clone(), merge(&[b.clone(), c.clone()]).unwrap()]).unwrap();
        let ca_b = merge(&[merge(&[c.clone(), a.clone()]).unwrap(), b.clone()]).unwrap();
        for (name, other) in [
            ("(ab)c", ab_c),
            ("a(bc)", a_bc),
            ("(ca)b", ca_b),
            ("cba", merge(&[c.clone(), b.clone(), a.clone()]).unwrap()),
            ("bac", merge(&[b.clone(), a.clone(), c.clone()]).unwrap()),
        ] {
            assert_eq!(
                serde_json::to_string_pretty(&other).unwrap(),
                serde_json::to_string_pretty(&all).unwrap(),
                "{name}"
            );
        }
        // idempotent
        assert_eq!(merge(&[all.clone(), all.clone()]).unwrap(), all);
        assert_eq!(merge(std::slice::from_ref(&a)).unwrap(), a);
    }

    #[test]
    fn merge_refuses_mixed_gpus_ops_and_conflicting_knobs() {
        let [a, b, _] = three_shards();
        let mut other_gpu = b.clone();
        other_gpu.gpu.name = "NVIDIA H100 80GB HBM3".into();
        for e in &mut other_gpu.entries {
            e.key = e.key.clone().with_gpu(&other_gpu.gpu);
        }
        assert!(matches!(merge(&[a.clone(), other_gpu]), Err(StoreError::GpuMismatch { .. })));
        let mut other_op = ResultsFile::new("kda", h200());
        other_op.entries.clear();
        assert!(matches!(merge(&[a.clone(), other_op]), Err(StoreError::OpMismatch { .. })));
        let mut conflicting = b;
        conflicting.entries[0].candidates[0].id = "a".into(); // same id, knobs of "b"
        conflicting.normalize();
        let err = merge(&[a, conflicting]).unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
        assert!(matches!(merge(&[]), Err(StoreError::NothingToMerge)));
    }
}
