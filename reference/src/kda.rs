//! Kimi Delta Attention forward (SEMANTICS.md section 2.3): the token recurrence, the chunked algorithm with exact
//! per-pair exponents, the safe-gate chunked variant with midpoint-anchored 16x16 diagonal tiles,
//! and the gate / L2-norm helpers. Everything runs in f64.
//!
//! Layouts (row-major, time-major): `q, k: [B, T, H, K]`, `v: [B, T, HV, V]`,
//! `g: [B, T, HV, K]` (log-decay), `beta: [B, T, HV]`, `h0` and the final state `[N, HV, K, V]`,
//! `o: [B, T, HV, V]`. Value head `hv` reads q/k head `hv / (HV / H)`. With `cu_seqlens: [N + 1]`
//! (varlen) B must be 1 and sequence n is tokens `cu[n]..cu[n+1]`; otherwise N = B.

use crate::error::{RefError, check_len, check_no_nan, ensure};
use crate::gemm::sigmoid;

/// Inputs of one KDA forward call (see the module docs for layouts). Dims: `b` batch, `t` tokens,
/// `h` q/k heads, `hv` value heads (a multiple of `h`), `dk` key dim K, `dv` value dim V.
#[derive(Debug, Clone, PartialEq)]
pub struct KdaInputs {
    /// Batch size B (must be 1 with `cu_seqlens`).
    pub b: usize,
    /// Tokens per batch row T.
    pub t: usize,
    /// Query/key heads H.
    pub h: usize,
    /// Value heads HV (a multiple of H).
    pub hv: usize,
    /// Key head dim K.
    pub dk: usize,
    /// Value head dim V.
    pub dv: usize,
    /// Queries `[B, T, H, K]`.
    pub q: Vec<f32>,
    /// Keys `[B, T, H, K]`.
    pub k: Vec<f32>,
    /// Values `[B, T, HV, V]`.
    pub v: Vec<f32>,
    /// Log-decay gates `[B, T, HV, K]` (normally <= 0).
    pub g: Vec<f32>,
    /// Write strengths `[B, T, HV]` (post-sigmoid).
    pub beta: Vec<f32>,
    /// Optional initial state `[N, HV, K, V]` (zeros if `None`).
    pub h0: Option<Vec<f32>>,
    /// Query scale s; `None` means K^-1/2.
    pub scale: Option<f64>,
    /// Varlen boundaries `[N + 1]` (`0 = cu[0] <= ... <= cu[N] = T`; requires B = 1).
    pub cu_seqlens: Option<Vec<usize>>,
    /// L2-normalise q and k rows in f64 first (`x / sqrt(sum x^2 + 1e-6)`, the in-kernel option).
    pub use_qk_l2norm: bool,
}

/// Outputs of a KDA forward call.
#[derive(Debug, Clone, PartialEq)]
pub struct KdaOutput {
    /// Outputs `[B, T, HV, V]`.
    pub o: Vec<f64>,
    /// Final states `[N, HV, K, V]`.
    pub final_state: Vec<f64>,
}

