//! [`Stmt::Fp4Gemv`], the MXFP4 decode GEMV: an operator-specific statement (the decode step of
//! `mxfp4_matmul` PATH=gemv), kept in an extension module at every stage so that adding or removing it touches
//! few shared files. This module: its semantics, its fields ([`Fp4Gemv`]), its ring types and its builder. The other stages:
//! `validate/stmts/mx/fp4_gemv.rs`, `print/mx/fp4_gemv.rs`, and in `k3k-codegen` `cuda/render/mx/fp4_gemv.rs`
//! (with the device primitive `prelude/tiles/fp4_gemv.cuh`), `cpu/interp/mx/fp4_gemv.rs`,
//! `cpu/jit/rt/mx/fp4_gemv.rs` and `cpu/jit/lower/stmts/mx/fp4_gemv.rs`.
//!
//! The product of streamed MXFP4 weights with a few bf16 activation rows, into shared memory:
//! `out[r, t] = sum_c w[r, c] * x[t, c]` over the valid 32-column blocks of the weights (f32 sums of exact
//! products), with `w` decoded as [`Stmt::DequantFp4Stream`] decodes it (same `words` / `scales` views,
//! `packed`, `fold`, `finite` and validity rules: row `r` valid when below both views' `rows`, block `b`
//! valid when below `words.cols / 4` and `scales.cols`; invalid blocks contribute nothing) and `x` a bf16 view
//! `[T, K]` (`vec` 8, read in whole 8-column groups) whose element `[t, c]` is 0 when its group's end
//! `8 (c / 8) + 8` is past `x.cols`. `out` is an f32 window `[R, T]`
//! (R a multiple of 16, T 8 or 16); `out[r, t]` is 0 when row `r` is invalid or `t` is not below `x.rows`.
//!
//! The GPU code splits the blocks over the block's warps in quads of four 32-column blocks: warp `w` takes
//! the batches `w, w + warps, ...` of `chunk` consecutive quads; in a quad, lane `l % 4` of a lane quad loads
//! the whole 16-byte block `4 quad + l` of its rows, so every load is 16 bytes, and multiplies them on
//! `mma.m16n8k16` with the activations of the same columns (the sum over K is taken in a lane-specific column
//! order, the same for both operands). A warp streams its quads through a ring of `ring` register slots (one
//! quad each): `ring` quads are in flight before the first is used, and each consumed slot is refilled with the
//! quad `ring` steps ahead. The warps' f32 partials are then reduced through `scratch` (an f32 buffer of at
//! least `R x T` elements per tile and a tile per warp; its contents afterwards are unspecified) in warp order,
//! between two block barriers. `chunk` (1, 2, 4 or 8) and `ring` (1..=8) are schedule only: the value does not
//! depend on them.
//!
//! With `staged` (schedule only too), the ring is `ring` stages of shared memory instead of registers: the full
//! quads are copied by `cp.async` (each lane its own blocks and scale words) into per-warp stages of `scratch`,
//! `ring - 1` quads in flight while one is multiplied (the copies are waited for in
//! commit order, so every stage stays in flight; a register ring's loads share the six hardware scoreboards).
//! `scratch` then needs [`Fp4Staging::scratch_bytes`] bytes in all, whatever its tiles' shape: `16 + warps x
//! ring x R / 16 x` the stage bytes of 16 rows (1088 with tiled words and per-lane copies: 1 KB of words and the
//! 64 scale bytes of the block; else 1280: 32 per-lane scale words per 8 rows), and each warp's partials take
//! the start of its own ring once it has drained.
//! `l2_prefetch` (staged only; 0, 64, 128 or 256, schedule only): the L2 prefetch size the copies ask for
//! (`cp.async`'s `.L2::<n>B`: L2 fetches the aligned `n` bytes around each copy from DRAM, which the warp's
//! and its block's next quads of the same rows read soon after); 0 asks for nothing.
//! `tiled` (staged and packed only): `words` and `scales` are stored tile-major ([`crate::fp4::tile_major`]:
//! each 16-row block's quad contiguous, 1 KB of words and 64 bytes of scales); a view's offset is then the
//! stored place of its first element, and its element `(r, c)` lies `tile_major(r x stride + c)` past it (for a
//! view at column 0 that is the row-major offset; a view from K > 0, a stream-K segment's, starts at the
//! stored place of its first quad). The program promises that the views start on a 16-row boundary and a whole
//! quad of tensors whose row strides are multiples of 16 words and 4 bytes, that every row of each `out` tile is valid,
//! that the scale rows hold whole quads, and that `out` has 8 columns (the GPU code reads tiled data only
//! through the shared-memory ring's fast form, and traps otherwise).
//! `bulk` (tiled only, without `l2_prefetch`; schedule only): one lane per warp copies each 16-row block of a
//! quad whole (1 KB of words, 64 bytes of scales) by `cp.async.bulk`, completing on a barrier in the stage,
//! instead of every lane copying its own 16-byte blocks and scale words by `cp.async`. The words' and scales'
//! views must then start 16-byte aligned (tile-major rows of whole quads do, from a 16-byte aligned tensor).
//! `x_two_ahead` (staged 8-token tiles only; schedule only): each warp loads a quad's activations into
//! registers two quads ahead of their product instead of one (a second register set live across each product,
//! which then hides the activations' L2 latency).

