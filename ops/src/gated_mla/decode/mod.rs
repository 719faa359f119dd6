//! The decode kernels of [`crate::gated_mla`]: the split-KV absorbed decode over the paged latent cache
//! ([`build_decode`], [`build_decode_direct`]; the mma.sync kernel in `sync`, the wgmma kernel in [`wgmma`]), the
//! split count ([`decode_num_splits`]) and the log-sum-exp merge of the splits ([`build_decode_combine`], in
//! `combine`). The knob space and knob sets are in `knobs`, the resolved configuration and occupancy in `cfg`,
//! the paged KV ring both kernels stream through in `ring`.

use super::*;

mod cfg;
mod combine;
mod knobs;
mod ring;
mod sync;
mod wgmma;

pub use cfg::*;
pub use combine::*;
pub use knobs::*;
use ring::*;
pub use sync::*;
use wgmma::build_decode_wgmma;

/// What a decode kernel variant computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DecodeSpec {
    /// Query / cache row width (576 = 512 latent + 64 rope for K3).
    pub d: u32,
    /// Value width: the first `dv` columns of each cache row (512).
    pub dv: u32,
    /// Rows per cache page (64, as FlashMLA).
    pub page: u32,
}

impl Default for DecodeSpec {
    fn default() -> Self {
        DecodeSpec { d: 576, dv: 512, page: 64 }
    }
}

/// The split count the decode kernel should use for `batch` requests of `m_tiles` m-tiles each whose longest
/// request has `max_seqlen_k` keys, on a GPU with `num_sms` multiprocessors that each hold `blocks_per_sm`
/// decode blocks at once ([`decode_blocks_per_sm`]): the count minimising `waves * (tiles per split + 2)`
/// (waves of `num_sms * blocks_per_sm` blocks; the 2 standing for a split's prologue, epilogue and share of
/// the combine, in 64-key tiles), with at least two KV tiles of `bn` keys per split and at most 64 splits.
/// A split count that leaves block slots empty costs as much as a full wave: one block per slot is what keeps
/// enough loads in flight.
pub fn decode_num_splits(
    batch: usize,
    m_tiles: usize,
    max_seqlen_k: usize,
    num_sms: usize,
    blocks_per_sm: usize,
    bn: usize,
) -> usize {
    let blocks = (batch * m_tiles).max(1);
    let slots = num_sms.max(1) * blocks_per_sm.max(1);
    let bn = bn.max(1);
    let tiles = max_seqlen_k.div_ceil(bn);
    let cap = (tiles / 2).clamp(1, 64);
    let overhead = 2 * 64usize.div_ceil(bn);
    let cost = |s: usize| (blocks * s).div_ceil(slots) * (tiles.div_ceil(s) + overhead);
    (1..=cap).min_by_key(|&s| cost(s)).unwrap_or(1)
}
