//! # k3k: a GPU kernel compiler and autotuner for the Kimi K3 operators
//!
//! The facade model crates depend on. The pipeline: operators written as tile programs in the IR
//! ([`ir`], [`ops`]) -> CUDA C -> NVRTC -> PTX ([`codegen`]) -> launched and timed ([`runtime`]), tuned per GPU
//! ([`tuner`]) and checked against the f64 CPU reference ([`reference`]).

pub use k3k_codegen as codegen;
pub use k3k_ir as ir;
pub use k3k_ops as ops;
pub use k3k_reference as reference;
pub use k3k_runtime as runtime;
pub use k3k_tuner as tuner;

pub mod bench;
pub mod environment;
pub mod fingerprint;
pub mod input;
pub mod paths;
pub mod report;
pub mod tuning;
