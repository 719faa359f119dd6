//! `latent_moe_gemm`: the grouped GEMM over routed experts of SEMANTICS.md section 2.1 (and the dense GEMM as its
//! one-group case), written as an IR tile program.
//!
//! `y[r, n] = p[r]? * sum_k x[r, k] * w[g(r), n, k]`, where expert g owns rows `offs[g-1]..offs[g]`
//! (inclusive cumulative ends, groups may be empty), optionally followed by the SiTU-GLU or SwiGLU epilogue
//! over the two halves of N. One persistent program walks the (group, m-tile, n-tile) space: each block takes
//! every `grid.x`-th tile, so empty and tiny groups cost no blocks. The K loop is a `STAGES`-deep pipeline
//! (`cp.async`, or TMA bulk copies on an mbarrier ring) feeding `mma.sync` or `wgmma` from swizzled shared
//! tiles. With `OVERLAP=on` the walk is software pipelined: the next tile's group search overlaps the current
//! tile's last product, and the next tile's first stages are in flight during the current tile's epilogue (see
//! `lab/2026-12-01/1645-profile-latent_moe_gemm-sass-analysis.md`). With `AHEAD` a producer (a thread, or a
//! warp of its own) streams stages across tile boundaries.
//!
//! Where each part lives:
//! - `mod.rs`: this map and the [`Operator`] impl ([`LatentMoeGemm`]).
//! - The problem: `spec.rs` ([`Epilogue`], [`GemmSpec`]: what a kernel variant computes), `problem.rs` ([`DIMS`],
//!   [`GemmProblem`], [`ragged_counts`], [`gemm_footprint`]), `presets.rs` (benchmark presets, random cases).
//! - The knobs: `knobs.rs` ([`GemmKnobs`], one declaration giving each knob's meaning, the tuning space
//!   [`knob_space`], the defaults [`default_knobs`] and the meaning of knobs absent from older records; the
//!   mma.sync fallback [`sync_knobs`]), and `config.rs` (the typed knobs resolved for a variant: `auto` values,
//!   refused combinations).
//! - The kernel builder ([`build_kernel`]), by phase:
//!   - `kernel.rs`: the entry, and the declarations every phase shares (interface, tiles, walk bounds, ring);
//!   - `walk.rs`: the persistent tile walk (group search, tile coordinates) and its three schedules;
//!   - `ring.rs`: loading a stage into the ring (TMA, TMA pairs of a cluster, cp.async) and releasing it;
//!   - `producer.rs`: the producer stream's cursor (AHEAD);
//!   - `mainloop.rs`: the prologue, the K loop (wgmma ring or mma.sync) and [`weight_products`];
//!   - `epilogue.rs`: the fused GLU and routing weight, and the register or bulk-tensor store.
//! - Running and checking: `plan.rs` (seeded inputs and the launch plan), `check.rs` (the f64 reference check).

mod check;
mod config;
mod epilogue;
mod kernel;
mod knobs;
mod mainloop;
mod plan;
mod presets;
mod problem;
mod producer;
mod ring;
mod spec;
mod walk;

pub use kernel::build_kernel;
pub use knobs::*;
pub use mainloop::weight_products;
pub use problem::{DIMS, GemmProblem, epilogue_of, gemm_footprint, group_counts, ragged_counts};
pub use spec::{Epilogue, GemmSpec};

use crate::OpError;
use crate::dims;
use crate::op::{Instance, Operator, Preset};
use k3k_ir::{Kernel, KnobSpace, Knobs};
use rand::rngs::StdRng;

/// The `latent_moe_gemm` operator.
pub struct LatentMoeGemm;

impl Operator for LatentMoeGemm {
    fn name(&self) -> &'static str {
        "latent_moe_gemm"
    }
    fn summary(&self) -> &'static str {
        "grouped GEMM over ragged routed experts (and dense GEMM), bf16 in, f32 accumulate, fused SiTU-GLU/SwiGLU and routing weight"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        presets::bench_presets()
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        presets::random_case(rng)
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(self.name(), DIMS, p)?;
        dims::bound(self.name(), p, gemm_footprint(p))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        Ok(Box::new(plan::GemmInstance::new(GemmProblem::from_preset(p)?, seed)))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = GemmProblem::from_preset(p)?;
        Ok(vec![build_kernel(&pb.spec(), knobs)?])
    }
    fn bucket_dims(&self, p: &Preset) -> Vec<(String, u64)> {
        GemmProblem::from_preset(p).map(|pb| pb.bucket_dims()).unwrap_or_default()
    }
}
