//! CPU execution of IR kernels: the interpreter (reference semantics) and a Cranelift JIT of the same IR.
pub mod interp;
pub mod jit;
