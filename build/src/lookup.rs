//! Tuned knobs from `results/<gpu-slug>/<op>.json`, or the operator's defaults.
//!
//! The key is the one `k3k tune` writes (op, IR hash of the operator's kernels at its default knobs for the
//! shape, codegen and NVRTC versions, the GPU of the results file, dtype, shape bucket, alignment class), and
//! the rule is [`k3k_tuner::ResultsFile::lookup`]: the requested bucket, else the nearest tuned bucket of the
//! same program; a result whose program, code generator or NVRTC changed is never reused. Without NVRTC at
//! build time (run-time NVRTC) the NVRTC version is not compared. The winner's knobs must then build the
//! operator's kernels for the requested shape. Anything else falls back to the operator's default knobs, and
//! the builder prints a warning saying why.

use k3k_ir::Knobs;
use k3k_ops::op::{Operator, Preset};
use k3k_tuner::{BucketPolicy, GpuKey, ResultsStore, ShapeBucket, TuneKey};
use std::path::Path;

/// Where a request's knobs came from.
#[derive(Clone, Debug, PartialEq)]
pub enum KnobSource {
    /// A tuning record: the file, the bucket it was tuned for and whether that is the requested bucket.
    Tuned { file: String, bucket: String, exact: bool },
    /// The operator's defaults, and why (no file, no entry, ...).
    Default { why: String },
}

impl std::fmt::Display for KnobSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KnobSource::Tuned { file, bucket, exact: true } => write!(f, "tuned: {file} [{bucket}]"),
            KnobSource::Tuned { file, bucket, exact: false } => write!(f, "tuned: {file} [{bucket}] (nearest bucket)"),
            KnobSource::Default { why } => write!(f, "default knobs ({why})"),
        }
    }
}

/// The shape bucket of a preset, as the tuner keys it.
pub fn bucket_of(op: &dyn Operator, p: &Preset) -> ShapeBucket {
    let dims = op.bucket_dims(p);
    let dims: Vec<(&str, u64)> = dims.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    ShapeBucket::bucket(&dims, BucketPolicy::DEFAULT)
}

/// Knobs from a results record value (`{"BM": 128, "RASTER": "m"}`) over the operator's defaults.
pub fn knobs_from_record(defaults: &Knobs, rec: &k3k_tuner::KnobMap) -> Option<Knobs> {
    let tuned: Knobs = serde_json::from_value(serde_json::Value::Object(rec.clone().into_iter().collect())).ok()?;
    let mut k = defaults.clone();
    k.0.extend(tuned.0);
    Some(k)
}

/// The tuning key of `op` at `preset`, as `k3k tune` computes it, on the GPU of a results file.
/// `nvrtc` is NVRTC's version (`None` when NVRTC is not available at build time).
pub fn tune_key(op: &dyn Operator, preset: &Preset, gpu: &GpuKey, nvrtc: Option<&str>) -> Option<TuneKey> {
    let kernels = op.kernels(preset, &op.default_knobs()).ok()?;
    let joined: String = kernels.iter().map(k3k_ir::stable_hash).collect::<Vec<_>>().join(",");
    let alignment = kernels
        .first()
        .and_then(|k| k.name.split('_').find(|p| p.starts_with("in") && p.contains("out")).map(str::to_string))
        .unwrap_or_else(|| "any".into());
    Some(
        TuneKey {
            op: op.name().into(),
            ir_hash: k3k_ir::hash::hash_str(&joined),
            codegen_version: k3k_codegen::CODEGEN_VERSION,
            nvrtc_version: nvrtc.unwrap_or("none").into(),
            gpu_name: String::new(),
            compute_capability: (0, 0),
            sm_count: 0,
            dtype: "bf16".into(),
            shape_bucket: bucket_of(op, preset),
            alignment,
        }
        .with_gpu(gpu),
    )
}

