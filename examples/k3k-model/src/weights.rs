//! The model's weights: seeded random values at K3's widths, kept on the host (what the f64 checks read) and
//! uploaded once (bf16, or MXFP4 codes and scales for the experts).

use crate::config::*;
use crate::dev::Buf;
use crate::host::{Res, Rng};
use k3k_build::reference::mx::{self as rmx, MxFormat, ScaleRule};
use k3k_build::rt::DType;
use k3k_build::rt::cudarc::driver::CudaStream;
use std::sync::Arc;

/// `n` draws of N(0, std^2) rounded to bf16, generated in parallel chunks (each chunk its own seeded stream,
/// so the values depend on the seed only).
pub fn normal(seed: u64, n: usize, std: f64) -> Vec<f32> {
    const CHUNK: usize = 1 << 20;
    let mut out = vec![0f32; n];
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let chunks: Vec<(usize, &mut [f32])> = out.chunks_mut(CHUNK).enumerate().collect();
    let per = chunks.len().div_ceil(threads).max(1);
    let mut groups: Vec<Vec<(usize, &mut [f32])>> = vec![];
    let mut it = chunks.into_iter().peekable();
    while it.peek().is_some() {
        groups.push(it.by_ref().take(per).collect());
    }
    std::thread::scope(|sc| {
        for g in groups {
            sc.spawn(move || {
                for (i, c) in g {
                    let v = Rng::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).bf16_normal(c.len(), std);
                    c.copy_from_slice(&v);
                }
            });
        }
    });
    out
}

/// A dense bf16 weight `[n, k]` (y = x w^T).
pub struct Lin {
    pub h: Vec<f32>,
    pub d: Buf,
    pub n: usize,
    pub k: usize,
}

impl Lin {
    fn new(s: &Arc<CudaStream>, seed: u64, n: usize, k: usize) -> Res<Lin> {
        let h = normal(seed, n * k, (k as f64).powf(-0.5));
        let d = Buf::upload(s, DType::Bf16, &[n, k], &h)?;
        Ok(Lin { h, d, n, k })
    }
}

/// One KDA layer: the q, k, v and gate-input projections `[H*128, hidden]`, beta `[H, hidden]`, the output
/// projection `[hidden, H*128]`, and the gate bias `[H, 128]` f32.
pub struct KdaLayer {
    pub q: Lin,
    pub k: Lin,
    pub v: Lin,
    pub g: Lin,
    pub beta: Lin,
    pub o: Lin,
    pub bias_h: Vec<f32>,
    pub bias: Buf,
}

/// The gated MLA layer: q = (x W_qa) W_qb, latent c = x W_c, rope key kr = x W_kr, k_nope = c W_uk,
/// v = c W_uv, gate logits z = x W_z, output W_o; and the decode forms of W_uk and W_uv: `ukt [H, 512, 128]`
/// (W_uk per head, transposed: the absorbed query is a grouped GEMM) and `uv3 [H, 128, 512]`.
pub struct MlaLayer {
    pub qa: Lin,
    pub qb: Lin,
    pub c: Lin,
    pub kr: Lin,
    pub uk: Lin,
    pub uv: Lin,
    pub z: Lin,
    pub o: Lin,
    pub ukt: Buf,
    pub uv3: Buf,
}

/// MXFP4 expert weights `[E, N, K]`: codes, scales, and the dequantized values on the host.
pub struct Experts {
    pub q: Buf,
    pub sc: Buf,
    pub h: Vec<f32>,
    pub n: usize,
    pub k: usize,
}

