//! The engine's own kernels: what a model runs between k3k's launches and k3k does not provide (residual adds,
//! dtype casts, the top-k routing and its permutation, the combine of the routed rows, the paged-cache append,
//! the head re-layouts of absorbed MLA decode). They are CUDA C compiled once with the NVRTC k3k uses
//! (`rt::compile_cuda`) and launched with cudarc on the model's stream, in between k3k's launches and inside
//! the same CUDA graph.
//!
//! Every kernel reads and writes only the buffers it is given, allocates nothing, and is deterministic (the
//! routing permutation orders each expert's rows by token), so a replayed graph gives the eager step's bits.

use crate::config::*;
use crate::dev::Buf;
use crate::host::Res;
use k3k_build::rt;
use k3k_build::rt::cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use k3k_build::rt::cudarc::nvrtc::Ptx;
use std::sync::Arc;

const SRC: &str = r#"
typedef unsigned short bf16;
__device__ __forceinline__ float bf(bf16 h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ bf16 tobf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}
#define FOR(i, n) for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)

// out = a + b (bf16, rounded once).
extern "C" __global__ void add_bf16(const bf16* a, const bf16* b, bf16* out, long n) { FOR(i, n) out[i] = tobf(bf(a[i]) + bf(b[i])); }
// y = float(x).
extern "C" __global__ void cast_bf16_f32(const bf16* x, float* y, long n) { FOR(i, n) y[i] = bf(x[i]); }
// s = sigmoid(x), f32.
extern "C" __global__ void sigmoid_bf16_f32(const bf16* x, float* y, long n) { FOR(i, n) y[i] = 1.0f / (1.0f + expf(-bf(x[i]))); }

// k [T, H, 192] = per head [k_nope (128) | k_rope (64, shared by the heads)].
extern "C" __global__ void concat_rope(const bf16* kn, const bf16* kr, bf16* k, int T, int H) {
    FOR(i, (long)T * H * 192) {
        long t = i / (H * 192); int h = (i / 192) % H; int c = i % 192;
        k[i] = c < 128 ? kn[(t * H + h) * 128 + c] : kr[t * 64 + (c - 128)];
    }
}

// Top-K experts of each token by s + bias (ties to the lower index); weights s / (sum of the chosen s).
extern "C" __global__ void route_topk(const float* s, const float* bias, int T, int E, int K, int* choice, float* w) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float* row = s + (long)t * E;
    int chosen[16];
    float sum = 0.0f;
    for (int j = 0; j < K; j++) {
        int best = -1; float bv = 0.0f;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= chosen[i] == e;
            float v = row[e] + bias[e];
            if (!taken && (best < 0 || v > bv)) { best = e; bv = v; }
        }
        chosen[j] = best;
        sum += row[best];
    }
    for (int j = 0; j < K; j++) { choice[t * K + j] = chosen[j]; w[t * K + j] = row[chosen[j]] / sum; }
}

