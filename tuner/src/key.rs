//! What a tuning result is keyed on.
//!
//! A result is only reused when everything that decides whether a config is *valid* and how fast it is
//! matches: the operator's IR, the code generator and NVRTC that built it, the exact GPU (name, compute
//! capability and SM count, not just `sm_XX`), the dtype, the shape bucket and the alignment class. A
//! key that leaves one of these out reuses winners that no longer fit (CubeCL's cached winner failed a
//! 16-byte alignment check its key did not record; TileLang's key left out the problem shape).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The device part of a key; also names the results directory (`results/<slug>/<op>.json`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuKey {
    /// The driver's device name, e.g. `NVIDIA H200`.
    pub name: String,
    /// `(major, minor)`, e.g. `(9, 0)`.
    pub compute_capability: (u32, u32),
    /// Number of streaming multiprocessors (tells an H100 PCIe from an SXM, and MIG slices apart).
    pub sm_count: u32,
}

impl GpuKey {
    pub fn new(name: impl Into<String>, compute_capability: (u32, u32), sm_count: u32) -> Self {
        Self { name: name.into(), compute_capability, sm_count }
    }

    /// A file-system friendly name derived from the device name only: `NVIDIA H200` -> `nvidia-h200`.
    ///
    /// Two devices with the same name but a different SM count share a slug, and so a file; the file
    /// records its full [`GpuKey`] and the store refuses to mix two of them (see `StoreError::GpuMismatch`).
    pub fn slug(&self) -> String {
        slugify(&self.name)
    }
}

impl fmt::Display for GpuKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (sm_{}{}, {} SMs)",
            self.name, self.compute_capability.0, self.compute_capability.1, self.sm_count
        )
    }
}

/// Lower-case ASCII letters and digits; every other run of characters becomes one `-`.
/// An empty result becomes `unknown`.
pub fn slugify(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("unknown");
    }
    out
}

/// How one dimension is rounded into its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BucketPolicy {
    /// Keep the value (for dims that are compile-time constants of the kernel, e.g. a head size).
    Exact,
    /// Values `<= exact_up_to` stay exact; larger values round **up** to the next power of two (CubeCL's
    /// `anchor` at its default level). Rounding up means the bucket is never smaller than the real
    /// problem, so a config tuned for the bucket was tuned on at least as much work.
    PowerOfTwo { exact_up_to: u64 },
}

impl BucketPolicy {
    /// Small sizes (decode batches of 1..16 tokens) behave very differently from each other, so they
    /// are tuned exactly; above 16 a power-of-two bucket keeps the number of tuned shapes logarithmic.
    pub const DEFAULT: BucketPolicy = BucketPolicy::PowerOfTwo { exact_up_to: 16 };

    /// The bucketed value of `v`.
    pub fn apply(self, v: u64) -> u64 {
        match self {
            BucketPolicy::Exact => v,
            BucketPolicy::PowerOfTwo { exact_up_to } => {
                if v <= exact_up_to {
                    v
                } else {
                    // Values above 2^63 have no power of two in u64: keep them as they are.
                    v.checked_next_power_of_two().unwrap_or(v)
                }
            }
        }
    }
}

impl Default for BucketPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Dimension name -> bucketed value, ordered by name (so it prints and serializes the same way always).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShapeBucket(pub BTreeMap<String, u64>);

impl ShapeBucket {
    /// Bucket every dim with the same policy. A name given twice keeps its last value.
    pub fn bucket(dims: &[(&str, u64)], policy: BucketPolicy) -> Self {
        Self(dims.iter().map(|&(name, v)| (name.to_string(), policy.apply(v))).collect())
    }

    /// Bucket each dim with its own policy (e.g. tokens by power of two, head size exactly).
    pub fn bucket_each(dims: &[(&str, u64, BucketPolicy)]) -> Self {
        Self(dims.iter().map(|&(name, v, policy)| (name.to_string(), policy.apply(v))).collect())
    }

