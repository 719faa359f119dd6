//! k3k-reference: straightforward CPU ground truth (f64 accumulation) for every k3k operator and
//! for the MX number formats (see SEMANTICS.md sections 1-3). Clarity over speed: simple loops, every
//! public entry point validates its inputs and returns [`RefError`] instead of panicking.
//! See README.md for an overview and an example.

#![warn(missing_docs)]
// Index loops mirror the math (S[i][j], L[r][c]) and read more clearly than iterator chains.
#![allow(clippy::needless_range_loop)]

pub mod error;
pub mod gemm;
pub mod kda;
pub mod metrics;
pub mod mla;
pub mod mx;
pub mod quantile;
pub mod random;

pub use error::RefError;

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
