//! CPU execution of IR kernels: the interpreter (reference semantics) and a Cranelift JIT of the same IR.
pub(crate) mod cluster;
mod e4m3_words;
pub mod interp;
pub mod jit;

use k3k_ir::Stmt;

/// The statements that have nothing to do where blocks, threads and launches run one after another, as on both
/// CPU backends: copies and tensor-core products complete when issued, so their commits and waits are empty; a
/// barrier or a fence orders nothing more; a grid dependency has no grid running beside it.
pub(crate) fn sequential_noop(s: &Stmt) -> bool {
    matches!(
        s,
        Stmt::Barrier
            | Stmt::AsyncCommit
            | Stmt::AsyncWait { .. }
            | Stmt::MmaWait { .. }
            | Stmt::Fence
            | Stmt::GridDep(_)
    )
}