impl KdaInputs {
    /// Inputs with no initial state, default scale, no varlen and no in-kernel L2 norm.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        b: usize,
        t: usize,
        h: usize,
        hv: usize,
        dk: usize,
        dv: usize,
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        g: Vec<f32>,
        beta: Vec<f32>,
    ) -> Self {
        KdaInputs {
            b,
            t,
            h,
            hv,
            dk,
            dv,
            q,
            k,
            v,
            g,
            beta,
            h0: None,
            scale: None,
            cu_seqlens: None,
            use_qk_l2norm: false,
        }
    }

    /// Number of sequences N (B, or `cu_seqlens.len() - 1` with varlen).
    pub fn num_seqs(&self) -> usize {
        match &self.cu_seqlens {
            Some(cu) => cu.len().saturating_sub(1),
            None => self.b,
        }
    }

    /// The effective query scale (given, or K^-1/2).
    pub fn effective_scale(&self) -> f64 {
        self.scale.unwrap_or(1.0 / (self.dk as f64).sqrt())
    }

    /// Checks every shape, the GVA ratio, `cu_seqlens` and the scale.
    pub fn validate(&self) -> Result<(), RefError> {
        let (b, t, h, hv, dk, dv) = (self.b, self.t, self.h, self.hv, self.dk, self.dv);
        ensure(h > 0, "h", || "need at least one q/k head".into())?;
        ensure(dk > 0 && dv > 0, "dk/dv", || format!("head dims must be positive, got K={dk} V={dv}"))?;
        ensure(hv > 0 && hv % h == 0, "hv", || format!("HV = {hv} must be a positive multiple of H = {h}"))?;
        check_len("q", self.q.len(), "[B, T, H, K]", &[b, t, h, dk])?;
        check_len("k", self.k.len(), "[B, T, H, K]", &[b, t, h, dk])?;
        check_len("v", self.v.len(), "[B, T, HV, V]", &[b, t, hv, dv])?;
        check_len("g", self.g.len(), "[B, T, HV, K]", &[b, t, hv, dk])?;
        check_len("beta", self.beta.len(), "[B, T, HV]", &[b, t, hv])?;
        if let Some(cu) = &self.cu_seqlens {
            ensure(b == 1, "cu_seqlens", || format!("varlen needs B = 1, got B = {b}"))?;
            ensure(cu.len() >= 2, "cu_seqlens", || format!("need N + 1 >= 2 entries, got {}", cu.len()))?;
            ensure(cu[0] == 0 && *cu.last().unwrap() == t, "cu_seqlens", || {
                format!("must start at 0 and end at T = {t}, got {cu:?}")
            })?;
            ensure(cu.windows(2).all(|w| w[0] <= w[1]), "cu_seqlens", || {
                format!("must be non-decreasing, got {cu:?}")
            })?;
        }
        if let Some(h0) = &self.h0 {
            check_len("h0", h0.len(), "[N, HV, K, V]", &[self.num_seqs(), hv, dk, dv])?;
        }
        let s = self.effective_scale();
        ensure(s.is_finite(), "scale", || format!("must be finite, got {s}"))?;
        Ok(())
    }

    /// The sequences as (batch row, first token, end token, state index).
    fn seqs(&self) -> Vec<Seq> {
        match &self.cu_seqlens {
            Some(cu) => cu.windows(2).enumerate().map(|(n, w)| Seq { bi: 0, start: w[0], end: w[1], n }).collect(),
            None => (0..self.b).map(|bi| Seq { bi, start: 0, end: self.t, n: bi }).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Seq {
    bi: usize,
    start: usize,
    end: usize,
    n: usize,
}

/// Validated inputs with q/k in f64 (normalised if asked).
struct Prep<'a> {
    x: &'a KdaInputs,
    q: Vec<f64>,
    k: Vec<f64>,
    scale: f64,
}

impl<'a> Prep<'a> {
    fn new(x: &'a KdaInputs) -> Result<Self, RefError> {
        x.validate()?;
        let conv = |v: &[f32]| -> Result<Vec<f64>, RefError> {
            if x.use_qk_l2norm { l2norm_rows(v, x.dk) } else { Ok(v.iter().map(|&e| e as f64).collect()) }
        };
        Ok(Prep { x, q: conv(&x.q)?, k: conv(&x.k)?, scale: x.effective_scale() })
    }
    fn qk_off(&self, bi: usize, t: usize, hv: usize) -> usize {
        let x = self.x;
        ((bi * x.t + t) * x.h + hv / (x.hv / x.h)) * x.dk
    }
    fn v_off(&self, bi: usize, t: usize, hv: usize) -> usize {
        ((bi * self.x.t + t) * self.x.hv + hv) * self.x.dv
    }
    fn g_off(&self, bi: usize, t: usize, hv: usize) -> usize {
        ((bi * self.x.t + t) * self.x.hv + hv) * self.x.dk
    }
    fn beta(&self, bi: usize, t: usize, hv: usize) -> f64 {
        self.x.beta[(bi * self.x.t + t) * self.x.hv + hv] as f64
    }
    fn state_off(&self, n: usize, hv: usize) -> usize {
        (n * self.x.hv + hv) * self.x.dk * self.x.dv
    }
    fn init_state(&self, n: usize, hv: usize) -> Vec<f64> {
        let kv = self.x.dk * self.x.dv;
        match &self.x.h0 {
            Some(h0) => {
                let o = self.state_off(n, hv);
                h0[o..o + kv].iter().map(|&e| e as f64).collect()
            }
            None => vec![0f64; kv],
        }
    }
    fn alloc(&self) -> KdaOutput {
        let x = self.x;
        KdaOutput { o: vec![0f64; x.b * x.t * x.hv * x.dv], final_state: vec![0f64; x.num_seqs() * x.hv * x.dk * x.dv] }
    }
}

/// The KDA token recurrence of SEMANTICS.md section 2.3 in f64 (the ground truth): per sequence and value head,
/// `S' = Diag(exp g_t) S`, `S = S' + beta_t k_t (v_t - S'^T k_t)^T`, `o_t = S^T (s q_t)`.
pub fn kda_recurrent(x: &KdaInputs) -> Result<KdaOutput, RefError> {
    let p = Prep::new(x)?;
    let (dk, dv) = (x.dk, x.dv);
    let mut out = p.alloc();
    let mut pred = vec![0f64; dv];
    for seq in x.seqs() {
        for hv in 0..x.hv {
            let mut s = p.init_state(seq.n, hv);
            for t in seq.start..seq.end {
                let (qo, vo, go) = (p.qk_off(seq.bi, t, hv), p.v_off(seq.bi, t, hv), p.g_off(seq.bi, t, hv));
                let kt = &p.k[qo..qo + dk];
                let qt = &p.q[qo..qo + dk];
                let vt = &x.v[vo..vo + dv];
                let beta = p.beta(seq.bi, t, hv);
                for i in 0..dk {
                    let a = (x.g[go + i] as f64).exp();
                    s[i * dv..(i + 1) * dv].iter_mut().for_each(|e| *e *= a);
                }
                pred.fill(0.0);
                for i in 0..dk {
                    for j in 0..dv {
                        pred[j] += s[i * dv + j] * kt[i];
                    }
                }
                for i in 0..dk {
                    let bk = beta * kt[i];
                    for j in 0..dv {
                        s[i * dv + j] += bk * (vt[j] as f64 - pred[j]);
                    }
                }
                let o = &mut out.o[vo..vo + dv];
                for i in 0..dk {
                    let sq = p.scale * qt[i];
                    for j in 0..dv {
                        o[j] += s[i * dv + j] * sq;
                    }
                }
            }
            let so = p.state_off(seq.n, hv);
            out.final_state[so..so + dk * dv].copy_from_slice(&s);
        }
    }
    Ok(out)
}

/// How the intra-chunk matrices L and P are formed.
#[derive(Debug, Clone, Copy)]
enum Intra {
    /// `exp(G_r - G_c)` per pair and channel (every exponent <= 0 for g <= 0).
    Exact,
    /// Tiles of `tile` rows: diagonal tiles anchored at row `min(tile/2, last valid)` of the tile,
    /// off-diagonal tiles at the first row of the row tile, as factorised products.
    SafeTiles { tile: usize },
}

/// One chunk of one (sequence, value head): rows `t0..t0 + len`.
struct Chunk {
    len: usize,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    beta: Vec<f64>,
    /// In-chunk inclusive cumsum of g, `[len, K]`.
    gc: Vec<f64>,
}

impl Chunk {
    fn load(p: &Prep, bi: usize, t0: usize, len: usize, hv: usize) -> Chunk {
        let (dk, dv) = (p.x.dk, p.x.dv);
        let mut c = Chunk {
            len,
            q: Vec::with_capacity(len * dk),
            k: Vec::with_capacity(len * dk),
            v: Vec::with_capacity(len * dv),
            beta: Vec::with_capacity(len),
            gc: Vec::with_capacity(len * dk),
        };
        let mut run = vec![0f64; dk];
        for t in t0..t0 + len {
            let (qo, vo, go) = (p.qk_off(bi, t, hv), p.v_off(bi, t, hv), p.g_off(bi, t, hv));
            c.q.extend_from_slice(&p.q[qo..qo + dk]);
            c.k.extend_from_slice(&p.k[qo..qo + dk]);
            c.v.extend(p.x.v[vo..vo + dv].iter().map(|&e| e as f64));
            c.beta.push(p.beta(bi, t, hv));
            for (i, r) in run.iter_mut().enumerate() {
                *r += p.x.g[go + i] as f64;
            }
            c.gc.extend_from_slice(&run);
        }
        c
    }

    /// `(L, P)`, both `[len, len]` row-major: `L[r,c] = beta_r sum_i k_ri k_ci exp(G_ri - G_ci)` for
    /// c < r and `P[r,c] = s sum_i q_ri k_ci exp(G_ri - G_ci)` for c <= r, formed per `mode`.
    fn intra(&self, dk: usize, scale: f64, mode: Intra) -> (Vec<f64>, Vec<f64>) {
        let n = self.len;
        let mut l = vec![0f64; n * n];
        let mut pm = vec![0f64; n * n];
        fn row(m: &[f64], r: usize, dk: usize) -> &[f64] {
            &m[r * dk..(r + 1) * dk]
        }
        for r in 0..n {
            let (qr, kr, gr) = (row(&self.q, r, dk), row(&self.k, r, dk), row(&self.gc, r, dk));
            for c in 0..=r {
                let (kc, gcc) = (row(&self.k, c, dk), row(&self.gc, c, dk));
                let (mut sp, mut sl) = (0f64, 0f64);
                match mode {
                    Intra::Exact => {
                        for i in 0..dk {
                            let e = (gr[i] - gcc[i]).exp();
                            sp += qr[i] * kc[i] * e;
                            sl += kr[i] * kc[i] * e;
                        }
                    }
                    Intra::SafeTiles { tile } => {
                        let (tr, tc) = (r / tile, c / tile);
                        let anchor = if tr == tc {
                            let valid = tile.min(n - tr * tile);
                            tr * tile + (tile / 2).min(valid - 1)
                        } else {
                            tr * tile
                        };
                        let ga = row(&self.gc, anchor, dk);
                        for i in 0..dk {
                            let up = (gr[i] - ga[i]).exp();
                            let down = kc[i] * (ga[i] - gcc[i]).exp();
                            sp += (qr[i] * up) * down;
                            sl += (kr[i] * up) * down;
                        }
                    }
                }
                pm[r * n + c] = scale * sp;
                if c < r {
                    l[r * n + c] = self.beta[r] * sl;
                }
            }
        }
        (l, pm)
    }
}

/// `(I + L)^-1` for a strictly lower-triangular `[n, n]` L, by forward substitution.
fn unit_lower_inverse(l: &[f64], n: usize) -> Vec<f64> {
    let mut a = vec![0f64; n * n];
    for c in 0..n {
        a[c * n + c] = 1.0;
        for r in c + 1..n {
            let s: f64 = (c..r).map(|m| l[r * n + m] * a[m * n + c]).sum();
            a[r * n + c] = -s;
        }
    }
    a
}

/// The intermediates of one chunk of one (sequence, value head), for debugging kernels stage by
/// stage (fla names in brackets). All row-major f64; `len` = rows in this chunk (<= chunk).
#[derive(Debug, Clone, PartialEq)]
pub struct KdaChunkTrace {
    /// Token index (within the batch row) of the chunk's first row.
    pub t0: usize,
    /// Valid rows in this chunk.
    pub len: usize,
    /// In-chunk inclusive cumsum of g, `[len, K]` (natural log; fla stores it / ln 2).
    pub g_cum: Vec<f64>,
    /// `L` before the solve, strictly lower, `[len, len]`.
    pub l: Vec<f64>,
    /// `P` including the scale, lower with diagonal, `[len, len]` ("Aqk").
    pub p: Vec<f64>,
    /// `A = (I + L)^-1`, unit lower, `[len, len]` ("Akk").
    pub a: Vec<f64>,
    /// `W = A Diag(beta) (Gamma . K)`, `[len, K]` ("w").
    pub w: Vec<f64>,
    /// `U = A Diag(beta) V`, `[len, V]` ("u").
    pub u: Vec<f64>,
    /// `Vt = U - W S`, `[len, V]` ("v_new").
    pub v_new: Vec<f64>,
    /// The state S at the start of the chunk, `[K, V]` ("h").
    pub state_in: Vec<f64>,
}

/// The per-chunk intermediates of the exact chunked algorithm ([`kda_chunked`]) for sequence
/// `seq` (0..N) and value head `hv`, in chunk order.
pub fn kda_chunk_trace(x: &KdaInputs, chunk: usize, seq: usize, hv: usize) -> Result<Vec<KdaChunkTrace>, RefError> {
    ensure(seq < x.num_seqs(), "seq", || format!("sequence {seq} is outside 0..{}", x.num_seqs()))?;
    ensure(hv < x.hv, "hv", || format!("value head {hv} is outside 0..{}", x.hv))?;
    Ok(chunked(x, chunk, Intra::Exact, Some((seq, hv)))?.1)
}

/// Shared chunked driver (SEMANTICS.md section 2.3) for both intra modes; records the intermediates of the
/// (sequence, value head) in `trace`.
fn chunked(
    x: &KdaInputs,
    chunk: usize,
    mode: Intra,
    trace: Option<(usize, usize)>,
) -> Result<(KdaOutput, Vec<KdaChunkTrace>), RefError> {
    ensure(chunk > 0, "chunk", || "chunk size must be positive".into())?;
    let p = Prep::new(x)?;
    let (dk, dv) = (x.dk, x.dv);
    let mut out = p.alloc();
    let mut traces = Vec::new();
    for seq in x.seqs() {
        for hv in 0..x.hv {
            let tracing = trace == Some((seq.n, hv));
            let mut s = p.init_state(seq.n, hv);
            let mut t0 = seq.start;
            while t0 < seq.end {
                let len = chunk.min(seq.end - t0);
                let ch = Chunk::load(&p, seq.bi, t0, len, hv);
                let (l, pm) = ch.intra(dk, p.scale, mode);
                let a = unit_lower_inverse(&l, len);
                let gamma: Vec<f64> = ch.gc.iter().map(|g| g.exp()).collect();
                // W = A Diag(beta) (Gamma . K)  [len, K];  U = A Diag(beta) V  [len, V]
                let mut w = vec![0f64; len * dk];
                let mut u = vec![0f64; len * dv];
                for r in 0..len {
                    for c in 0..=r {
                        let f = a[r * len + c] * ch.beta[c];
                        for i in 0..dk {
                            w[r * dk + i] += f * gamma[c * dk + i] * ch.k[c * dk + i];
                        }
                        for j in 0..dv {
                            u[r * dv + j] += f * ch.v[c * dv + j];
                        }
                    }
                }
                // Vt = U - W S  [len, V]
                let mut vt = u.clone();
                for r in 0..len {
                    for i in 0..dk {
                        let wi = w[r * dk + i];
                        for j in 0..dv {
                            vt[r * dv + j] -= wi * s[i * dv + j];
                        }
                    }
                }
                if tracing {
                    traces.push(KdaChunkTrace {
                        t0,
                        len,
                        g_cum: ch.gc.clone(),
                        l: l.clone(),
                        p: pm.clone(),
                        a: a.clone(),
                        w: w.clone(),
                        u,
                        v_new: vt.clone(),
                        state_in: s.clone(),
                    });
                }
                // O = s (Gamma . Q) S + P Vt
                for r in 0..len {
                    let oo = p.v_off(seq.bi, t0 + r, hv);
                    let o = &mut out.o[oo..oo + dv];
                    for i in 0..dk {
                        let qg = p.scale * gamma[r * dk + i] * ch.q[r * dk + i];
                        for j in 0..dv {
                            o[j] += qg * s[i * dv + j];
                        }
                    }
                    for c in 0..=r {
                        let pv = pm[r * len + c];
                        for j in 0..dv {
                            o[j] += pv * vt[c * dv + j];
                        }
                    }
                }
                // S <- Diag(Gamma_last) S + (exp(G_last - G) . K)^T Vt
                let last = len - 1;
                for i in 0..dk {
                    let gl = gamma[last * dk + i];
                    s[i * dv..(i + 1) * dv].iter_mut().for_each(|e| *e *= gl);
                }
                for c in 0..len {
                    for i in 0..dk {
                        let kb = (ch.gc[last * dk + i] - ch.gc[c * dk + i]).exp() * ch.k[c * dk + i];
                        for j in 0..dv {
                            s[i * dv + j] += kb * vt[c * dv + j];
                        }
                    }
                }
                t0 += len;
            }
            let so = p.state_off(seq.n, hv);
            out.final_state[so..so + dk * dv].copy_from_slice(&s);
        }
    }
    Ok((out, traces))
}

/// The chunked KDA forward exactly as SEMANTICS.md section 2.3 writes it, with chunk size `chunk` (64 or 32 in
/// the kernels; any positive size here): in-chunk cumsum G, L and P with per-pair exponents
/// `exp(G_r - G_c)` (all <= 0 for g <= 0, so safe for any gate), `A = (I + L)^-1` by forward
/// substitution, W, U, then per chunk `Vt = U - W S`, `O = s (Gamma . Q) S + P Vt`,
/// `S <- Diag(Gamma_last) S + (exp(G_last - G) . K)^T Vt`. Chunks never cross a sequence boundary;
/// the last chunk of a sequence may be partial (Gamma_last at its last valid row).
pub fn kda_chunked(x: &KdaInputs, chunk: usize) -> Result<KdaOutput, RefError> {
    Ok(chunked(x, chunk, Intra::Exact, None)?.0)
}

/// The safe-gate chunked variant: as [`kda_chunked`], but L and P are formed from `tile`-row tiles
/// the way the tensor-core kernel does: a diagonal tile is anchored at its row
/// `n = min(tile/2, last valid row)` as `(X . exp(G - G_n)) (K . exp(G_n - G))^T` (exponents up to
/// (tile/2) * |lb|), an off-diagonal tile at the first row of its row tile (exponents <= 0).
/// Rejects any gate below `lower_bound` with `GateBelowBound` (and NaN gates with `Nan`); gates
/// above 0 are accepted. `chunk` must be a multiple of `tile`; `lower_bound` must be finite and < 0.
pub fn kda_chunked_safe_tiles(
    x: &KdaInputs,
    chunk: usize,
    tile: usize,
    lower_bound: f64,
) -> Result<KdaOutput, RefError> {
    ensure(tile > 0 && chunk > 0 && chunk.is_multiple_of(tile), "chunk", || {
        format!("chunk = {chunk} must be a positive multiple of tile = {tile}")
    })?;
    ensure(lower_bound.is_finite() && lower_bound < 0.0, "lower_bound", || {
        format!("must be finite and negative, got {lower_bound}")
    })?;
    check_no_nan("g", &x.g)?;
    if let Some((index, &v)) = x.g.iter().enumerate().find(|&(_, &v)| (v as f64) < lower_bound) {
        return Err(RefError::GateBelowBound { arg: "g", index, value: v as f64, bound: lower_bound });
    }
    Ok(chunked(x, chunk, Intra::SafeTiles { tile }, None)?.0)
}

/// Safe-form gate: `lb * sigmoid(x + bias)`, in (lb, 0).
pub fn gate_safe(x: f64, bias: f64, lb: f64) -> f64 {
    lb * sigmoid(x + bias)
}

/// Safe-form gate with a per-head scale (FlashKDA's and FLA's `safe_gate` form with `A_log`):
/// `lb * sigmoid(exp(a_log) * (x + bias))`, in (lb, 0).
pub fn gate_safe_scaled(x: f64, a_log: f64, bias: f64, lb: f64) -> f64 {
    lb * sigmoid(a_log.exp() * (x + bias))
}

/// Numerically stable softplus `ln(1 + e^z)`.
pub fn softplus(z: f64) -> f64 {
    z.max(0.0) + (-z.abs()).exp().ln_1p()
}

/// Standard-form gate: `-exp(a_log) * softplus(x + dt_bias)`, in (-inf, 0).
pub fn gate_standard(x: f64, a_log: f64, dt_bias: f64) -> f64 {
    -a_log.exp() * softplus(x + dt_bias)
}

/// Applies [`gate_safe`] to a `[.., HV, K]` tensor `x` with optional `bias: [HV * K]`.
pub fn gate_safe_tensor(x: &[f32], hv: usize, dk: usize, bias: Option<&[f32]>, lb: f64) -> Result<Vec<f64>, RefError> {
    let row = check_gate_shapes(x, hv, dk, bias)?;
    Ok(x.iter().enumerate().map(|(i, &v)| gate_safe(v as f64, bias.map_or(0.0, |b| b[i % row] as f64), lb)).collect())
}

/// Applies [`gate_standard`] to a `[.., HV, K]` tensor `x` with `a_log: [HV]` and optional
/// `dt_bias: [HV * K]`.
pub fn gate_standard_tensor(
    x: &[f32],
    hv: usize,
    dk: usize,
    a_log: &[f32],
    dt_bias: Option<&[f32]>,
) -> Result<Vec<f64>, RefError> {
    let row = check_gate_shapes(x, hv, dk, dt_bias)?;
    check_len("a_log", a_log.len(), "[HV]", &[hv])?;
    Ok(x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let j = i % row;
            gate_standard(v as f64, a_log[j / dk] as f64, dt_bias.map_or(0.0, |b| b[j] as f64))
        })
        .collect())
}

