//! k3k-tuner: the backend-agnostic half of the autotuner.
//!
//! - **What is keyed** ([`TuneKey`]): op, IR hash, codegen version, NVRTC version, GPU name, compute
//!   capability, SM count, dtype, shape bucket ([`ShapeBucket`], power-of-two anchors) and alignment
//!   class: everything that decides whether a tuned config is valid, not only how fast it is.
//! - **What is stored** ([`ResultsFile`]): one JSON file per (GPU, op), `results/<gpu-slug>/<op>.json`,
//!   schema-versioned, with every candidate's knobs and timing ([`TimingStats`]: median, p20, p80) or
//!   failure stage, the winner, its reference check and the date.
//! - **How it is written** ([`ResultsStore`]): atomically (temp file, fsync, rename), under an
//!   advisory lock, one candidate at a time, so `kill -9` loses at most the candidate in flight and
//!   `--resume` ([`remaining`]) picks up where the run stopped. A corrupt file is moved aside with a
//!   clear error, never overwritten.
//! - **Why child processes** ([`isolate`]): an illegal address poisons the CUDA context and a hung
//!   kernel blocks its stream forever; measuring in a worker process that is killed and respawned
//!   makes a bad candidate cost one candidate, not the run.
//! - **Choosing** ([`stats`], [`mod@tune`]): median of repeated runs, re-time the top few, break ties
//!   deterministically, and only a candidate whose output matched the reference can win.
//! - **Scaling out** ([`Shard`], [`mod@merge`], [`scheduler`]): `--shard i/n` splits candidates by a stable hash
//!   of their id; without it a Slurm array task or a Kubernetes Indexed Job's pod names its shard; shards tuned on
//!   different hosts merge associatively and commutatively.
//!
//! The GPU parts (CUDA events, L2 flush, compiling, comparing with the reference) live in the crates
//! that own CUDA; they plug in through [`Measurer`] or a worker binary built on [`protocol::serve`].

pub mod budget;
pub mod cost;
pub mod error;
pub mod isolate;
pub mod key;
pub mod lookup;
pub mod merge;
pub mod protocol;
pub mod record;
pub mod resume;
pub mod scheduler;
pub mod search;
pub mod shard;
pub mod stats;
pub mod store;
pub mod tune;

pub use error::StoreError;
pub use isolate::{IsolationFailure, Worker, WorkerPool, WorkerSpec, run_isolated};
pub use key::{BucketPolicy, GpuKey, ShapeBucket, TuneKey, slugify};
pub use lookup::LookupHit;
pub use merge::merge;
pub use record::{
    CandidateResult, CheckRecord, FailStage, KnobMap, Outcome, ResultsFile, SCHEMA_VERSION, TuneEntry, utc_date,
    utc_date_today,
};
pub use resume::{CandidateSpec, ResumeOptions, remaining};
pub use scheduler::{SchedulerError, ShardChoice, ShardSource};
pub use search::{
    Lane, Planned, Planner, PresetResult, SearchEvent, SearchOptions, SearchPreset, SearchReport, search,
};
pub use shard::{Shard, ShardParseError, stable_hash};
pub use stats::{StatsError, TimingStats, pick_winner, retime_top_k, winner_order};
pub use store::{ResultsStore, read_results_file, write_results_file};
pub use tune::{Abort, Measurer, TuneError, TuneEvent, TuneOptions, TuneReport, WorkerMeasurer, tune};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
