//! The operator interface every K3 operator implements, so the CLI, the tuner, the fuzzer and the benchmarks
//! treat them alike.

use crate::OpError;
use crate::plan::{Outputs, Plan};
use k3k_ir::{Kernel, KnobSpace, Knobs};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A named problem shape: integer dims the operator interprets (e.g. `G`, `mean`, `K`, `N`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preset {
    pub name: String,
    pub dims: BTreeMap<String, i64>,
}

impl Preset {
    /// A preset from `(dim, value)` pairs.
    pub fn new(name: &str, dims: &[(&str, i64)]) -> Self {
        Preset { name: name.into(), dims: dims.iter().map(|(k, v)| (k.to_string(), *v)).collect() }
    }
    /// A dim, or an error naming it.
    pub fn get(&self, dim: &str) -> Result<i64, OpError> {
        self.dims.get(dim).copied().ok_or_else(|| OpError::BadInput {
            op: "preset",
            arg: dim.into(),
            why: format!("preset `{}` has no dim `{dim}` (has {:?})", self.name, self.dims.keys().collect::<Vec<_>>()),
        })
    }
    /// A dim with a default.
    pub fn get_or(&self, dim: &str, default: i64) -> i64 {
        self.dims.get(dim).copied().unwrap_or(default)
    }
}

/// The result of comparing one run's outputs with the f64 reference (SPEC 3).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckReport {
    /// Largest relative L2 error over the checked outputs.
    pub max_rel_err: f64,
    pub passed: bool,
    /// What was compared (e.g. "all rows" or "96 sampled rows").
    pub scope: String,
    /// The first problem found, when failed.
    pub detail: String,
}

impl CheckReport {
    /// Fold another output's report into this one.
    pub fn merge(mut self, other: CheckReport) -> CheckReport {
        self.max_rel_err = self.max_rel_err.max(other.max_rel_err);
        if self.passed && !other.passed {
            self.detail = other.detail.clone();
        }
        self.passed &= other.passed;
        if !other.scope.is_empty() && !self.scope.contains(&other.scope) {
            self.scope = if self.scope.is_empty() { other.scope } else { format!("{}; {}", self.scope, other.scope) };
        }
        self
    }
}

/// Work of one run, for rooflines: floating-point operations and the fewest bytes that must move through HBM.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Work {
    pub flops: f64,
    pub bytes: f64,
}

/// One problem instance with its random inputs.
pub trait Instance: Send {
    /// One line describing the instance (shapes, variant).
    fn describe(&self) -> String;
    /// The buffers and launches for these knobs.
    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError>;
    /// Compare a run's outputs against the f64 reference.
    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError>;
    /// Flops and bytes.
    fn work(&self) -> Work;
    /// What a peer implementation needs to run the same problem (shapes, ragged counts), as JSON.
    fn problem(&self) -> serde_json::Value;
}

/// A K3 operator.
pub trait Operator: Send + Sync {
    /// Name used on the command line and in results (`latent_moe_gemm`, `gated_mla.prefill`, ...).
    fn name(&self) -> &'static str;
    /// One line for `k3k list`.
    fn summary(&self) -> &'static str;
    /// The knobs the tuner may change.
    fn knob_space(&self) -> KnobSpace;
    /// Knobs used when nothing is tuned.
    fn default_knobs(&self) -> Knobs;
    /// Knobs a plan reads besides the kernels' space (not tuned; e.g. a forced split count), so that hand-given
    /// knobs can be checked against them too. Default: none.
    fn plan_knobs(&self) -> KnobSpace {
        KnobSpace::default()
    }
    /// What hand-given knobs are checked against ([`KnobSpace::check`]): the tuning space, the values it also
    /// accepts, and the plan knobs.
    fn checked_knobs(&self) -> KnobSpace {
        let mut space = self.knob_space();
        let plan = self.plan_knobs();
        space.axes.extend(plan.axes);
        space.accepted.extend(plan.accepted);
        space
    }
    /// The benchmark presets (SEMANTICS.md section 4 rows for this operator).
    fn bench_presets(&self) -> Vec<Preset>;
    /// A random small problem for correctness checks (edge sizes, empty groups, ...).
    fn random_case(&self, rng: &mut StdRng) -> Preset;
    /// Random inputs for a preset.
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError>;
    /// The kernels a preset needs at these knobs, without generating data (compile-only checks).
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError>;
    /// Check a problem's dims before anything is built or allocated: every dim is one this operator takes
    /// (an unknown or misspelt dim is an error naming it and listing the accepted ones), within the bounds the
    /// operator supports, and the problem's bytes are bounded. The CLI, the tuner's planner and `k3k-build`
    /// call it first. The default accepts everything: an operator overrides it with its declared dims.
    fn check_dims(&self, _p: &Preset) -> Result<(), OpError> {
        Ok(())
    }
    /// The shape bucket of a preset, for tuning keys.
    fn bucket_dims(&self, p: &Preset) -> Vec<(String, u64)> {
        p.dims.iter().map(|(k, v)| (k.clone(), (*v).max(0) as u64)).collect()
    }
    /// Spilled bytes (stores, and loads, each) that ptxas may report for one of this operator's kernels without
    /// it being a regression: 0, except where a kernel that spills a few bytes was measured faster than every
    /// spill-free form (each such allowance names its measurement). `k3k run`, the compile tests and the tuner's
    /// pruning hold kernels to it.
    fn known_spill_bytes(&self, _kernel: &Kernel) -> u32 {
        0
    }
}
