// The model's shapes: one GPU's share of Kimi K3 (docs/SEMANTICS.md section 0) at tensor parallelism 8
// and expert parallelism 32. Shared by build.rs (which compiles kernels for them) and the model (which runs
// them), so both sides agree.

/// Residual stream width.
pub const HIDDEN: usize = 7168;
/// Attention heads on this GPU (K3: 96 KDA and 96 MLA heads, 12 per GPU at TP8).
pub const HEADS: usize = 12;
/// KDA head dims (q/k and v).
pub const HEAD_DIM: usize = 128;
/// KDA layers before the MLA layer (K3 interleaves 3 KDA : 1 MLA).
pub const KDA_LAYERS: usize = 3;
/// The safe-gate lower bound of K3's KDA gate `lb * sigmoid(x + bias)`.
pub const KDA_LB: f32 = -5.0;

/// Gated MLA: query low rank 1536, latent 512 + 64 rope per cache row, 128 nope + 64 rope per query/key head,
/// 128 value.
pub const MLA_Q_RANK: usize = 1536;
pub const MLA_LATENT: usize = 512;
pub const MLA_ROPE: usize = 64;
pub const MLA_NOPE: usize = 128;
pub const MLA_DQK: usize = MLA_NOPE + MLA_ROPE;
pub const MLA_DV: usize = 128;
/// One cache row: the latent and the rope key.
pub const MLA_ROW: usize = MLA_LATENT + MLA_ROPE;
/// Rows per page of the paged latent cache.
pub const PAGE: usize = 64;

/// LatentMoE: latent width l, expert inner width m, this GPU's routed experts (896 over 32 GPUs), and the
/// experts each token is routed to among them. K3 routes every token to 16 of 896; under expert parallelism
/// that is one or two per GPU on average. The example gives this GPU the whole batch and routes every token
/// to 4 of its 28 experts, so that each expert sees about a thousand prefill rows, as the G28 mean-1024 preset.
pub const LATENT: usize = 3584;
pub const INTER: usize = 3072;
pub const EXPERTS: usize = 28;
pub const TOP_K: usize = 4;
/// Histogram bins of the Quantile Balancing step (range [-1, 1) of the margins).
pub const QB_BINS: usize = 1024;

/// The prefill batch: sequences of different lengths, as a serving engine batches them (8192 tokens).
pub const PREFILL_LENS: [usize; 6] = [1300, 547, 2048, 963, 271, 3063];
/// Tokens in the prefill batch (the sum of `PREFILL_LENS`).
pub const PREFILL_TOKENS: usize = 8192;
/// Decode steps after the prefill: each step adds one token to every sequence.
pub const DECODE_STEPS: usize = 32;
/// Sequences decoded together (every prefilled sequence).
pub const DECODE_BATCH: usize = PREFILL_LENS.len();
/// The longest sequence the paged cache holds (the longest prefill plus the decode steps, rounded to pages).
pub const MAX_SEQ: usize = 3072 + 64;

/// The limits the varlen KDA launchers are built for (the workspace is sized from them).
pub const VARLEN_MAX_TOKENS: usize = 16384;
pub const VARLEN_MAX_SEQS: usize = 16;