impl Experts {
    fn new(s: &Arc<CudaStream>, seed: u64, n: usize, k: usize) -> Res<Experts> {
        let vals = normal(seed, EXPERTS * n * k, (k as f64).powf(-0.5));
        // Quantized per expert in parallel (the same bytes as one call over all rows: the blocks are per row).
        let parts: Vec<Result<(rmx::MxTensor, Vec<f32>), String>> = std::thread::scope(|sc| {
            let hs: Vec<_> = vals
                .chunks(n * k)
                .map(|w| {
                    sc.spawn(move || -> Result<(rmx::MxTensor, Vec<f32>), String> {
                        let q = rmx::quantize(w, n, k, MxFormat::Fp4, ScaleRule::Floor).map_err(|e| e.to_string())?;
                        let d = rmx::dequantize(&q).map_err(|e| e.to_string())?;
                        Ok((q, d))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("quantizer thread")).collect()
        });
        let (mut codes, mut scales, mut h) = (vec![], vec![], Vec::with_capacity(vals.len()));
        for p in parts {
            let (q, d) = p?;
            codes.extend_from_slice(&q.q);
            scales.extend_from_slice(&q.s);
            h.extend_from_slice(&d);
        }
        // The natural MXFP4 layout, its bytes read as little-endian u32 words: [E, N, K/8].
        let q = Buf::from_bytes(s, DType::U32, &[EXPERTS, n, k / 8], codes)?;
        let sc = Buf::from_bytes(s, DType::U8, &[EXPERTS, n, k / 32], scales)?;
        Ok(Experts { q, sc, h, n, k })
    }

    /// Expert `e`'s dequantized `[N, K]` weights.
    pub fn of(&self, e: usize) -> &[f32] {
        &self.h[e * self.n * self.k..(e + 1) * self.n * self.k]
    }
}

/// The LatentMoE layer: the latent down projection `[l, hidden]`, the router `[E, l]`, the experts (GEMM1
/// `[E, 2m, l]`, GEMM2 `[E, l, m]`, MXFP4) and the latent up projection `[hidden, l]`.
pub struct MoeLayer {
    pub down: Lin,
    pub router: Lin,
    pub up_glu: Experts,
    pub down_p: Experts,
    pub up: Lin,
}

pub struct Weights {
    pub kda: Vec<KdaLayer>,
    pub mla: MlaLayer,
    pub moe: MoeLayer,
}

impl Weights {
    pub fn new(s: &Arc<CudaStream>, seed: u64) -> Res<Weights> {
        let hd = HEADS * HEAD_DIM;
        let mut next = {
            let mut i = 0u64;
            move || {
                i += 1;
                seed.wrapping_mul(31).wrapping_add(i)
            }
        };
        let mut kda = vec![];
        for _ in 0..KDA_LAYERS {
            let bias_h = normal(next(), HEADS * HEAD_DIM, 0.5);
            kda.push(KdaLayer {
                q: Lin::new(s, next(), hd, HIDDEN)?,
                k: Lin::new(s, next(), hd, HIDDEN)?,
                v: Lin::new(s, next(), hd, HIDDEN)?,
                g: Lin::new(s, next(), hd, HIDDEN)?,
                beta: Lin::new(s, next(), HEADS, HIDDEN)?,
                o: Lin::new(s, next(), HIDDEN, hd)?,
                bias: Buf::upload(s, DType::F32, &[HEADS, HEAD_DIM], &bias_h)?,
                bias_h,
            });
        }
        let uk = Lin::new(s, next(), HEADS * MLA_NOPE, MLA_LATENT)?;
        let uv = Lin::new(s, next(), HEADS * MLA_DV, MLA_LATENT)?;
        let mut ukt = vec![0f32; uk.h.len()];
        for h in 0..HEADS {
            for j in 0..MLA_NOPE {
                for c in 0..MLA_LATENT {
                    ukt[(h * MLA_LATENT + c) * MLA_NOPE + j] = uk.h[(h * MLA_NOPE + j) * MLA_LATENT + c];
                }
            }
        }
        let mla = MlaLayer {
            qa: Lin::new(s, next(), MLA_Q_RANK, HIDDEN)?,
            qb: Lin::new(s, next(), HEADS * MLA_DQK, MLA_Q_RANK)?,
            c: Lin::new(s, next(), MLA_LATENT, HIDDEN)?,
            kr: Lin::new(s, next(), MLA_ROPE, HIDDEN)?,
            ukt: Buf::upload(s, DType::Bf16, &[HEADS, MLA_LATENT, MLA_NOPE], &ukt)?,
            uv3: Buf::upload(s, DType::Bf16, &[HEADS, MLA_DV, MLA_LATENT], &uv.h)?,
            uk,
            uv,
            z: Lin::new(s, next(), HEADS * MLA_DV, HIDDEN)?,
            o: Lin::new(s, next(), HIDDEN, HEADS * MLA_DV)?,
        };
        let moe = MoeLayer {
            down: Lin::new(s, next(), LATENT, HIDDEN)?,
            router: Lin::new(s, next(), EXPERTS, LATENT)?,
            up_glu: Experts::new(s, next(), 2 * INTER, LATENT)?,
            down_p: Experts::new(s, next(), LATENT, INTER)?,
            up: Lin::new(s, next(), HIDDEN, LATENT)?,
        };
        Ok(Weights { kda, mla, moe })
    }
}
