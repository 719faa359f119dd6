//! Gated Multi-head Latent Attention (SEMANTICS.md section 2.4): prefill (MHA mode, decompressed K/V, sigmoid
//! output gate, bottom-right causal), its varlen wrapper, absorbed paged decode (MQA over the
//! shared latent cache) and the W_UV projection + gate epilogue. Softmax and sums in f64; `lse` is
//! the natural-log log-sum-exp of the scaled scores, +inf (with o = 0) for a query that sees no key.

use crate::error::{RefError, check_len, ensure, prod};
use crate::gemm::sigmoid;
use crate::metrics::ToF64;

/// Softmax-weighted value sum for one query: `scores[j]` (already scaled) over visible keys,
/// `value(j)` the key's value row. Returns (o, lse); no keys gives (zeros, +inf).
fn attend<'v>(scores: &[f64], value: impl Fn(usize) -> &'v [f32], dv: usize) -> (Vec<f64>, f64) {
    let mut o = vec![0f64; dv];
    if scores.is_empty() {
        return (o, f64::INFINITY);
    }
    let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0f64;
    for (j, &sc) in scores.iter().enumerate() {
        let p = (sc - m).exp();
        sum += p;
        for (oo, &vv) in o.iter_mut().zip(value(j)) {
            *oo += p * vv as f64;
        }
    }
    o.iter_mut().for_each(|x| *x /= sum);
    (o, m + sum.ln())
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// Number of keys query `i` of `n_q` may see out of `n_k` (bottom-right aligned causal: keys
/// `j <= i + n_k - n_q`), or all `n_k` when not causal.
pub fn visible_keys(i: usize, n_q: usize, n_k: usize, causal: bool) -> usize {
    if !causal {
        return n_k;
    }
    let lim = i as i64 + n_k as i64 - n_q as i64; // last visible key index
    (lim + 1).clamp(0, n_k as i64) as usize
}

/// Gated MLA prefill for one sequence: `o = softmax(scale q k^T) v * sigmoid(z)` per head.
/// `q: [t, h, dqk]`, `k: [s, h, dqk]`, `v: [s, h, dv]`, optional gate logits `z: [t, h, dv]`;
/// causal uses bottom-right alignment (query i sees keys `j <= i + s - t`). Returns
/// `(o: [t, h, dv], lse: [h, t])`; a query with no visible key gets o = 0 and lse = +inf.
#[allow(clippy::too_many_arguments)]
pub fn mla_prefill(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    z: Option<&[f32]>,
    t: usize,
    s: usize,
    h: usize,
    dqk: usize,
    dv: usize,
    scale: f64,
    causal: bool,
) -> Result<(Vec<f64>, Vec<f64>), RefError> {
    check_len("q", q.len(), "[T, H, DQK]", &[t, h, dqk])?;
    check_len("k", k.len(), "[S, H, DQK]", &[s, h, dqk])?;
    check_len("v", v.len(), "[S, H, DV]", &[s, h, dv])?;
    if let Some(z) = z {
        check_len("z", z.len(), "[T, H, DV]", &[t, h, dv])?;
    }
    ensure(scale.is_finite(), "scale", || format!("must be finite, got {scale}"))?;
    let mut o = vec![0f64; prod("o", &[t, h, dv])?];
    let mut lse = vec![0f64; t * h];
    for hh in 0..h {
        for i in 0..t {
            let qi = &q[(i * h + hh) * dqk..(i * h + hh + 1) * dqk];
            let nk = visible_keys(i, t, s, causal);
            let scores: Vec<f64> =
                (0..nk).map(|j| scale * dot(qi, &k[(j * h + hh) * dqk..(j * h + hh + 1) * dqk])).collect();
            let (oi, l) = attend(&scores, |j| &v[(j * h + hh) * dv..(j * h + hh + 1) * dv], dv);
            let base = (i * h + hh) * dv;
            for (c, val) in oi.into_iter().enumerate() {
                let gate = z.map_or(1.0, |z| sigmoid(z[base + c] as f64));
                o[base + c] = val * gate;
            }
            lse[hh * t + i] = l;
        }
    }
    Ok((o, lse))
}

fn check_cu(arg: &'static str, cu: &[usize]) -> Result<(), RefError> {
    ensure(!cu.is_empty() && cu[0] == 0, arg, || format!("must start with 0, got {cu:?}"))?;
    ensure(cu.windows(2).all(|w| w[0] <= w[1]), arg, || format!("must be non-decreasing, got {cu:?}"))
}

/// Varlen gated MLA prefill: sequence n owns query rows `cu_seqlens_q[n]..cu_seqlens_q[n+1]` and
/// key rows `cu_seqlens_k[n]..cu_seqlens_k[n+1]`; each is [`mla_prefill`] on its own (causal
/// bottom-right within the sequence). `q: [total_q, h, dqk]`, `k: [total_k, h, dqk]`,
/// `v: [total_k, h, dv]`, `z: [total_q, h, dv]`; returns `(o: [total_q, h, dv], lse: [h, total_q])`.
#[allow(clippy::too_many_arguments)]
pub fn mla_prefill_varlen(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    z: Option<&[f32]>,
    cu_seqlens_q: &[usize],
    cu_seqlens_k: &[usize],
    h: usize,
    dqk: usize,
    dv: usize,
    scale: f64,
    causal: bool,
) -> Result<(Vec<f64>, Vec<f64>), RefError> {
    check_cu("cu_seqlens_q", cu_seqlens_q)?;
    check_cu("cu_seqlens_k", cu_seqlens_k)?;
    ensure(cu_seqlens_q.len() == cu_seqlens_k.len(), "cu_seqlens_k", || {
        format!("needs as many entries as cu_seqlens_q ({}), got {}", cu_seqlens_q.len(), cu_seqlens_k.len())
    })?;
    let tq = *cu_seqlens_q.last().unwrap();
    let tk = *cu_seqlens_k.last().unwrap();
    check_len("q", q.len(), "[total_q, H, DQK]", &[tq, h, dqk])?;
    check_len("k", k.len(), "[total_k, H, DQK]", &[tk, h, dqk])?;
    check_len("v", v.len(), "[total_k, H, DV]", &[tk, h, dv])?;
    if let Some(z) = z {
        check_len("z", z.len(), "[total_q, H, DV]", &[tq, h, dv])?;
    }
    let mut o = vec![0f64; tq * h * dv];
    let mut lse = vec![0f64; h * tq];
    for n in 0..cu_seqlens_q.len() - 1 {
        let (q0, q1) = (cu_seqlens_q[n], cu_seqlens_q[n + 1]);
        let (k0, k1) = (cu_seqlens_k[n], cu_seqlens_k[n + 1]);
        let (os, ls) = mla_prefill(
            &q[q0 * h * dqk..q1 * h * dqk],
            &k[k0 * h * dqk..k1 * h * dqk],
            &v[k0 * h * dv..k1 * h * dv],
            z.map(|z| &z[q0 * h * dv..q1 * h * dv]),
            q1 - q0,
            k1 - k0,
            h,
            dqk,
            dv,
            scale,
            causal,
        )?;
        o[q0 * h * dv..q1 * h * dv].copy_from_slice(&os);
        for hh in 0..h {
            lse[hh * tq + q0..hh * tq + q1].copy_from_slice(&ls[hh * (q1 - q0)..(hh + 1) * (q1 - q0)]);
        }
    }
    Ok((o, lse))
}

/// Absorbed MLA decode over a paged latent cache (MQA, one shared KV head).
/// `q: [b, s_q, h, d]` (d = 576: 512 latent + 64 rope, or any d), `kv_cache: [num_blocks,
/// block_size, d]`, `block_table: [b, max_blocks]` (max_blocks = `block_table.len() / b`),
/// `cache_seqlens: [b]`. Key j of request r lives at row `j % block_size` of physical block
/// `block_table[r, j / block_size]`; scores use all d dims, values are the first `dv` dims.
/// Query i of s_q sees keys `[0, S_k - s_q + i]` (bottom-right causal). Returns
/// `(o: [b, s_q, h, dv], lse: [b, h, s_q])`; no visible key gives o = 0, lse = +inf. Errors on any
/// negative length, or a block index read that is out of range.
#[allow(clippy::too_many_arguments)]
pub fn mla_decode_paged(
    q: &[f32],
    kv_cache: &[f32],
    block_table: &[i32],
    cache_seqlens: &[i32],
    b: usize,
    s_q: usize,
    h: usize,
    d: usize,
    dv: usize,
    block_size: usize,
    scale: f64,
) -> Result<(Vec<f64>, Vec<f64>), RefError> {
    ensure(d > 0 && dv <= d, "dv", || format!("need 0 < D and DV <= D, got D = {d}, DV = {dv}"))?;
    ensure(block_size > 0, "block_size", || "must be positive".into())?;
    ensure(scale.is_finite(), "scale", || format!("must be finite, got {scale}"))?;
    check_len("q", q.len(), "[B, s_q, H, D]", &[b, s_q, h, d])?;
    check_len("cache_seqlens", cache_seqlens.len(), "[B]", &[b])?;
    let row = block_size * d;
    ensure(kv_cache.len().is_multiple_of(row), "kv_cache", || {
        format!("length {} is not a multiple of block_size * D = {row}", kv_cache.len())
    })?;
    let num_blocks = kv_cache.len() / row;
    ensure(b == 0 || block_table.len().is_multiple_of(b), "block_table", || {
        format!("length {} is not a multiple of B = {b}", block_table.len())
    })?;
    let max_blocks = block_table.len().checked_div(b).unwrap_or(0);
    // Resolve every key's cache row up front (validating lengths and block indices).
    let mut rows: Vec<Vec<usize>> = Vec::with_capacity(b);
    for (r, &len) in cache_seqlens.iter().enumerate() {
        ensure(len >= 0, "cache_seqlens", || format!("cache_seqlens[{r}] = {len} is negative"))?;
        let len = len as usize;
        let need = len.div_ceil(block_size);
        ensure(need <= max_blocks, "block_table", || {
            format!("request {r} needs {need} blocks for {len} keys but max_blocks = {max_blocks}")
        })?;
        let mut rr = Vec::with_capacity(len);
        for j in 0..len {
            let blk = block_table[r * max_blocks + j / block_size];
            ensure(blk >= 0 && (blk as usize) < num_blocks, "block_table", || {
                format!("block_table[{r}, {}] = {blk} is outside 0..{num_blocks}", j / block_size)
            })?;
            rr.push(blk as usize * block_size + j % block_size);
        }
        rows.push(rr);
    }
    let mut o = vec![0f64; prod("o", &[b, s_q, h, dv])?];
    let mut lse = vec![0f64; b * h * s_q];
    for (r, rr) in rows.iter().enumerate() {
        for i in 0..s_q {
            let nk = visible_keys(i, s_q, rr.len(), true);
            for hh in 0..h {
                let qo = ((r * s_q + i) * h + hh) * d;
                let qi = &q[qo..qo + d];
                let scores: Vec<f64> =
                    rr[..nk].iter().map(|&kr| scale * dot(qi, &kv_cache[kr * d..(kr + 1) * d])).collect();
                let (oi, l) = attend(&scores, |j| &kv_cache[rr[j] * d..rr[j] * d + dv], dv);
                let oo = ((r * s_q + i) * h + hh) * dv;
                o[oo..oo + dv].copy_from_slice(&oi);
                lse[(r * h + hh) * s_q + i] = l;
            }
        }
    }
    Ok((o, lse))
}

/// The post-attention epilogue of absorbed decode: `o[t, h, j] = sigmoid(z[t, h, j]) *
/// sum_c w_uv[h, j, c] * o_latent[t, h, c]` (no gate if `z` is `None`). `o_latent: [t, h, dl]`
/// (any of f32/f64/bf16), `w_uv: [h, dv, dl]`, `z: [t, h, dv]`; returns `[t, h, dv]`.
#[allow(clippy::too_many_arguments)]
pub fn gate_wuv<T: ToF64>(
    o_latent: &[T],
    w_uv: &[f32],
    z: Option<&[f32]>,
    t: usize,
    h: usize,
    dl: usize,
    dv: usize,
) -> Result<Vec<f64>, RefError> {
    check_len("o_latent", o_latent.len(), "[T, H, DL]", &[t, h, dl])?;
    check_len("w_uv", w_uv.len(), "[H, DV, DL]", &[h, dv, dl])?;
    if let Some(z) = z {
        check_len("z", z.len(), "[T, H, DV]", &[t, h, dv])?;
    }
    let mut o = vec![0f64; t * h * dv];
    for ti in 0..t {
        for hh in 0..h {
            let ol = &o_latent[(ti * h + hh) * dl..(ti * h + hh + 1) * dl];
            for j in 0..dv {
                let w = &w_uv[(hh * dv + j) * dl..(hh * dv + j + 1) * dl];
                let acc: f64 = ol.iter().zip(w).map(|(a, &b)| a.to_f64() * b as f64).sum();
                let idx = (ti * h + hh) * dv + j;
                o[idx] = acc * z.map_or(1.0, |z| sigmoid(z[idx] as f64));
            }
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::rel_l2;
    use crate::random::{bf16_normal, block_table, fresh_seed, seeded};

    #[test]
    fn hand_checked_causal_and_lonely() {
        let e = 1f64.exp();
        // T = 2, S = 3, one head, d = 1, scale 1: q = [1, 1], k = [0, 1, 2], v = [1, 2, 3]
        let (o, lse) =
            mla_prefill(&[1.0, 1.0], &[0.0, 1.0, 2.0], &[1.0, 2.0, 3.0], None, 2, 3, 1, 1, 1, 1.0, true).unwrap();
        assert!((o[0] - (1.0 + 2.0 * e) / (1.0 + e)).abs() < 1e-14); // keys 0, 1
        assert!((lse[0] - (1.0 + e).ln()).abs() < 1e-14);
        let z3 = 1.0 + e + e * e;
        assert!((o[1] - (1.0 + 2.0 * e + 3.0 * e * e) / z3).abs() < 1e-14);
        assert!((lse[1] - z3.ln()).abs() < 1e-14);
        // gate z = 0 halves; non-causal sees everything
        let (og, _) =
            mla_prefill(&[1.0, 1.0], &[0.0, 1.0, 2.0], &[1.0, 2.0, 3.0], Some(&[0.0, 0.0]), 2, 3, 1, 1, 1, 1.0, false)
                .unwrap();
        assert!((og[0] - 0.5 * o[1]).abs() < 1e-14 && (og[1] - 0.5 * o[1]).abs() < 1e-14);
        // T = 3 > S = 1: queries 0 and 1 see nothing
        let (o, lse) = mla_prefill(&[1.0; 3], &[1.0], &[5.0], None, 3, 1, 1, 1, 1, 1.0, true).unwrap();
        assert_eq!(o, vec![0.0, 0.0, 5.0]);
        assert_eq!(lse, vec![f64::INFINITY, f64::INFINITY, 1.0]);
        // S = 0
        let (o, lse) = mla_prefill(&[1.0; 2], &[], &[], None, 2, 0, 1, 1, 1, 1.0, false).unwrap();
        assert_eq!((o, lse), (vec![0.0; 2], vec![f64::INFINITY; 2]));
        assert_eq!(visible_keys(0, 4, 4, true), 1);
        assert_eq!(visible_keys(3, 4, 10, true), 10);
    }

    #[test]
    fn causal_mask_ignores_future_keys() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let (t, s, h, dqk, dv) = (5, 9, 2, 6, 4);
        let q = bf16_normal(&mut rng, t * h * dqk, 1.0);
        let k = bf16_normal(&mut rng, s * h * dqk, 1.0);
        let mut v = bf16_normal(&mut rng, s * h * dv, 1.0);
        let (o1, l1) = mla_prefill(&q, &k, &v, None, t, s, h, dqk, dv, 0.4, true).unwrap();
        // query 2 sees keys 0..=6; perturb values of key 7 and 8
        for x in &mut v[7 * h * dv..] {
            *x += 10.0;
        }
        let (o2, l2) = mla_prefill(&q, &k, &v, None, t, s, h, dqk, dv, 0.4, true).unwrap();
        assert_eq!(&o1[..3 * h * dv], &o2[..3 * h * dv], "seed {seed}");
        assert_ne!(&o1[4 * h * dv..], &o2[4 * h * dv..], "seed {seed}");
        assert_eq!(l1, l2);
    }

    #[test]
    fn varlen_equals_per_sequence() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let (h, dqk, dv) = (2, 5, 3);
        let cq = [0usize, 3, 3, 10];
        let ck = [0usize, 4, 6, 12];
        let q = bf16_normal(&mut rng, 10 * h * dqk, 1.0);
        let k = bf16_normal(&mut rng, 12 * h * dqk, 1.0);
        let v = bf16_normal(&mut rng, 12 * h * dv, 1.0);
        let z = bf16_normal(&mut rng, 10 * h * dv, 1.0);
        let (o, lse) = mla_prefill_varlen(&q, &k, &v, Some(&z), &cq, &ck, h, dqk, dv, 0.5, true).unwrap();
        for n in [0usize, 2] {
            let (a, b, c, d) = (cq[n], cq[n + 1], ck[n], ck[n + 1]);
            let (os, ls) = mla_prefill(
                &q[a * h * dqk..b * h * dqk],
                &k[c * h * dqk..d * h * dqk],
                &v[c * h * dv..d * h * dv],
                Some(&z[a * h * dv..b * h * dv]),
                b - a,
                d - c,
                h,
                dqk,
                dv,
                0.5,
                true,
            )
            .unwrap();
            assert_eq!(&o[a * h * dv..b * h * dv], &os[..], "seed {seed}");
            for hh in 0..h {
                assert_eq!(&lse[hh * 10 + a..hh * 10 + b], &ls[hh * (b - a)..(hh + 1) * (b - a)]);
            }
        }
        assert!(mla_prefill_varlen(&q, &k, &v, None, &cq, &ck[..3], h, dqk, dv, 0.5, true).is_err());
        assert!(mla_prefill_varlen(&q, &k, &v, None, &[0, 5, 3, 10], &ck, h, dqk, dv, 0.5, true).is_err());
    }

    /// Prefill on decompressed K/V equals absorbed decode on the latent cache + W_UV + gate.
    #[test]
    fn prefill_equals_absorbed_decode() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let (h, dc, dn, dr, dvh) = (3, 32, 8, 4, 8);
        let (s_q, bs) = (3, 16);
        let lens = [37usize, 0, 2, 16];
        let b = lens.len();
        let (table, max_blocks, num_blocks) = block_table(&mut rng, &lens, bs, 3);
        let d = dc + dr;
        let mut cache = bf16_normal(&mut rng, num_blocks * bs * d, 1.0);
        let w_uk = bf16_normal(&mut rng, h * dn * dc, 0.2);
        let w_uv = bf16_normal(&mut rng, h * dvh * dc, 0.2);
        let scale = 1.0 / ((dn + dr) as f64).sqrt();
        let mut q_abs = vec![0f32; b * s_q * h * d];
        let mut z_all = vec![0f32; b * s_q * h * dvh];
        let mut want_o = vec![0f64; b * s_q * h * dvh];
        let mut want_lse = vec![0f64; b * h * s_q];
        for (r, &len) in lens.iter().enumerate() {
            // this request's latents, read back through the block table
            let key_row = |j: usize| (table[r * max_blocks + j / bs] as usize * bs + j % bs) * d;
            let lat: Vec<f32> = (0..len).flat_map(|j| cache[key_row(j)..key_row(j) + d].to_vec()).collect();
            let qn = bf16_normal(&mut rng, s_q * h * dn, 1.0);
            let qr = bf16_normal(&mut rng, s_q * h * dr, 1.0);
            let z = bf16_normal(&mut rng, s_q * h * dvh, 1.0);
            z_all[r * s_q * h * dvh..(r + 1) * s_q * h * dvh].copy_from_slice(&z);
            // decompressed q, k, v (per head: k = [W_UK c ; k_rope], v = W_UV c)
            let mut q = vec![0f32; s_q * h * (dn + dr)];
            let mut k = vec![0f32; len * h * (dn + dr)];
            let mut v = vec![0f32; len * h * dvh];
            for hh in 0..h {
                for i in 0..s_q {
                    let qo = (i * h + hh) * (dn + dr);
                    q[qo..qo + dn].copy_from_slice(&qn[(i * h + hh) * dn..(i * h + hh + 1) * dn]);
                    q[qo + dn..qo + dn + dr].copy_from_slice(&qr[(i * h + hh) * dr..(i * h + hh + 1) * dr]);
                    // absorbed query: [W_UK^T q_nope ; q_rope]
                    let ao = ((r * s_q + i) * h + hh) * d;
                    for c in 0..dc {
                        q_abs[ao + c] = (0..dn)
                            .map(|n| w_uk[(hh * dn + n) * dc + c] as f64 * qn[(i * h + hh) * dn + n] as f64)
                            .sum::<f64>() as f32;
                    }
                    q_abs[ao + dc..ao + d].copy_from_slice(&qr[(i * h + hh) * dr..(i * h + hh + 1) * dr]);
                }
                for j in 0..len {
                    let c = &lat[j * d..j * d + dc];
                    let ko = (j * h + hh) * (dn + dr);
                    for n in 0..dn {
                        k[ko + n] = dot(&w_uk[(hh * dn + n) * dc..(hh * dn + n + 1) * dc], c) as f32;
                    }
                    k[ko + dn..ko + dn + dr].copy_from_slice(&lat[j * d + dc..(j + 1) * d]);
                    for n in 0..dvh {
                        v[(j * h + hh) * dvh + n] = dot(&w_uv[(hh * dvh + n) * dc..(hh * dvh + n + 1) * dc], c) as f32;
                    }
                }
            }
            let (o, lse) = mla_prefill(&q, &k, &v, Some(&z), s_q, len, h, dn + dr, dvh, scale, true).unwrap();
            want_o[r * s_q * h * dvh..(r + 1) * s_q * h * dvh].copy_from_slice(&o);
            want_lse[r * h * s_q..(r + 1) * h * s_q].copy_from_slice(&lse);
        }
        let seqlens: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
        let (ol, lse) = mla_decode_paged(&q_abs, &cache, &table, &seqlens, b, s_q, h, d, dc, bs, scale).unwrap();
        let o = gate_wuv(&ol, &w_uv, Some(&z_all), b * s_q, h, dc, dvh).unwrap();
        assert!(rel_l2(&o, &want_o) < 1e-5, "seed {seed}: rel {}", rel_l2(&o, &want_o));
        for (i, (&a, &w)) in lse.iter().zip(&want_lse).enumerate() {
            assert!(a == w || (a - w).abs() < 1e-5 * w.abs().max(1.0), "seed {seed} lse {i}: {a} vs {w}");
        }
        // request 1 is empty, request 2 (2 keys, s_q = 3) has a lonely first query
        assert!(lse[h * s_q..2 * h * s_q].iter().all(|&l| l == f64::INFINITY));
        assert!(ol[s_q * h * dc..2 * s_q * h * dc].iter().all(|&x| x == 0.0));
        assert_eq!(lse[2 * h * s_q], f64::INFINITY);
        assert!(lse[2 * h * s_q + 1].is_finite());
        // out-of-range block index and short tables are rejected
        let mut bad = table.clone();
        bad[0] = num_blocks as i32;
        assert!(mla_decode_paged(&q_abs, &cache, &bad, &seqlens, b, s_q, h, d, dc, bs, scale).is_err());
        bad[0] = -1;
        assert!(mla_decode_paged(&q_abs, &cache, &bad, &seqlens, b, s_q, h, d, dc, bs, scale).is_err());
        let long = [1000, 0, 2, 16];
        assert!(mla_decode_paged(&q_abs, &cache, &table, &long, b, s_q, h, d, dc, bs, scale).is_err());
        let neg = [-1, 0, 2, 16];
        assert!(mla_decode_paged(&q_abs, &cache, &table, &neg, b, s_q, h, d, dc, bs, scale).is_err());
        cache.pop();
        assert!(mla_decode_paged(&q_abs, &cache, &table, &seqlens, b, s_q, h, d, dc, bs, scale).is_err());
    }
}
