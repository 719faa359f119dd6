// The model's shapes: a scaled-down Kimi K3 (SPEC 0) that a CPU f64 reference checks in seconds. Shared by
// build.rs (which compiles kernels for them) and the model (which runs them); the head dims are K3's own.

/// Tokens of the prefill batch (one sequence; not a multiple of the KDA chunk on purpose).
pub const TOKENS: usize = 200;
/// Decode steps after the prefill (one token each).
pub const DECODE_STEPS: usize = 3;
/// Residual stream width of the attention block (K3: 7168).
pub const HIDDEN: usize = 512;

/// LatentMoE: latent width l (K3: 3584), expert inner width m (K3: 3072), routed experts E (K3: 896, 28 to 112
/// per GPU under expert parallelism), experts per token k (K3: 16).
pub const LATENT: usize = 1024;
pub const INTER: usize = 512;
pub const EXPERTS: usize = 32;
pub const TOP_K: usize = 4;
/// Histogram bins of the Quantile Balancing step (range [-1, 1) of the margins).
pub const QB_BINS: usize = 1024;

/// Attention heads (KDA q/k/v heads and MLA heads; K3 at TP8: 12) and the KDA head dims (K3: 128).
pub const HEADS: usize = 4;
pub const HEAD_DIM: usize = 128;
/// Gated MLA dims (K3's): latent 512 + 64 rope per cache row, 128 nope + 64 rope per query/key head, 128 value.
pub const MLA_LATENT: usize = 512;
pub const MLA_ROPE: usize = 64;
pub const MLA_NOPE: usize = 128;
pub const MLA_DQK: usize = MLA_NOPE + MLA_ROPE;
pub const MLA_DV: usize = 128;
/// Rows per page of the paged latent cache.
pub const PAGE: usize = 64;

/// The varlen KDA prefill: a batch of sequences of different lengths (the serving-engine case), within these
/// limits the launchers were built for.
pub const VARLEN_LENS: [usize; 6] = [1300, 547, 2048, 963, 271, 3063];
pub const VARLEN_MAX_TOKENS: usize = 16384;
pub const VARLEN_MAX_SEQS: usize = 16;
