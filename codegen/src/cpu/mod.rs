//! CPU execution of IR kernels: the interpreter (reference semantics) and a Cranelift JIT of the same IR.
pub(crate) mod cluster;
mod e4m3_words;
pub mod interp;
pub mod jit;
