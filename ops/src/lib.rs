//! # k3k-ops: the K3 operators, written in the IR
//!
//! One module per operator. Each declares its kernel variants (what the problem fixes), its knob space
//! (what the tuner may change) and its default knobs, builds IR kernels from the two, and implements
//! [`op::Operator`]: benchmark presets, random check cases, seeded inputs, a [`plan::Plan`] of launches and a
//! check against the f64 reference. [`plan::Executor`] runs any plan on the CPU interpreter or a GPU.

pub mod check;
pub mod data;
pub mod dims;
pub mod gated_mla;
pub mod hist_quantile;
pub mod kda;
pub mod latent_moe_gemm;
pub mod mx;
pub mod op;
pub mod plan;
pub mod registry;
pub mod typed_knobs;

use k3k_ir::{IrError, KnobError};

/// Why an operator could not produce a kernel or run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpError {
    #[error(transparent)]
    Knob(#[from] KnobError),
    #[error("{op}: knobs {knobs} are not valid: {why}")]
    InvalidKnobs { op: &'static str, knobs: String, why: String },
    #[error(transparent)]
    Ir(#[from] IrError),
    #[error("{op}: argument `{arg}`: {why}")]
    BadInput { op: &'static str, arg: String, why: String },
    #[error(transparent)]
    Codegen(#[from] k3k_codegen::CodegenError),
    #[error(transparent)]
    Runtime(#[from] k3k_runtime::RuntimeError),
    #[error(transparent)]
    Interp(#[from] k3k_codegen::cpu::interp::InterpError),
    #[error("internal error: {0}")]
    Internal(String),
    #[error("plan schedule: step {step}: {why}")]
    Schedule { step: usize, why: String },
}