/// The knobs for `op` at `preset` on `gpu_slug`, and where they came from. `warnings` receives one line per
/// record that was found but could not be used.
pub fn resolve(
    op: &dyn Operator,
    preset: &Preset,
    gpu_slug: &str,
    results: &Path,
    nvrtc: Option<&str>,
    warnings: &mut Vec<String>,
) -> (Knobs, KnobSource) {
    let defaults = op.default_knobs();
    let file = results.join(gpu_slug).join(format!("{}.json", op.name()));
    let shown = file.display().to_string();
    let default = |why: String| (defaults.clone(), KnobSource::Default { why });
    if !file.is_file() {
        return default(format!("no tuning record: {shown} does not exist"));
    }
    let loaded = match ResultsStore::open_read_only(results).load(gpu_slug, op.name()) {
        Ok(Some(f)) => f,
        Ok(None) => return default(format!("no tuning record: {shown} does not exist")),
        Err(e) => return default(format!("{shown} could not be read: {e}")),
    };
    let Some(key) = tune_key(op, preset, &loaded.gpu, nvrtc) else {
        return default(format!("the default knobs do not build for {}", preset.name));
    };
    // Without NVRTC here, any NVRTC version the file holds.
    let versions: Vec<String> = match nvrtc {
        Some(v) => vec![v.to_string()],
        None => {
            let mut v: Vec<String> = loaded.entries.iter().map(|e| e.key.nvrtc_version.clone()).collect();
            v.sort();
            v.dedup();
            v
        }
    };
    let hit = versions.iter().find_map(|v| loaded.lookup(&TuneKey { nvrtc_version: v.clone(), ..key.clone() }));
    let Some(hit) = hit else {
        return default(format!(
            "no tuning record for this program and shape in {shown} (key: {}; tuned buckets: {})",
            key,
            loaded
                .entries
                .iter()
                .map(|e| format!("[{}]", e.key.shape_bucket))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(" ")
        ));
    };
    let Some(knobs) = knobs_from_record(&defaults, &hit.knobs) else {
        warnings.push(format!("{shown} [{}]: winner `{}` has unreadable knobs", hit.bucket, hit.candidate_id));
        return default(format!("the tuned winner in {shown} has unreadable knobs"));
    };
    if let Err(err) = op.kernels(preset, &knobs) {
        warnings.push(format!("{shown} [{}]: winner {knobs} does not build for this shape ({err})", hit.bucket));
        return default(format!("the tuned winner in {shown} does not build for this shape"));
    }
    (knobs, KnobSource::Tuned { file: shown, bucket: hit.bucket.to_string(), exact: hit.exact })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k3k_tuner::{CandidateResult, CheckRecord, Outcome, ResultsFile, TimingStats};

    fn op() -> Box<dyn Operator> {
        k3k_ops::registry::select("latent_moe_gemm").pop().unwrap()
    }

    fn preset() -> Preset {
        Preset::new("t", &[("G", 4), ("mean", 64), ("K", 256), ("N", 512)])
    }

    fn write_record(dir: &Path, p: &Preset, knobs: serde_json::Value) {
        let gpu = GpuKey::new("NVIDIA H200", (9, 0), 132);
        let mut f = ResultsFile::new("latent_moe_gemm", gpu.clone());
        let key = tune_key(op().as_ref(), p, &gpu, Some("13.0")).unwrap();
        let e = f.entry_mut(&key);
        let map = knobs.as_object().unwrap().clone().into_iter().collect();
        let stats = TimingStats::from_samples(&[1.0, 1.1, 0.9]).unwrap();
        e.upsert_candidate(CandidateResult::new("w", map, Outcome::Timed(stats)));
        e.set_check("w", CheckRecord { max_rel_err: 1e-3, passed: true });
        ResultsStore::open(dir).unwrap().save(&f).unwrap();
    }

    #[test]
    fn missing_file_falls_back_to_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = vec![];
        let (k, src) = resolve(op().as_ref(), &preset(), "nvidia-h200", dir.path(), Some("13.0"), &mut w);
        assert_eq!(k, op().default_knobs());
        assert!(matches!(&src, KnobSource::Default { why } if why.contains("does not exist")), "{src}");
    }

    #[test]
    fn exact_then_nearest_bucket_and_invalid_winners_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let o = op();
        let sync = serde_json::json!({"BM": 64, "BN": 128, "BK": 32, "STAGES": 3, "WM": 2, "WN": 2, "RASTER": "n", "MMA": "sync"});
        write_record(dir.path(), &preset(), sync);
        let mut w = vec![];
        let (k, src) = resolve(o.as_ref(), &preset(), "nvidia-h200", dir.path(), Some("13.0"), &mut w);
        assert_eq!(k.str("RASTER").unwrap(), "n");
        assert!(matches!(src, KnobSource::Tuned { exact: true, .. }), "{src}");
        // A larger shape finds the same record as the nearest bucket.
        let big = Preset::new("t", &[("G", 4), ("mean", 256), ("K", 256), ("N", 512)]);
        let (k, src) = resolve(o.as_ref(), &big, "nvidia-h200", dir.path(), Some("13.0"), &mut w);
        assert_eq!(k.int("BM").unwrap(), 64);
        assert!(matches!(src, KnobSource::Tuned { exact: false, .. }), "{src}");
        // A winner whose knobs no longer build is skipped with a warning.
        let dir2 = tempfile::tempdir().unwrap();
        write_record(dir2.path(), &preset(), serde_json::json!({"BM": 48}));
        let (k, src) = resolve(o.as_ref(), &preset(), "nvidia-h200", dir2.path(), Some("13.0"), &mut w);
        assert_eq!(k, o.default_knobs());
        assert!(matches!(src, KnobSource::Default { .. }));
        assert!(w.iter().any(|l| l.contains("does not build")), "{w:?}");
        // Another NVRTC version: a stale record, not reused.
        let (_, src) = resolve(o.as_ref(), &preset(), "nvidia-h200", dir.path(), Some("13.1"), &mut w);
        assert!(matches!(src, KnobSource::Default { .. }), "{src}");
        // NVRTC unknown at build time: any version.
        let (_, src) = resolve(o.as_ref(), &preset(), "nvidia-h200", dir.path(), None, &mut w);
        assert!(matches!(src, KnobSource::Tuned { exact: true, .. }), "{src}");
    }
}
