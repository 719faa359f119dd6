//! Finding the knobs to use for a shape: exact bucket, else the nearest tuned bucket, else none.
//!
//! **Rule.** Only entries with a winner count (timed and checked against the reference).
//! 1. An entry whose key equals the query (bucket included) wins.
//! 2. Else, among entries equal to the query in every key field except the bucket, and whose bucket
//!    names the same dims, the one with the smallest [`ShapeBucket::log_distance`] wins (doubling one
//!    dim costs 1). On a tie the *smaller* bucket wins: a config tuned on a smaller shape is the safer
//!    guess (its tiles are no larger than that shape), while one tuned on a larger shape may tile past
//!    the real problem.
//! 3. Else `None`: the caller uses the operator's default knobs. Keys that differ in IR hash, codegen
//!    or NVRTC version, GPU, dtype or alignment never match: a stale result is not reused.

use crate::key::{ShapeBucket, TuneKey};
use crate::record::{KnobMap, ResultsFile, TuneEntry};

/// What [`ResultsFile::lookup`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct LookupHit {
    pub candidate_id: String,
    pub knobs: KnobMap,
    /// The bucket the knobs were tuned for.
    pub bucket: ShapeBucket,
    /// True when `bucket` is the query's bucket.
    pub exact: bool,
    /// The winner's median time in its own bucket.
    pub median_ms: Option<f64>,
}

impl ResultsFile {
    /// The knobs to use for `key` (see the module doc for the rule).
    pub fn lookup(&self, key: &TuneKey) -> Option<LookupHit> {
        let with_winner = || self.entries.iter().filter(|e| e.winner.is_some());
        if let Some(e) = with_winner().find(|e| &e.key == key) {
            return hit(e, true);
        }
        with_winner()
            .filter(|e| e.key.same_except_bucket(key))
            .filter_map(|e| e.key.shape_bucket.log_distance(&key.shape_bucket).map(|d| (d, e)))
            .min_by(|(da, a), (db, b)| da.total_cmp(db).then_with(|| a.key.shape_bucket.cmp(&b.key.shape_bucket)))
            .and_then(|(_, e)| hit(e, false))
    }
}

fn hit(e: &TuneEntry, exact: bool) -> Option<LookupHit> {
    let c = e.candidate(e.winner.as_deref()?)?;
    Some(LookupHit {
        candidate_id: c.id.clone(),
        knobs: c.knobs.clone(),
        bucket: e.key.shape_bucket.clone(),
        exact,
        median_ms: c.outcome.timing().map(|t| t.median_ms),
    })
}

#[cfg(test)]
mod tests {
    use crate::key::tests::{h200, key};
    use crate::record::{CandidateResult, CheckRecord, KnobMap, Outcome, ResultsFile};
    use crate::stats::tests::stats;

    fn file_with(buckets: &[(u64, u64)]) -> ResultsFile {
        let mut f = ResultsFile::new("gemm", h200());
        for &(m, n) in buckets {
            let e = f.entry_mut(&key("gemm", &[("m", m), ("n", n)]));
            let mut knobs = KnobMap::new();
            knobs.insert("tuned_for".into(), serde_json::json!(format!("{m}x{n}")));
            e.upsert_candidate(CandidateResult::new("w", knobs, Outcome::Timed(stats(1.0))));
            e.set_check("w", CheckRecord { max_rel_err: 0.0, passed: true });
        }
        f
    }

    fn tuned_for(f: &ResultsFile, m: u64, n: u64) -> Option<(String, bool)> {
        f.lookup(&key("gemm", &[("m", m), ("n", n)]))
            .map(|h| (h.knobs["tuned_for"].as_str().unwrap().to_string(), h.exact))
    }

    #[test]
    fn exact_bucket_first() {
        let f = file_with(&[(64, 4096), (128, 4096)]);
        // 100 rounds up into the 128 bucket
        assert_eq!(tuned_for(&f, 100, 4096), Some(("128x4096".into(), true)));
        let h = f.lookup(&key("gemm", &[("m", 64), ("n", 4096)])).unwrap();
        assert_eq!(h.candidate_id, "w");
        assert_eq!(h.median_ms, Some(1.0));
    }

    #[test]
    fn nearest_bucket_by_log_distance_smaller_on_ties() {
        let f = file_with(&[(16, 4096), (1024, 4096), (64, 512)]);
        // m=256: 16 is 4 doublings away, 1024 is 2 away, (64,512) is 2+3 away
        assert_eq!(tuned_for(&f, 256, 4096), Some(("1024x4096".into(), false)));
        // m=128: 16 is 3 away, 1024 is 3 away: the smaller wins
        assert_eq!(tuned_for(&f, 128, 4096), Some(("16x4096".into(), false)));
        assert_eq!(tuned_for(&f, 64, 1024), Some(("64x512".into(), false)));
    }

    #[test]
    fn nothing_usable_gives_none() {
        let mut f = file_with(&[(64, 4096)]);
        // different dims
        assert!(f.lookup(&key("gemm", &[("m", 64), ("k", 4096)])).is_none());
        // different alignment class or codegen version
        let mut k = key("gemm", &[("m", 64), ("n", 4096)]);
        k.alignment = "a2".into();
        assert!(f.lookup(&k).is_none());
        let mut k = key("gemm", &[("m", 64), ("n", 4096)]);
        k.codegen_version += 1;
        assert!(f.lookup(&k).is_none());
        // an entry whose only candidate is unchecked has no winner
        f.entries[0].candidates[0].check = None;
        f.entries[0].recompute_winner();
        assert!(f.lookup(&key("gemm", &[("m", 64), ("n", 4096)])).is_none());
    }
}
