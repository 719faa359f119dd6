//! A stable content hash of a kernel: sha256 of its printed form, so it does not depend on Rust's hasher,
//! struct layout or serde details, only on what the program computes and how it is shaped.

use crate::kernel::Kernel;
use sha2::{Digest, Sha256};

/// The first 16 hex digits of sha256 over the printed kernel.
pub fn stable_hash(k: &Kernel) -> String {
    hash_str(&crate::print::kernel(k))
}

/// The first 16 hex digits of sha256 of a string.
pub fn hash_str(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}
