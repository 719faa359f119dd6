//! # k3k-ops: the K3 operators, written in the IR
//!
//! One module per operator. Each declares its kernel variants (what the problem fixes), its knob space
//! (what the tuner may change), its default knobs, and builds IR kernels from the two.

pub mod latent_moe_gemm;

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
}