/// Applies [`gate_safe_scaled`] to a `[.., HV, K]` tensor `x` with `a_log: [HV]` and optional
/// `bias: [HV * K]`.
pub fn gate_safe_scaled_tensor(
    x: &[f32],
    hv: usize,
    dk: usize,
    a_log: &[f32],
    bias: Option<&[f32]>,
    lb: f64,
) -> Result<Vec<f64>, RefError> {
    let row = check_gate_shapes(x, hv, dk, bias)?;
    check_len("a_log", a_log.len(), "[HV]", &[hv])?;
    Ok(x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let j = i % row;
            gate_safe_scaled(v as f64, a_log[j / dk] as f64, bias.map_or(0.0, |b| b[j] as f64), lb)
        })
        .collect())
}

fn check_gate_shapes(x: &[f32], hv: usize, dk: usize, bias: Option<&[f32]>) -> Result<usize, RefError> {
    let row = hv * dk;
    ensure(row > 0 && x.len().is_multiple_of(row), "x", || {
        format!("length {} is not a multiple of HV * K = {row}", x.len())
    })?;
    if let Some(b) = bias {
        check_len("bias", b.len(), "[HV * K]", &[hv, dk])?;
    }
    Ok(row)
}

/// L2-normalises each row of length `dim` of `x` in f64: `x / sqrt(sum x^2 + 1e-6)`.
pub fn l2norm_rows(x: &[f32], dim: usize) -> Result<Vec<f64>, RefError> {
    ensure(dim > 0 && x.len().is_multiple_of(dim), "x", || {
        format!("length {} is not a multiple of dim = {dim}", x.len())
    })?;
    let mut out = Vec::with_capacity(x.len());
    for r in x.chunks_exact(dim) {
        let ss: f64 = r.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let inv = 1.0 / (ss + 1e-6).sqrt();
        out.extend(r.iter().map(|&v| v as f64 * inv));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::rel_l2;
    use crate::random::{bf16_normal, bf16_unit_rows, fresh_seed, logsigmoid_gates, seeded, uniform_f32};
    use rand::Rng;

    struct Cfg {
        b: usize,
        t: usize,
        h: usize,
        hv: usize,
        dk: usize,
        dv: usize,
        h0: bool,
        cu: Option<Vec<usize>>,
    }

    fn cfg(b: usize, t: usize, h: usize, hv: usize, dk: usize, dv: usize) -> Cfg {
        Cfg { b, t, h, hv, dk, dv, h0: false, cu: None }
    }

    /// Random inputs; `gate` draws the `[B, T, HV, K]` gates.
    fn inputs(seed: u64, c: &Cfg, gate: &dyn Fn(&mut rand::rngs::StdRng, usize) -> Vec<f32>) -> KdaInputs {
        let mut rng = seeded(seed);
        let q = bf16_unit_rows(&mut rng, c.b * c.t * c.h, c.dk);
        let k = bf16_unit_rows(&mut rng, c.b * c.t * c.h, c.dk);
        let v = bf16_normal(&mut rng, c.b * c.t * c.hv * c.dv, 1.0);
        let g = gate(&mut rng, c.b * c.t * c.hv * c.dk);
        let beta = uniform_f32(&mut rng, c.b * c.t * c.hv, 0.05, 1.0);
        let mut x = KdaInputs::new(c.b, c.t, c.h, c.hv, c.dk, c.dv, q, k, v, g, beta);
        x.cu_seqlens = c.cu.clone();
        if c.h0 {
            x.h0 = Some(bf16_normal(&mut rng, x.num_seqs() * c.hv * c.dk * c.dv, 0.5));
        }
        x
    }

    fn default_gate(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<f32> {
        logsigmoid_gates(rng, n, 4.0)
    }

    fn assert_close(a: &KdaOutput, b: &KdaOutput, tol: f64, what: &str) {
        let ro = rel_l2(&a.o, &b.o);
        let rs = rel_l2(&a.final_state, &b.final_state);
        assert!(a.o.iter().chain(&a.final_state).all(|v| v.is_finite()), "{what}: non-finite");
        assert!(ro <= tol && rs <= tol, "{what}: rel o {ro:e}, rel state {rs:e}");
    }

    #[test]
    fn recurrent_single_token_by_hand() {
        // T = 1, no h0: S = beta k v^T, o = s (q . k) beta v
        let q = vec![0.5f32, -1.0, 2.0];
        let k = vec![1.0f32, 0.25, -0.5];
        let v = vec![3.0f32, -2.0];
        let x = KdaInputs::new(1, 1, 1, 1, 3, 2, q.clone(), k.clone(), v.clone(), vec![-0.3; 3], vec![0.5]);
        let out = kda_recurrent(&x).unwrap();
        let s = 1.0 / 3f64.sqrt();
        let qk: f64 = q.iter().zip(&k).map(|(&a, &b)| a as f64 * b as f64).sum();
        for j in 0..2 {
            assert!((out.o[j] - s * qk * 0.5 * v[j] as f64).abs() < 1e-15);
            for i in 0..3 {
                assert!((out.final_state[i * 2 + j] - 0.5 * k[i] as f64 * v[j] as f64).abs() < 1e-15);
            }
        }
    }

    #[test]
    fn recurrent_pure_decay() {
        // beta = 0: S_T = Diag(exp(sum g)) h0, o_t = S_t^T (s q_t)
        let seed = fresh_seed();
        let c = Cfg { h0: true, ..cfg(1, 5, 1, 1, 4, 3) };
        let mut x = inputs(seed, &c, &default_gate);
        x.beta.fill(0.0);
        x.scale = Some(0.7);
        let out = kda_recurrent(&x).unwrap();
        let h0 = x.h0.clone().unwrap();
        let mut cum = [0f64; 4];
        for t in 0..5 {
            for i in 0..4 {
                cum[i] += x.g[t * 4 + i] as f64;
            }
            for j in 0..3 {
                let want: f64 = (0..4).map(|i| cum[i].exp() * h0[i * 3 + j] as f64 * 0.7 * x.q[t * 4 + i] as f64).sum();
                assert!((out.o[t * 3 + j] - want).abs() < 1e-12, "seed {seed}");
            }
        }
        for i in 0..4 {
            for j in 0..3 {
                let want = cum[i].exp() * h0[i * 3 + j] as f64;
                assert!((out.final_state[i * 3 + j] - want).abs() < 1e-12, "seed {seed}");
            }
        }
    }

    #[test]
    fn chunked_matches_recurrent() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let mut cases = vec![];
        for t in [1usize, 15, 17, 63, 65] {
            cases.push(cfg(1, t, 1, 1, 16, 8));
        }
        cases.push(cfg(2, 70, 2, 2, 12, 10)); // B = 2, H = 2
        cases.push(Cfg { h0: true, ..cfg(1, 40, 2, 4, 8, 8) }); // GVA HV = 2H, h0
        cases.push(Cfg { h0: true, cu: Some(vec![0, 1, 16, 79, 144]), ..cfg(1, 144, 1, 2, 8, 6) });
        cases.push(Cfg { cu: Some(vec![0, 0, 33, 33, 40]), ..cfg(1, 40, 1, 1, 8, 4) }); // empty sequences
        for (ci, c) in cases.iter().enumerate() {
            let s: u64 = rng.random();
            let mut x = inputs(s, c, &default_gate);
            x.scale = if ci % 2 == 0 { None } else { Some(0.3) };
            let r = kda_recurrent(&x).unwrap();
            for chunk in [32, 64] {
                let ch = kda_chunked(&x, chunk).unwrap();
                assert_close(&ch, &r, 1e-9, &format!("seed {seed} case {ci} chunk {chunk}"));
            }
            let ch = kda_chunked(&x, 5).unwrap();
            assert_close(&ch, &r, 1e-9, &format!("seed {seed} case {ci} chunk 5"));
        }
    }

    #[test]
    fn varlen_equals_separate_sequences() {
        let seed = fresh_seed();
        let c = Cfg { h0: true, cu: Some(vec![0, 1, 16, 79, 144]), ..cfg(1, 144, 2, 2, 8, 4) };
        let x = inputs(seed, &c, &default_gate);
        let full = kda_chunked(&x, 64).unwrap();
        let cu = c.cu.unwrap();
        let (h, hv, dk, dv) = (2, 2, 8, 4);
        for n in 0..4 {
            let (a, b) = (cu[n], cu[n + 1]);
            let sl = |v: &[f32], w: usize| v[a * w..b * w].to_vec();
            let mut one = KdaInputs::new(
                1,
                b - a,
                h,
                hv,
                dk,
                dv,
                sl(&x.q, h * dk),
                sl(&x.k, h * dk),
                sl(&x.v, hv * dv),
                sl(&x.g, hv * dk),
                sl(&x.beta, hv),
            );
            let kv = hv * dk * dv;
            one.h0 = Some(x.h0.as_ref().unwrap()[n * kv..(n + 1) * kv].to_vec());
            let r = kda_recurrent(&one).unwrap();
            assert!(rel_l2(&full.o[a * hv * dv..b * hv * dv], &r.o) < 1e-9, "seed {seed} seq {n}");
            assert!(rel_l2(&full.final_state[n * kv..(n + 1) * kv], &r.final_state) < 1e-9, "seed {seed}");
        }
    }

    #[test]
    fn extreme_gates_on_exact_path() {
        let seed = fresh_seed();
        let c = Cfg { h0: true, ..cfg(1, 70, 1, 1, 8, 4) };
        let gate = |rng: &mut rand::rngs::StdRng, n: usize| -> Vec<f32> {
            (0..n).map(|_| if rng.random_bool(0.3) { -1000.0 } else { -rng.random::<f32>() }).collect()
        };
        let x = inputs(seed, &c, &gate);
        let r = kda_recurrent(&x).unwrap();
        for chunk in [16, 64] {
            let ch = kda_chunked(&x, chunk).unwrap();
            assert_close(&ch, &r, 1e-9, &format!("seed {seed} chunk {chunk}"));
        }
        // every gate -1000: each token forgets everything before it
        let x = inputs(seed, &c, &|_, n| vec![-1000.0; n]);
        let ch = kda_chunked(&x, 64).unwrap();
        assert_close(&ch, &kda_recurrent(&x).unwrap(), 1e-9, &format!("seed {seed} all -1000"));
    }

    #[test]
    fn safe_tiles_match_recurrent() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let gate = |rng: &mut rand::rngs::StdRng, n: usize| -> Vec<f32> {
            uniform_f32(rng, n, -5.0, 0.0).into_iter().map(|v| v.min(-1e-4)).collect()
        };
        for c in [
            cfg(1, 64, 1, 1, 16, 8),
            cfg(1, 65, 1, 2, 8, 8),
            cfg(1, 23, 1, 1, 8, 4),
            Cfg { h0: true, cu: Some(vec![0, 1, 16, 79, 144]), ..cfg(1, 144, 1, 1, 8, 4) },
        ] {
            let s: u64 = rng.random();
            let x = inputs(s, &c, &gate);
            let r = kda_recurrent(&x).unwrap();
            for chunk in [32, 64] {
                let st = kda_chunked_safe_tiles(&x, chunk, 16, -5.0).unwrap();
                assert_close(&st, &r, 1e-9, &format!("seed {seed} T {} chunk {chunk}", c.t));
            }
        }
    }

    #[test]
    fn safe_tiles_reject_gates_below_bound() {
        let seed = fresh_seed();
        let c = cfg(1, 20, 1, 1, 4, 4);
        let mut x = inputs(seed, &c, &|rng, n| uniform_f32(rng, n, -5.0, 0.0));
        x.g[37] = -6.0;
        match kda_chunked_safe_tiles(&x, 64, 16, -5.0) {
            Err(RefError::GateBelowBound { index, value, bound, .. }) => {
                assert_eq!((index, value, bound), (37, -6.0, -5.0))
            }
            other => panic!("expected GateBelowBound, got {other:?}"),
        }
        assert!(kda_chunked(&x, 64).is_ok(), "the exact path accepts any gate");
        x.g[37] = f32::NAN;
        assert!(matches!(kda_chunked_safe_tiles(&x, 64, 16, -5.0), Err(RefError::Nan { index: 37, .. })));
        x.g[37] = -1.0;
        assert!(kda_chunked_safe_tiles(&x, 60, 16, -5.0).is_err());
        assert!(kda_chunked_safe_tiles(&x, 64, 16, 0.0).is_err());
    }

    #[test]
    fn validation_errors() {
        let seed = fresh_seed();
        let x = inputs(seed, &cfg(2, 10, 2, 4, 4, 4), &default_gate);
        assert!(kda_recurrent(&x).is_ok());
        let mut y = x.clone();
        y.hv = 3;
        assert!(matches!(kda_recurrent(&y), Err(RefError::Invalid { arg: "hv", .. })));
        let mut y = x.clone();
        y.v.pop();
        assert!(matches!(kda_chunked(&y, 64), Err(RefError::Shape { arg: "v", .. })));
        let mut y = x.clone();
        y.cu_seqlens = Some(vec![0, 10]);
        assert!(matches!(kda_recurrent(&y), Err(RefError::Invalid { arg: "cu_seqlens", .. })));
        let mut y = inputs(seed, &cfg(1, 10, 1, 1, 4, 4), &default_gate);
        y.cu_seqlens = Some(vec![0, 4, 9]);
        assert!(kda_recurrent(&y).is_err());
        y.cu_seqlens = Some(vec![0, 6, 4, 10]);
        assert!(kda_recurrent(&y).is_err());
        y.cu_seqlens = Some(vec![0, 4, 10]);
        y.h0 = Some(vec![0.0; 16]);
        assert!(matches!(kda_recurrent(&y), Err(RefError::Shape { arg: "h0", .. })));
        assert!(kda_chunked(&x, 0).is_err());
    }

    #[test]
    fn in_kernel_l2norm_equals_prenormalised() {
        let seed = fresh_seed();
        let mut x = inputs(seed, &cfg(1, 20, 1, 1, 8, 4), &default_gate);
        let mut rng = seeded(seed ^ 1);
        x.q = bf16_normal(&mut rng, x.q.len(), 1.0);
        x.k = bf16_normal(&mut rng, x.k.len(), 1.0);
        let mut y = x.clone();
        y.use_qk_l2norm = true;
        let a = kda_chunked(&y, 16).unwrap();
        let qn = l2norm_rows(&x.q, 8).unwrap();
        for row in qn.chunks(8) {
            let n: f64 = row.iter().map(|v| v * v).sum();
            assert!((n - 1.0).abs() < 1e-4, "seed {seed}");
        }
        assert!(l2norm_rows(&x.q, 7).is_err());
        // recurrent with normalised inputs rounded to f32 agrees to f32 precision
        x.q = qn.iter().map(|&v| v as f32).collect();
        x.k = l2norm_rows(&x.k, 8).unwrap().iter().map(|&v| v as f32).collect();
        let b = kda_recurrent(&x).unwrap();
        assert_close(&a, &b, 1e-6, &format!("seed {seed}"));
    }

    #[test]
    fn gate_helpers() {
        assert!((gate_safe(0.0, 0.0, -5.0) + 2.5).abs() < 1e-15);
        assert!(gate_safe(50.0, 0.0, -5.0) >= -5.0 && gate_safe(-50.0, 1.0, -5.0) < 0.0);
        let want = -(2f64).exp() * (1.0 + (0.5f64).exp()).ln();
        assert!((gate_standard(0.25, 2.0, 0.25) - want).abs() < 1e-14);
        assert!((softplus(800.0) - 800.0).abs() < 1e-12 && softplus(-800.0) >= 0.0);
        let x = [0.5f32, -1.0, 2.0, 0.0, 1.0, 1.0];
        let bias = [0.1f32, 0.2, 0.3];
        let gs = gate_safe_tensor(&x, 1, 3, Some(&bias), -5.0).unwrap();
        assert_eq!(gs[4], gate_safe(1.0, 0.2f32 as f64, -5.0));
        let gt = gate_standard_tensor(&x, 3, 1, &[0.0, 1.0, 2.0], None).unwrap();
        assert_eq!(gt[5], gate_standard(1.0, 2.0, 0.0));
        // The scaled safe form: exp(a_log) multiplies x + bias inside the sigmoid; a_log = 0 is the plain form.
        let want = -5.0 / (1.0 + (-(0.5f64).exp() * 1.5).exp());
        assert!((gate_safe_scaled(1.0, 0.5, 0.5, -5.0) - want).abs() < 1e-14);
        assert_eq!(gate_safe_scaled(0.3, 0.0, 0.2, -5.0), gate_safe(0.3, 0.2, -5.0));
        let gc = gate_safe_scaled_tensor(&x, 3, 1, &[0.0, 1.0, -1.0], Some(&bias), -5.0).unwrap();
        assert_eq!(gc[5], gate_safe_scaled(1.0, -1.0, 0.3f32 as f64, -5.0));
        assert!(gate_safe_scaled_tensor(&x, 3, 1, &[0.0], None, -5.0).is_err());
        assert!(gate_safe_tensor(&x, 4, 1, None, -5.0).is_err());
        assert!(gate_standard_tensor(&x, 3, 1, &[0.0], None).is_err());
    }

    #[test]
    fn chunk_trace_is_consistent() {
        let seed = fresh_seed();
        let c = Cfg { h0: true, cu: Some(vec![0, 10, 90]), ..cfg(1, 90, 1, 2, 6, 5) };
        let x = inputs(seed, &c, &default_gate);
        let tr = kda_chunk_trace(&x, 32, 1, 1).unwrap();
        assert_eq!(tr.iter().map(|t| (t.t0, t.len)).collect::<Vec<_>>(), vec![(10, 32), (42, 32), (74, 16)]);
        let h0 = x.h0.as_ref().unwrap();
        let kv = 6 * 5;
        let want: Vec<f64> = h0[3 * kv..4 * kv].iter().map(|&v| v as f64).collect();
        assert_eq!(tr[0].state_in, want, "state index n = 1, hv = 1");
        for t in &tr {
            let n = t.len;
            // (I + L) A = I
            for r in 0..n {
                for cc in 0..n {
                    let mut v = t.a[r * n + cc];
                    for m in 0..n {
                        v += t.l[r * n + m] * t.a[m * n + cc];
                    }
                    let id = if r == cc { 1.0 } else { 0.0 };
                    assert!((v - id).abs() < 1e-10, "seed {seed}");
                }
            }
        }
        assert!(kda_chunk_trace(&x, 32, 2, 0).is_err());
        assert!(kda_chunk_trace(&x, 32, 0, 2).is_err());
    }

    /// Speed check for the brief's requirement (run with --release --ignored).
    #[test]
    #[ignore]
    fn speed_t4096_k128_h2() {
        let seed = fresh_seed();
        let x = inputs(seed, &cfg(1, 4096, 2, 2, 128, 128), &default_gate);
        let t0 = std::time::Instant::now();
        let r = kda_recurrent(&x).unwrap();
        let t1 = std::time::Instant::now();
        let c = kda_chunked(&x, 64).unwrap();
        let t2 = std::time::Instant::now();
        eprintln!("recurrent {:?}, chunked {:?}", t1 - t0, t2 - t1);
        assert_close(&c, &r, 1e-9, "big");
    }
}