use crate::builder::KernelBuilder;
use crate::expr::SharedId;
use crate::kernel::{GlobalView, SharedRef, Stmt, is_zero};
use crate::mx::Fp4Flags;
use serde::{Deserialize, Serialize};

/// The fields of a [`Stmt::Fp4Gemv`] (described in this module), in one struct so that a backend reads the fields it
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

/// The shared-memory ring of a staged [`Stmt::Fp4Gemv`]: its stages per warp, the L2 prefetch size of its
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

/// Where [`crate::KernelBuilder::fp4_gemv`] keeps its ring of quads (see [`Stmt::Fp4Gemv`]).
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

    /// The shared memory a staged [`Stmt::Fp4Gemv`] of `warps` warps and `rows` tile rows needs in its `scratch`,
    /// bytes: the warps' rings from the buffer's first 16-byte boundary (the partials alias them).
    pub fn scratch_bytes(&self, warps: u32, rows: u32) -> u64 {
        16 + warps as u64 * self.stages as u64 * (rows as u64 / 16).max(1) * self.stage_bytes_per_16_rows()
    }
}

impl KernelBuilder {
    /// Streamed MXFP4 weights times a few bf16 activation rows into shared memory, split over the block's warps
    /// (see [`Stmt::Fp4Gemv`]), its ring in registers or in shared memory stages of `scratch` ([`Fp4Ring`]).
    #[allow(clippy::too_many_arguments)]
    pub fn fp4_gemv(
        &mut self,
        out: SharedRef,
        scratch: SharedId,
        words: GlobalView,
        scales: GlobalView,
        x: GlobalView,
        flags: Fp4Flags,
        chunk: u32,
        ring: Fp4Ring,
    ) {
        let Fp4Flags { packed, fold, finite } = flags;
        let (staged, Fp4Staging { stages: ring, l2_prefetch, tiled, bulk, x_two_ahead }) = match ring {
            Fp4Ring::Registers(stages) => {
                (false, Fp4Staging { stages, l2_prefetch: 0, tiled: false, bulk: false, x_two_ahead: false })
            }
            Fp4Ring::Shared(staging) => (true, staging),
        };
        self.push(Stmt::Fp4Gemv(Box::new(Fp4Gemv {
            out,
            scratch,
            words,
            scales,
            x,
            packed,
            fold,
            finite,
            chunk,
            ring,
            staged,
            l2_prefetch,
            tiled,
            bulk,
            x_two_ahead,
        })));
    }
}
