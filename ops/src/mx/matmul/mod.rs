//! `mxfp4_matmul` (SEMANTICS.md section 2.2): `y[M, N] = x[M, K] · dequant(w)[N, K]^T` with MXFP4 weights, bf16 activations,
//! f32 accumulation and bf16 output; dense, or grouped over ragged experts (`w: [G, N, K]`, rows of x permuted
//! by expert, `offs` as in SEMANTICS.md section 2.1), with the epilogues of `latent_moe_gemm` (SiTU-GLU / SwiGLU over the two
//! halves of N, routing weight per row).
//!
//! Hopper has no fp4 tensor cores, so the kernel computes the transposed product `y^T = W · x^T` on bf16
//! tensor cores with the weights as the *register* A operand:
//! - a persistent CTA walks (group, m-tile, n-tile, k-split) tiles; per tile a `STAGES`-deep `cp.async`
//!   pipeline streams 16-byte chunks of packed nibbles (`[BN, BK/2]` bytes), their E8M0 scales (`[BN, BK/32]`)
//!   and the x tile (`[BM, BK]` bf16) into shared memory;
//! - for each 32-wide K block, a map decodes the nibbles straight into a bf16 register tile in the mma
//!   A-fragment layout (bit tricks and products with powers of two, exact: E2M1 bits -> f32 bits, times 2^126,
//!   times the scale; one multiply when every scale byte is <= 128), and `mma.sync` multiplies it with x^T
//!   read by `ldmatrix` from shared memory. No dequantized weight ever touches shared or global memory.
//! - the f32 accumulator `[BN, BM]` (weight rows x tokens) is transposed through shared memory into a
//!   `[BM, BN]` tile for the epilogue (GLU, routing weight) and the bf16 store; with `SPLIT > 1` each k-split
//!   writes an f32 partial `[SPLIT, M, N]` instead, and the partials are summed in split order (deterministic)
//!   before the epilogue: by the CTA that arrives last at its tile's counter (`FIN=last`, one launch: partial
//!   stores, a barrier, a fence and an atomic increment with fetch by one thread; the last CTA fences, sums and
//!   resets the counter) or by a second kernel (`FIN=kernel`, and always for wgmma). Decode shapes (few
//!   tokens, N = 6144) need the split to put enough weight streams in flight on every SM.
//! - `PATH=stream` (decode): the weights go global -> registers ([`Stmt::DequantFp4Stream`]), one mma per BK
//!   slice; with `PF=on` the statement is software-pipelined (the next slice's loads are issued right after
//!   this slice's decode and stay in flight during its product and the next iteration's wait).
//! - `PATH=dq_gemm` (prefill, [`super::prefill`]): the weights dequantized once into a bf16 scratch, then the
//!   `latent_moe_gemm` kernel.
//!
//! The weight bytes come in the natural layout or the [`super::pack`] layout (one 32-bit word per eight values
//! a thread needs).
//!
//! Files: this module holds the problem spec ([`MatSpec`]); `knobs.rs` the knob space and the knob readers,
//! `cfg.rs` the concrete configuration ([`Cfg`]), `resolve.rs` how knobs resolve per shape ([`resolve`]),
//! `validate.rs` the checks of a configuration, `kernels/` builds the kernels, `host.rs` is the host API with
//! typed errors and the launch plan, `ops.rs` the operator.

use super::*;
use crate::check::{compare, error_pattern};
use crate::data;
use crate::latent_moe_gemm::{Epilogue, epilogue_of, group_counts};
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::*;
use k3k_reference::gemm as refgemm;
use k3k_reference::metrics::Tolerance;
use k3k_reference::mx as rmx;
use rand::Rng;
use rand::rngs::StdRng;
use rayon::prelude::*;

mod cfg;
mod f8sync;
mod host;
mod kernels;
mod knobs;
mod ops;
mod resolve;
mod validate;

pub use cfg::*;
pub use host::*;
pub use kernels::*;
pub use knobs::*;
pub use ops::*;
pub use resolve::*;
use validate::validate;

const OP: &str = "mxfp4_matmul";

/// SMs assumed when resolving automatic knobs (an H200 has 132).
pub const ASSUMED_SMS: usize = 132;

/// What a kernel variant computes (fixed by the problem and the data, not tuned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatSpec {
    pub grouped: bool,
    pub epilogue: Epilogue,
    /// Multiply each output row by a routing weight `p[r]`.
    pub row_scale: bool,
    /// Weight bytes in the [`super::pack`] layout (u32 words) instead of the natural one.
    pub packed: bool,
    /// Packed words and scales stored tile-major (`WeightBytes::PackedTiles`): PATH=gemv's shared-memory ring only.
    pub tiled: bool,
    /// Every scale byte is <= 128 or 255: one multiply per decoded element (see [`scales_foldable`]).
    pub fold: bool,
    /// No scale byte is 255 (NaN): the NaN select is left out of the decode.
    pub finite: bool,
    /// Activations in MXFP8 (E4M3 bytes + E8M0 scales along K), dequantized on chip into the bf16 x tile.
    pub act8: bool,
    /// Largest power of two <= 16 dividing K/32 (the alignment class of scale rows).
    pub kb_align: u32,
    /// Elements per store of the output (2 when its width is even).
    pub out_vec: u32,
}

impl MatSpec {
    /// The alignment class, part of names and tuning keys.
    pub fn alignment(&self) -> String {
        format!("s{}_o{}", self.kb_align, self.out_vec)
    }
}

/// True when every scale byte is at most 128 or is 255 (NaN), so that `2^126 · 2^(s-127)` is one f32.
pub fn scales_foldable(s: &[u8]) -> bool {
    s.par_iter().all(|&b| b <= 128 || b == 255)
}

fn kernel_name(prefix: &str, spec: &MatSpec, c: &Cfg, partial: bool) -> String {
    format!(
        "k3k_{prefix}_{}{}_{}{}{}{}{}_{}_{}",
        if spec.grouped { "grouped" } else { "dense" },
        if spec.row_scale { "_p" } else { "" },
        spec.epilogue.name(),
        if spec.act8 { "_x8" } else { "" },
        if spec.tiled {
            "_tiles"
        } else if spec.packed {
            "_packed"
        } else {
            ""
        },
        match (spec.fold, spec.finite) {
            (true, true) => "_foldf",
            (true, false) => "_fold",
            _ => "",
        },
        if partial { "_partial" } else { "" },
        spec.alignment(),
        c.knobs().id().to_lowercase()
    )
}

fn bad(arg: &str, why: String) -> OpError {
    OpError::BadInput { op: OP, arg: arg.into(), why }
}
