//! Errors of the results store.

use crate::key::GpuKey;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file could not be read as a results file. When it was inside a store it has been renamed
    /// aside (never deleted, never overwritten); the next write starts a fresh file.
    #[error(
        "results file {} is corrupt: {reason}; {}",
        path.display(),
        match moved_to {
            Some(m) => format!("it was moved aside to {} (inspect or delete it; re-run tuning with --resume to rebuild)", m.display()),
            None => "it was left in place".to_string(),
        }
    )]
    Corrupt { path: PathBuf, reason: String, moved_to: Option<PathBuf> },

    /// Written by a newer k3k. Left untouched: an older binary must not move a newer one's results.
    #[error(
        "results file {} has schema version {found}, but this build of k3k reads schema {supported}; \
         use a newer k3k (the file was left untouched)",
        path.display()
    )]
    UnsupportedSchema { path: PathBuf, found: u64, supported: u32 },

    /// The file to replace is read-only (no owner write bit): it is left as it is.
    #[error("results file {} is read-only; it was not replaced (make it writable, or write elsewhere)", path.display())]
    ReadOnly { path: PathBuf },

    #[error("results for GPU {found} cannot go into the results of GPU {expected}")]
    GpuMismatch { expected: GpuKey, found: GpuKey },

    #[error("results of op `{found}` cannot go into the results of op `{expected}`")]
    OpMismatch { expected: String, found: String },

    #[error("invalid {what} `{value}`: use letters, digits, `_`, `-` and `.` (not first)")]
    InvalidName { what: &'static str, value: String },

    /// A results file that breaks the schema's invariants was about to be written.
    #[error("refusing to write invalid results: {}", problems.join("; "))]
    Invalid { problems: Vec<String> },

    #[error("cannot merge candidate `{id}` of {key}: {reason}")]
    Conflict { key: String, id: String, reason: String },

    #[error("no results files to merge")]
    NothingToMerge,

    #[error("no candidate `{id}` recorded for {key}")]
    UnknownCandidate { key: String, id: String },
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io { path: path.into(), source }
    }
}