    pub fn get(&self, dim: &str) -> Option<u64> {
        self.0.get(dim).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// `sum over dims |log2(a) - log2(b)|` (0 counts as 1), or `None` when the two buckets do not
    /// name the same dims. This is the distance [`crate::ResultsFile::lookup`] uses for its
    /// nearest-bucket fallback: doubling one dim costs 1 whatever its size.
    pub fn log_distance(&self, other: &ShapeBucket) -> Option<f64> {
        if self.0.len() != other.0.len() || !self.0.keys().eq(other.0.keys()) {
            return None;
        }
        let l = |v: u64| (v.max(1) as f64).log2();
        Some(self.0.values().zip(other.0.values()).map(|(&a, &b)| (l(a) - l(b)).abs()).sum())
    }
}

impl fmt::Display for ShapeBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// Everything a stored result depends on. Two keys equal in every field share one [`crate::TuneEntry`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TuneKey {
    /// Operator name, e.g. `latent_moe_gemm`; also the results file name.
    pub op: String,
    /// Stable hash of the operator's IR program (changes when the program changes).
    pub ir_hash: String,
    /// Bumped by the code generator whenever what it emits for the same IR changes.
    pub codegen_version: u32,
    /// NVRTC version that compiled the candidates, e.g. `13.0`.
    pub nvrtc_version: String,
    pub gpu_name: String,
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    /// Element type(s), e.g. `bf16` or `e2m1xbf16`.
    pub dtype: String,
    pub shape_bucket: ShapeBucket,
    /// Alignment class of the pointers and strides, e.g. `a16` (16-byte aligned); a config that uses
    /// vector or async copies is only valid in the class it was tuned in.
    pub alignment: String,
}

impl TuneKey {
    /// The device this key was tuned on.
    pub fn gpu(&self) -> GpuKey {
        GpuKey::new(self.gpu_name.clone(), self.compute_capability, self.sm_count)
    }

    /// The fixed key of the tuner's own tests and of its fake worker: `op`'s program `ir_hash` at the shape `dims`
    /// on `gpu`, bf16, alignment class `a16`, codegen version 1 and NVRTC 13.0.
    #[doc(hidden)]
    pub fn fake(op: &str, ir_hash: &str, dims: &[(&str, u64)], gpu: &GpuKey) -> TuneKey {
        TuneKey {
            op: op.into(),
            ir_hash: ir_hash.into(),
            codegen_version: 1,
            nvrtc_version: "13.0".into(),
            gpu_name: String::new(),
            compute_capability: (0, 0),
            sm_count: 0,
            dtype: "bf16".into(),
            shape_bucket: ShapeBucket::bucket(dims, BucketPolicy::DEFAULT),
            alignment: "a16".into(),
        }
        .with_gpu(gpu)
    }

    /// Set the device fields from `gpu`.
    pub fn with_gpu(mut self, gpu: &GpuKey) -> Self {
        self.gpu_name = gpu.name.clone();
        self.compute_capability = gpu.compute_capability;
        self.sm_count = gpu.sm_count;
        self
    }

    /// The same operator and element types on the same device (GPU name, compute capability and SM count).
    fn same_op_and_device(&self, other: &TuneKey) -> bool {
        self.op == other.op
            && self.gpu_name == other.gpu_name
            && self.compute_capability == other.compute_capability
            && self.sm_count == other.sm_count
            && self.dtype == other.dtype
    }

    /// The same problem on the same device (operator, GPU, dtype and shape bucket), whatever the program, codegen
    /// and NVRTC versions or alignment class it was tuned with: a record of such a key may hold a winner worth
    /// timing again after any of those change.
    pub fn same_problem(&self, other: &TuneKey) -> bool {
        self.same_op_and_device(other) && self.shape_bucket == other.shape_bucket
    }

    /// Equal in every field except the shape bucket.
    pub fn same_except_bucket(&self, other: &TuneKey) -> bool {
        self.same_op_and_device(other)
            && self.ir_hash == other.ir_hash
            && self.codegen_version == other.codegen_version
            && self.nvrtc_version == other.nvrtc_version
            && self.alignment == other.alignment
    }
}

