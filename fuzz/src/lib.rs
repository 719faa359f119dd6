//! # k3k-fuzz: differential fuzzing of the K3 operators
//!
//! Every registered operator is fuzzed against its f64 reference on any backend of the IR (the CPU
//! interpreter, a GPU, the CPU JIT): proptest strategies per operator ([`strategy`]) draw problem shapes that
//! favour edge sizes, empty groups, varlen mixes and extreme data; [`runner`] runs each case through
//! `instance -> plan -> run -> check`, shrinks a failing case to the smallest failing shape, prints its case
//! seed (replayable with `k3k fuzz --replay SEED`) and keeps it in `proptest-regressions/<op>.txt`, which every
//! later run replays first.
//!
//! ```no_run
//! use k3k_fuzz::{FuzzOptions, fuzz_op};
//! use k3k_ops::plan::Executor;
//! let op = k3k_ops::registry::select("mx.dequantize").remove(0);
//! let opts = FuzzOptions { cases: 50, seed: 7, ..Default::default() };
//! let report = fuzz_op(&mut Executor::Cpu, op.as_ref(), &opts, &mut |l| eprintln!("{l}"));
//! assert_eq!(report.mismatches, 0);
//! ```

pub mod jit;
pub mod runner;
pub mod strategy;

pub use jit::{DiffBackend, JitBackend};
pub use runner::{
    Backend, CaseProgress, Failure, FuzzOptions, KnobSet, OpReport, case_seed, draw_case, fuzz_op,
    fuzz_op_with_progress, kernels_of_cases, load_regressions, replay,
};
pub use strategy::{Case, case_strategy, preset_strategy};
