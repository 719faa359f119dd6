//! CPU execution of IR kernels.
pub mod interp;