impl fmt::Display for TuneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short_hash: String = self.ir_hash.chars().take(12).collect();
        write!(
            f,
            "{} ir={} cg={} nvrtc={} {} {} [{}] {}",
            self.op,
            short_hash,
            self.codegen_version,
            self.nvrtc_version,
            self.gpu_name,
            self.dtype,
            self.shape_bucket,
            self.alignment
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn h200() -> GpuKey {
        GpuKey::new("NVIDIA H200", (9, 0), 132)
    }

    pub(crate) fn key(op: &str, dims: &[(&str, u64)]) -> TuneKey {
        TuneKey::fake(op, "abc123", dims, &h200())
    }

    #[test]
    fn slug_of_common_gpu_names() {
        assert_eq!(h200().slug(), "nvidia-h200");
        assert_eq!(slugify("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
        assert_eq!(slugify("  NVIDIA A100-SXM4-40GB MIG 1g.5gb "), "nvidia-a100-sxm4-40gb-mig-1g-5gb");
        assert_eq!(slugify("../../etc"), "etc");
        assert_eq!(slugify("***"), "unknown");
    }

    #[test]
    fn power_of_two_bucket_is_exact_when_small_and_rounds_up_above() {
        let p = BucketPolicy::DEFAULT;
        assert_eq!(p.apply(0), 0);
        assert_eq!(p.apply(1), 1);
        assert_eq!(p.apply(7), 7);
        assert_eq!(p.apply(16), 16);
        assert_eq!(p.apply(17), 32);
        assert_eq!(p.apply(32), 32);
        assert_eq!(p.apply(33), 64);
        assert_eq!(p.apply(7168), 8192);
        assert_eq!(p.apply(u64::MAX), u64::MAX);
        assert_eq!(BucketPolicy::Exact.apply(7168), 7168);
        for v in 0..5000u64 {
            assert!(p.apply(v) >= v, "bucket never smaller than the value");
        }
    }

    #[test]
    fn bucket_is_ordered_by_name_and_uses_each_policy() {
        let b = ShapeBucket::bucket_each(&[
            ("n", 4000, BucketPolicy::DEFAULT),
            ("d", 192, BucketPolicy::Exact),
            ("m", 3, BucketPolicy::DEFAULT),
        ]);
        assert_eq!(b.to_string(), "d=192,m=3,n=4096");
        assert_eq!(serde_json::to_string(&b).unwrap(), r#"{"d":192,"m":3,"n":4096}"#);
        assert_eq!(b.get("n"), Some(4096));
        assert_eq!(b.get("k"), None);
    }

    #[test]
    fn log_distance_counts_doublings_and_needs_same_dims() {
        let a = ShapeBucket::bucket(&[("m", 64), ("n", 1024)], BucketPolicy::DEFAULT);
        let b = ShapeBucket::bucket(&[("m", 256), ("n", 512)], BucketPolicy::DEFAULT);
        assert!((a.log_distance(&b).unwrap() - 3.0).abs() < 1e-12);
        assert_eq!(a.log_distance(&a), Some(0.0));
        let c = ShapeBucket::bucket(&[("m", 64), ("k", 1024)], BucketPolicy::DEFAULT);
        assert_eq!(a.log_distance(&c), None);
        let d = ShapeBucket::bucket(&[("m", 64)], BucketPolicy::DEFAULT);
        assert_eq!(a.log_distance(&d), None);
    }

    #[test]
    fn key_round_trips_through_json_and_compares_without_bucket() {
        let k = key("kda", &[("t", 100)]);
        let s = serde_json::to_string(&k).unwrap();
        let back: TuneKey = serde_json::from_str(&s).unwrap();
        assert_eq!(back, k);
        assert_eq!(k.gpu(), h200());
        let other = key("kda", &[("t", 5000)]);
        assert!(k.same_except_bucket(&other));
        assert_ne!(k, other);
        let mut other_align = other.clone();
        other_align.alignment = "a4".into();
        assert!(!k.same_except_bucket(&other_align));
    }
}
