//! placeholder
pub mod error;
pub mod key;
pub mod lookup;
pub mod merge;
pub mod record;
pub mod stats;
pub mod store;
