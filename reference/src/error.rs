//! The error type shared by every reference entry point, plus small validation helpers.

use thiserror::Error;

/// Why a reference computation refused its inputs (never a panic: every public entry point
/// validates slice lengths and shape arguments and returns one of these instead).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RefError {
    /// A slice length or shape argument does not match what the other shape arguments imply.
    #[error("argument `{arg}`: expected {expected}, got {got}")]
    Shape {
        /// The offending argument's name.
        arg: &'static str,
        /// What was expected (a length or a shape, in words).
        expected: String,
        /// What was passed.
        got: String,
    },
    /// An MX tensor's reduction length K is not a multiple of the 32-element block.
    #[error("argument `{arg}`: K = {k} is not a multiple of 32 (the MX block size)")]
    KNotMultipleOf32 {
        /// The offending argument's name.
        arg: &'static str,
        /// The K that was passed.
        k: usize,
    },
    /// A NaN was found where the operator cannot give it a meaning.
    #[error("argument `{arg}`: NaN at flat index {index}")]
    Nan {
        /// The offending argument's name.
        arg: &'static str,
        /// Flat (row-major) index of the first NaN.
        index: usize,
    },
    /// A gate (log-decay) value lies below the safe-gate lower bound.
    #[error("argument `{arg}`: gate value {value} at flat index {index} is below the lower bound {bound}")]
    GateBelowBound {
        /// The offending argument's name.
        arg: &'static str,
        /// Flat (row-major) index of the first offending value.
        index: usize,
        /// The offending value.
        value: f64,
        /// The lower bound it violates.
        bound: f64,
    },
    /// Any other invalid argument, with the reason in words.
    #[error("argument `{arg}`: {reason}")]
    Invalid {
        /// The offending argument's name.
        arg: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Product of shape dimensions, or `Invalid` on overflow.
pub(crate) fn prod(arg: &'static str, dims: &[usize]) -> Result<usize, RefError> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d).ok_or_else(|| RefError::Invalid { arg, reason: format!("shape {dims:?} overflows usize") })
    })
}

/// Checks `got == product(dims)`; `shape` names the dims for the message (e.g. "[B, T, H, K]").
pub(crate) fn check_len(arg: &'static str, got: usize, shape: &str, dims: &[usize]) -> Result<usize, RefError> {
    let want = prod(arg, dims)?;
    if got != want {
        return Err(RefError::Shape {
            arg,
            expected: format!("{want} elements ({shape} = {dims:?})"),
            got: format!("{got} elements"),
        });
    }
    Ok(want)
}

/// Returns `Nan` for the first NaN in `x`.
pub(crate) fn check_no_nan<T: Copy + Into<f64>>(arg: &'static str, x: &[T]) -> Result<(), RefError> {
    match x.iter().position(|&v| v.into().is_nan()) {
        Some(index) => Err(RefError::Nan { arg, index }),
        None => Ok(()),
    }
}

/// Returns `Invalid` with `reason` unless `cond` holds.
pub(crate) fn ensure(cond: bool, arg: &'static str, reason: impl FnOnce() -> String) -> Result<(), RefError> {
    if cond { Ok(()) } else { Err(RefError::Invalid { arg, reason: reason() }) }
}