// offs[e] = inclusive end of expert e's rows (one block).
extern "C" __global__ void group_offsets(const int* choice, int R, int E, int* offs) {
    __shared__ int cnt[1024];
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < R; i += blockDim.x) atomicAdd(&cnt[choice[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) { int a = 0; for (int e = 0; e < E; e++) { a += cnt[e]; offs[e] = a; } }
}

// Block e places expert e's rows in token order: row_of[choice index] = row, tok_of[row] = token, p[row] = weight.
extern "C" __global__ void group_place(const int* choice, const float* w, int R, int K, const int* offs,
                                       int* row_of, int* tok_of, float* p) {
    __shared__ int wsum[32];
    int e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int start = e == 0 ? 0 : offs[e - 1];
    int run = 0;
    for (int b0 = 0; b0 < R; b0 += blockDim.x) {
        int i = b0 + threadIdx.x;
        bool m = i < R && choice[i] == e;
        unsigned bal = __ballot_sync(0xffffffffu, m);
        if (lane == 0) wsum[warp] = __popc(bal);
        __syncthreads();
        int before = 0, total = 0;
        for (int j = 0; j < nw; j++) { int c = wsum[j]; if (j < warp) before += c; total += c; }
        if (m) {
            int pos = start + run + before + __popc(bal & ((1u << lane) - 1u));
            row_of[i] = pos; tok_of[pos] = i / K; p[pos] = w[i];
        }
        run += total;
        __syncthreads();
    }
}

// xp[r] = x[tok_of[r]] (rows of L bf16).
extern "C" __global__ void gather_rows(const bf16* x, const int* tok_of, bf16* xp, int R, int L) {
    FOR(i, (long)R * L) xp[i] = x[(long)tok_of[i / L] * L + i % L];
}

// out[t] = sum over the token's K routed rows of y (f32 sum in choice order, rounded once).
extern "C" __global__ void combine_rows(const bf16* y, const int* row_of, bf16* out, int T, int K, int L) {
    FOR(i, (long)T * L) {
        long t = i / L; int c = i % L; float a = 0.0f;
        for (int j = 0; j < K; j++) a += bf(y[(long)row_of[t * K + j] * L + c]);
        out[i] = tobf(a);
    }
}

// Paged cache rows [latent (512) | rope (64)] of R tokens: token r is at position pos_of[r] of sequence seq_of[r].
extern "C" __global__ void cache_put(const bf16* c, const bf16* kr, bf16* cache, const int* table, int maxb,
                                     const int* seq_of, const int* pos_of, int R) {
    for (int r = blockIdx.x; r < R; r += gridDim.x) {
        int b = seq_of[r], pos = pos_of[r];
        long row = (long)table[b * maxb + pos / 64] * 64 + pos % 64;
        for (int j = threadIdx.x; j < 576; j += blockDim.x)
            cache[row * 576 + j] = j < 512 ? c[(long)r * 512 + j] : kr[(long)r * 64 + (j - 512)];
    }
}

// Decode: sequence b's new token goes to position seqlens[b], then seqlens[b] += 1 (one block per sequence).
extern "C" __global__ void cache_append(const bf16* c, const bf16* kr, bf16* cache, const int* table, int maxb,
                                        int* seqlens) {
    int b = blockIdx.x;
    int pos = seqlens[b];
    long row = (long)table[b * maxb + pos / 64] * 64 + pos % 64;
    for (int j = threadIdx.x; j < 576; j += blockDim.x)
        cache[row * 576 + j] = j < 512 ? c[(long)b * 512 + j] : kr[(long)b * 64 + (j - 512)];
    __syncthreads();
    if (threadIdx.x == 0) seqlens[b] = pos + 1;
}

// Absorbed decode: q_nope [H, B, 128] from q [B, H, 192] (one group of rows per head).
extern "C" __global__ void split_qnope(const bf16* q, bf16* qn, int B, int H) {
    FOR(i, (long)H * B * 128) {
        int h = i / (B * 128), b = (i / 128) % B, c = i % 128;
        qn[i] = q[((long)b * H + h) * 192 + c];
    }
}

// qd [B, H, 576] = per head [q_nope W_UK (512, from ql [H, B, 512]) | q_rope (64)].
extern "C" __global__ void assemble_qd(const bf16* ql, const bf16* q, bf16* qd, int B, int H) {
    FOR(i, (long)B * H * 576) {
        int b = i / (H * 576), h = (i / 576) % H, c = i % 576;
        qd[i] = c < 512 ? ql[((long)h * B + b) * 512 + c] : q[((long)b * H + h) * 192 + 128 + (c - 512)];
    }
}
"#;

const NAMES: [&str; 13] = [
    "add_bf16",
    "cast_bf16_f32",
    "sigmoid_bf16_f32",
    "concat_rope",
    "route_topk",
    "group_offsets",
    "group_place",
    "gather_rows",
    "combine_rows",
    "cache_put",
    "cache_append",
    "split_qnope",
    "assemble_qd",
];

/// The engine's kernels, loaded in the model's context.
pub struct Engine {
    f: Vec<CudaFunction>,
}

fn grid(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 4096) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn blocks(b: usize, threads: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (b as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

fn n_of(b: &Buf) -> i64 {
    b.shape.iter().product::<usize>() as i64
}

impl Engine {
    /// Compile (NVRTC) and load the kernels in the stream's context.
    pub fn load(s: &Arc<CudaStream>) -> Res<Engine> {
        let ptx = rt::compile_cuda("k3k-model engine kernels", SRC)?;
        let module = s.context().load_module(Ptx::from_src(ptx))?;
        let f = NAMES.iter().map(|n| module.load_function(n)).collect::<Result<Vec<_>, _>>()?;
        Ok(Engine { f })
    }

    fn go(&self, s: &Arc<CudaStream>, i: usize, cfg: LaunchConfig, args: &[A]) -> Res<()> {
        let mut b = s.launch_builder(&self.f[i]);
        for a in args {
            match a {
                A::P(p) => b.arg(p),
                A::I(x) => b.arg(x),
                A::L(x) => b.arg(x),
            };
        }
        // SAFETY: every argument matches the kernel's parameter list above (pointers as u64 device addresses
        // of buffers of the stream's context, sized by the callers' shapes).
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// `out = a + b` (the residual add).
    pub fn add(&self, s: &Arc<CudaStream>, a: &Buf, b: &Buf, out: &mut Buf) -> Res<()> {
        let n = n_of(out);
        self.go(s, 0, grid(n as usize), &[A::P(a.ptr(s)), A::P(b.ptr(s)), A::P(out.ptr(s)), A::L(n)])
    }

    /// `y = f32(x)`.
    pub fn cast(&self, s: &Arc<CudaStream>, x: &Buf, y: &mut Buf) -> Res<()> {
        let n = n_of(x);
        self.go(s, 1, grid(n as usize), &[A::P(x.ptr(s)), A::P(y.ptr(s)), A::L(n)])
    }

    /// `y = sigmoid(x)` as f32.
    pub fn sigmoid(&self, s: &Arc<CudaStream>, x: &Buf, y: &mut Buf) -> Res<()> {
        let n = n_of(x);
        self.go(s, 2, grid(n as usize), &[A::P(x.ptr(s)), A::P(y.ptr(s)), A::L(n)])
    }

    /// `k [T, H, 192]` from `kn [T, H*128]` and `kr [T, 64]`.
    pub fn concat_rope(&self, s: &Arc<CudaStream>, kn: &Buf, kr: &Buf, k: &mut Buf) -> Res<()> {
        let t = kn.shape[0];
        self.go(
            s,
            3,
            grid(t * HEADS * MLA_DQK),
            &[A::P(kn.ptr(s)), A::P(kr.ptr(s)), A::P(k.ptr(s)), A::I(t as i32), A::I(HEADS as i32)],
        )
    }

    /// Top-k experts of every token by `r.s` (`[T, E]` scores) plus the bias (`[E]` f32 at device address
    /// `bias`), and their weights.
    pub fn route_topk(&self, s: &Arc<CudaStream>, bias: u64, r: &mut Routing) -> Res<()> {
        let t = r.s.shape[0];
        let (e, k) = (EXPERTS as i32, TOP_K as i32);
        self.go(
            s,
            4,
            grid(t),
            &[A::P(r.s.ptr(s)), A::P(bias), A::I(t as i32), A::I(e), A::I(k), A::P(r.choice.ptr(s)), A::P(r.w.ptr(s))],
        )
    }

    /// The group ends of the chosen experts.
    pub fn group_offsets(&self, s: &Arc<CudaStream>, r: &mut Routing) -> Res<()> {
        let rows = r.row_of.shape[0] as i32;
        self.go(s, 5, blocks(1, 1024), &[A::P(r.choice.ptr(s)), A::I(rows), A::I(EXPERTS as i32), A::P(r.offs.ptr(s))])
    }

    /// The permutation (each expert's rows in token order) and the rows' routing weights.
    pub fn group_place(&self, s: &Arc<CudaStream>, r: &mut Routing) -> Res<()> {
        let rows = r.row_of.shape[0] as i32;
        self.go(
            s,
            6,
            blocks(EXPERTS, 256),
            &[
                A::P(r.choice.ptr(s)),
                A::P(r.w.ptr(s)),
                A::I(rows),
                A::I(TOP_K as i32),
                A::P(r.offs.ptr(s)),
                A::P(r.row_of.ptr(s)),
                A::P(r.tok_of.ptr(s)),
                A::P(r.p.ptr(s)),
            ],
        )
    }

    /// The permuted rows `r.xp` of `x [T, L]`.
    pub fn gather(&self, s: &Arc<CudaStream>, x: &Buf, r: &mut Routing) -> Res<()> {
        let (rows, l) = (r.row_of.shape[0], x.shape[1]);
        self.go(
            s,
            7,
            grid(rows * l),
            &[A::P(x.ptr(s)), A::P(r.tok_of.ptr(s)), A::P(r.xp.ptr(s)), A::I(rows as i32), A::I(l as i32)],
        )
    }

    /// `out [T, L]`: each token's routed rows of `y [T*k, L]` summed.
    pub fn combine(&self, s: &Arc<CudaStream>, y: &Buf, r: &Routing, out: &mut Buf) -> Res<()> {
        let (t, l) = (out.shape[0], out.shape[1]);
        self.go(
            s,
            8,
            grid(t * l),
            &[
                A::P(y.ptr(s)),
                A::P(r.row_of.ptr(s)),
                A::P(out.ptr(s)),
                A::I(t as i32),
                A::I(TOP_K as i32),
                A::I(l as i32),
            ],
        )
    }

    /// Write the cache rows of `c` (latents) and `kr` (rope keys) of the prefill tokens.
    pub fn cache_put(
        &self,
        s: &Arc<CudaStream>,
        c: &Buf,
        kr: &Buf,
        cache: &mut Cache,
        seq_of: &Buf,
        pos_of: &Buf,
    ) -> Res<()> {
        let r = c.shape[0];
        let maxb = cache.table.shape[1] as i32;
        self.go(
            s,
            9,
            blocks(r.min(65535), 256),
            &[
                A::P(c.ptr(s)),
                A::P(kr.ptr(s)),
                A::P(cache.kv.ptr(s)),
                A::P(cache.table.ptr(s)),
                A::I(maxb),
                A::P(seq_of.ptr(s)),
                A::P(pos_of.ptr(s)),
                A::I(r as i32),
            ],
        )
    }

    /// Decode: append every sequence's new row and advance its length (on the device).
    pub fn cache_append(&self, s: &Arc<CudaStream>, c: &Buf, kr: &Buf, cache: &mut Cache) -> Res<()> {
        let b = c.shape[0];
        let maxb = cache.table.shape[1] as i32;
        self.go(
            s,
            10,
            blocks(b, 192),
            &[
                A::P(c.ptr(s)),
                A::P(kr.ptr(s)),
                A::P(cache.kv.ptr(s)),
                A::P(cache.table.ptr(s)),
                A::I(maxb),
                A::P(cache.lens.ptr(s)),
            ],
        )
    }

    /// `qn [H, B, 128]` from `q [B, H*192]`.
    pub fn split_qnope(&self, s: &Arc<CudaStream>, q: &Buf, qn: &mut Buf) -> Res<()> {
        let b = q.shape[0];
        self.go(
            s,
            11,
            grid(HEADS * b * MLA_NOPE),
            &[A::P(q.ptr(s)), A::P(qn.ptr(s)), A::I(b as i32), A::I(HEADS as i32)],
        )
    }

    /// `qd [B, H, 576]` from `ql [H*B, 512]` and the rope part of `q [B, H*192]`.
    pub fn assemble_qd(&self, s: &Arc<CudaStream>, ql: &Buf, q: &Buf, qd: &mut Buf) -> Res<()> {
        let b = q.shape[0];
        self.go(
            s,
            12,
            grid(b * HEADS * MLA_ROW),
            &[A::P(ql.ptr(s)), A::P(q.ptr(s)), A::P(qd.ptr(s)), A::I(b as i32), A::I(HEADS as i32)],
        )
    }
}

/// A kernel argument: a device address, an i32 or an i64.
enum A {
    P(u64),
    I(i32),
    L(i64),
}

/// The routing buffers of one batch of `T` tokens.
pub struct Routing {
    /// Router scores `[T, E]` f32 (sigmoid of the logits).
    pub s: Buf,
    /// Chosen experts `[T, k]` i32 and their weights `[T, k]` f32.
    pub choice: Buf,
    pub w: Buf,
    /// Inclusive ends of each expert's rows `[E]` i32 (the grouped GEMMs' `offs`).
    pub offs: Buf,
    /// The row of each (token, choice) `[T*k]`, the token of each row `[T*k]`, the weight of each row `[T*k]`.
    pub row_of: Buf,
    pub tok_of: Buf,
    pub p: Buf,
    /// The permuted latent rows `[T*k, l]` bf16.
    pub xp: Buf,
}

impl Routing {
    pub fn new(s: &Arc<CudaStream>, t: usize) -> Res<Routing> {
        use k3k_build::rt::DType::*;
        let r = t * TOP_K;
        Ok(Routing {
            s: Buf::alloc(s, F32, &[t, EXPERTS])?,
            choice: Buf::alloc(s, I32, &[t, TOP_K])?,
            w: Buf::alloc(s, F32, &[t, TOP_K])?,
            offs: Buf::alloc(s, I32, &[EXPERTS])?,
            row_of: Buf::alloc(s, I32, &[r])?,
            tok_of: Buf::alloc(s, I32, &[r])?,
            p: Buf::alloc(s, F32, &[r])?,
            xp: Buf::alloc(s, Bf16, &[r, LATENT])?,
        })
    }
}

/// The paged latent cache of the batch: `kv [pages, 64, 576]` bf16, the block table `[B, MAXB]` and the
/// lengths `[B]` (on the device; decode advances them).
pub struct Cache {
    pub kv: Buf,
    pub table: Buf,
    pub lens: Buf,
}

impl Cache {
    /// Room for `DECODE_BATCH` sequences of up to `MAX_SEQ` rows; the pages of each sequence are scattered
    /// (sequence b takes pages b, b + B, b + 2B, ...), as a pool allocator would leave them.
    pub fn new(s: &Arc<CudaStream>, lens: &[usize]) -> Res<Cache> {
        let b = lens.len();
        let maxb = MAX_SEQ.div_ceil(PAGE);
        let table: Vec<i32> = (0..b).flat_map(|bi| (0..maxb).map(move |j| (j * b + bi) as i32)).collect();
        Ok(Cache {
            kv: Buf::alloc(s, rt::DType::Bf16, &[b * maxb, PAGE, MLA_ROW])?,
            table: Buf::upload_i32(s, &[b, maxb], &table)?,
            lens: Buf::upload_i32(s, &[b], &lens.iter().map(|&l| l as i32).collect::<Vec<_>>())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine's CUDA C compiles with k3k's NVRTC and defines every kernel the launch wrappers name.
    #[test]
    fn engine_kernels_compile() {
        let ptx = rt::compile_cuda("engine", SRC).expect("NVRTC (scripts/install-cuda-tools.sh) compiles the engine");
        for n in NAMES {
            assert!(ptx.contains(&format!(".entry {n}(")), "{n} missing from the PTX");
        }
    }
}
