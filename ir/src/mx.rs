//! The parts of the MXFP4 statements ([`crate::Stmt::DequantFp4`], [`crate::Stmt::DequantFp4Stream`],
//! [`crate::Stmt::Fp4Gemv`]): the fused GEMV's fields, the weights' layout and scale promises, the GEMV's ring and
//! the stream's prefetch views.

use crate::expr::{Expr, SharedId};
use crate::kernel::{GlobalView, SharedRef, is_zero};
use serde::{Deserialize, Serialize};

/// The fields of a [`crate::Stmt::Fp4Gemv`] (described there), in one struct so that a backend reads the fields it
/// needs (`g.out`, `g.staged`) instead of naming all fifteen; serialized as the statement's own fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fp4Gemv {
    pub out: SharedRef,
    pub scratch: SharedId,
    pub words: GlobalView,
    pub scales: GlobalView,
    pub x: GlobalView,
    pub packed: bool,
    pub fold: bool,
    pub finite: bool,
    pub chunk: u32,
    pub ring: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub staged: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub l2_prefetch: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tiled: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bulk: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub x_two_ahead: bool,
}

impl Fp4Gemv {
    /// The layout and scale promises of the weights.
    pub fn flags(&self) -> Fp4Flags {
        Fp4Flags { packed: self.packed, fold: self.fold, finite: self.finite }
    }

    /// The ring as [`crate::KernelBuilder::fp4_gemv`] takes it: `ring` register stages, or (`staged`) stages in
    /// shared memory with their L2 prefetch and layout.
    pub fn ring(&self) -> Fp4Ring {
        if self.staged {
            Fp4Ring::Shared(Fp4Staging {
                stages: self.ring,
                l2_prefetch: self.l2_prefetch,
                tiled: self.tiled,
                bulk: self.bulk,
                x_two_ahead: self.x_two_ahead,
            })
        } else {
            Fp4Ring::Registers(self.ring)
        }
    }
}

/// The weight layout and scale promises of an MXFP4 statement (see [`crate::Stmt::DequantFp4`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp4Flags {
    pub packed: bool,
    pub fold: bool,
    pub finite: bool,
}

/// The shared-memory ring of a staged [`crate::Stmt::Fp4Gemv`]: its stages per warp, the L2 prefetch size of its
/// copies, whether the words and scales are tile-major, whether they are copied in whole blocks (`bulk`), and
/// whether the activations are loaded two quads ahead (`x_two_ahead`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp4Staging {
    pub stages: u32,
    pub l2_prefetch: u32,
    pub tiled: bool,
    pub bulk: bool,
    pub x_two_ahead: bool,
}

/// Where [`crate::KernelBuilder::fp4_gemv`] keeps its ring of quads (see [`crate::Stmt::Fp4Gemv`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp4Ring {
    /// That many register stages per warp.
    Registers(u32),
    /// Stages in shared memory (`staged`), with their L2 prefetch and layout.
    Shared(Fp4Staging),
}

impl Fp4Staging {
    /// Bytes of one warp's stage per 16 rows of the tile: 1 KB of words, then the scales, 64 bytes copied whole
    /// with tiled words and per-lane copies, else 32 per-lane 4-byte words per 8 rows (the bulk ring's barrier
    /// sits past its 64 bytes).
    pub fn stage_bytes_per_16_rows(&self) -> u64 {
        if self.tiled && !self.bulk { 1088 } else { 1280 }
    }

    /// The shared memory a staged [`crate::Stmt::Fp4Gemv`] of `warps` warps and `rows` tile rows needs in its
    /// `scratch`, bytes: the warps' rings from the buffer's first 16-byte boundary (the partials alias them).
    pub fn scratch_bytes(&self, warps: u32, rows: u32) -> u64 {
        16 + warps as u64 * self.stages as u64 * (rows as u64 / 16).max(1) * self.stage_bytes_per_16_rows()
    }
}

/// The next views of a prefetching [`crate::Stmt::DequantFp4Stream`]: words and scales as the statement's own, and
/// `first` (a block-uniform bool): the statement loads its own views itself (the pipeline's first slice).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fp4Prefetch {
    pub words: GlobalView,
    pub scales: GlobalView,
    pub first: Expr,
}
