//! The f64 checks of every op, on a sampled subset of its output, from the inputs the GPU gave it.
//!
//! Each check reads the op's inputs back from the device (the outputs of the k3k op before it, not the engine's
//! re-layouts, so a wrong cast, concat or gather shows up too), runs `k3k-reference` in f64 on the sampled rows,
//! sequences or heads, and compares with the op's output (relative L2, SEMANTICS.md section 3).

use crate::config::*;
use crate::dev::Buf;
use crate::engine::Routing;
use crate::host::*;
use crate::weights::{Experts, Lin};
use k3k_build::reference::gemm::{self as rg, Epilogue};
use k3k_build::reference::kda::{KdaInputs, gate_safe, kda_recurrent};
use k3k_build::rt::cudarc::driver::CudaStream;
use std::sync::Arc;

/// bf16 outputs: relative L2 within this of the f64 reference.
pub const TOL: f64 = 5e-3;

/// Where checks go: the stream the buffers live on, the report and the stage of the rows.
pub struct Checker<'a> {
    pub s: &'a Arc<CudaStream>,
    pub rep: &'a mut Report,
    pub stage: &'static str,
}

/// The rows `rows` of `b` (each the trailing dims), concatenated.
pub fn rows_of(s: &Arc<CudaStream>, b: &Buf, rows: &[usize]) -> Res<Vec<f32>> {
    let mut out = vec![];
    for &r in rows {
        out.extend(b.fetch_rows(s, r..r + 1)?);
    }
    Ok(out)
}

impl Checker<'_> {
    /// Record a row of the report in this stage.
    pub fn row(&mut self, op: &str, shape: &str, err: f64, tol: f64, what: &str) {
        self.rep.add(self.stage, op, shape, err, tol, what);
    }

    /// `y = x w^T` on the sampled rows.
    pub fn linear(&mut self, what: &str, x: &Buf, w: &Lin, y: &Buf, rows: &[usize]) -> Res<()> {
        let s = self.s;
        let (xr, yr) = (rows_of(s, x, rows)?, rows_of(s, y, rows)?);
        let want = rg::matmul_nt(&xr, rows.len(), w.k, &w.h, w.n)?;
        let shape = format!("M{} K{} N{}", x.shape[0], w.k, w.n);
        self.row(&format!("linear {what}"), &shape, err(&yr, &want), TOL, &format!("{} rows", rows.len()));
        Ok(())
    }

    /// `out = bf16(a + b)` on the sampled rows.
    pub fn add(&mut self, a: &Buf, b: &Buf, out: &Buf, rows: &[usize]) -> Res<()> {
        let s = self.s;
        let (ar, br, or) = (rows_of(s, a, rows)?, rows_of(s, b, rows)?, rows_of(s, out, rows)?);
        let want: Vec<f64> = ar.iter().zip(&br).map(|(x, y)| bf16(&[*x as f64 + *y as f64])[0] as f64).collect();
        self.row("residual add (engine)", &shape_text(&out.shape), err(&or, &want), 1e-4, "bf16(a + b)");
        Ok(())
    }
}

/// One KDA (sequence, head) pair: its rows of the projections and its output/state, for the reference.
pub struct KdaPair {
    pub seq: usize,
    pub head: usize,
}

/// The KDA inputs as the projections wrote them (bf16 `[T, H*128]` each, beta `[T, H]` logits), the layer's
/// gate bias, and the op's outputs `o [T, H, 128]` and final states `[N, H, 128, 128]`; checked on `pairs`
/// from the initial states `h0` (`None`: zeros) over the sequences `cu` (row offsets).
pub struct KdaCheck<'a> {
    pub q: &'a Buf,
    pub k: &'a Buf,
    pub v: &'a Buf,
    pub g: &'a Buf,
    pub beta: &'a Buf,
    pub bias: &'a [f32],
    pub o: &'a Buf,
    pub ht: &'a Buf,
    pub h0: Option<&'a [f32]>,
    pub cu: &'a [usize],
}

impl KdaCheck<'_> {
    /// Relative L2 errors of (o, final state) over `pairs`.
    pub fn run(&self, s: &Arc<CudaStream>, pairs: &[KdaPair]) -> Res<(f64, f64)> {
        let d = HEAD_DIM;
        let (mut go, mut wo, mut gs, mut ws) = (vec![], vec![], vec![], vec![]);
        let ht = self.ht.fetch(s)?;
        // The sequence's rows of q, k, v, g, beta and o, read once for all of its pairs.
        let mut seq_rows: Option<(usize, [Vec<f32>; 6])> = None;
        for p in pairs {
            let (r0, r1) = (self.cu[p.seq], self.cu[p.seq + 1]);
            let t = r1 - r0;
            if seq_rows.as_ref().is_none_or(|(seq, _)| *seq != p.seq) {
                let bufs = [self.q, self.k, self.v, self.g, self.beta, self.o];
                let fetched: Vec<Vec<f32>> = bufs.iter().map(|b| b.fetch_rows(s, r0..r1)).collect::<Res<_>>()?;
                seq_rows = Some((p.seq, fetched.try_into().map_err(|_| "six buffers")?));
            }
            let [q, k, v, graw, beta, o] = &seq_rows.as_ref().expect("fetched above").1;
            let head = |all: &[f32], w: usize| -> Vec<f32> {
                (0..t).flat_map(|i| all[(i * HEADS + p.head) * w..(i * HEADS + p.head + 1) * w].to_vec()).collect()
            };
            let bias = &self.bias[p.head * d..(p.head + 1) * d];
            let g: Vec<f32> = head(graw, d)
                .iter()
                .enumerate()
                .map(|(i, &x)| gate_safe(x as f64, bias[i % d] as f64, KDA_LB as f64) as f32)
                .collect();
            let b: Vec<f32> = head(beta, 1).iter().map(|&x| rg::sigmoid(x as f64) as f32).collect();
            let mut inp = KdaInputs::new(1, t, 1, 1, d, d, head(q, d), head(k, d), head(v, d), g, b);
            inp.use_qk_l2norm = true;
            inp.scale = Some(kda_scale() as f64);
            let st = (p.seq * HEADS + p.head) * d * d;
            inp.h0 = self.h0.map(|h| h[st..st + d * d].to_vec());
            let r = kda_recurrent(&inp)?;
            go.extend(head(o, d));
            wo.extend(r.o);
            gs.extend_from_slice(&ht[st..st + d * d]);
            ws.extend(r.final_state);
        }
        Ok((err(&go, &wo), err(&gs, &ws)))
    }
}

/// The query scale of KDA (K^-1/2).
pub fn kda_scale() -> f32 {
    (1.0 / (HEAD_DIM as f64).sqrt()) as f32
}

/// The softmax scale of MLA (over the 192 q/k dims of a head).
pub fn mla_scale() -> f32 {
    (1.0 / (MLA_DQK as f64).sqrt()) as f32
}

/// The routing against the host's recomputation from the GPU's scores and bias: the choices and the grouping
/// exactly, the weights within f32 rounding. Returns the number of mismatches.
pub fn routing(s: &Arc<CudaStream>, r: &Routing, bias: &[f32]) -> Res<usize> {
    let sc = r.s.fetch(s)?;
    let t = r.s.shape[0];
    let (choice, w) = (r.choice.fetch_i32(s)?, r.w.fetch(s)?);
    let (offs, row_of, tok_of, p) =
        (r.offs.fetch_i32(s)?, r.row_of.fetch_i32(s)?, r.tok_of.fetch_i32(s)?, r.p.fetch(s)?);
    let mut bad = 0;
    let mut rows: Vec<Vec<(usize, f32)>> = vec![vec![]; EXPERTS];
    for ti in 0..t {
        let row = &sc[ti * EXPERTS..(ti + 1) * EXPERTS];
        let mut idx: Vec<usize> = (0..EXPERTS).collect();
        // Descending s + bias, ties to the lower index (the engine kernel's rule).
        idx.sort_by(|&a, &b| (row[b] + bias[b]).total_cmp(&(row[a] + bias[a])).then(a.cmp(&b)));
        let sum: f32 = idx[..TOP_K].iter().map(|&e| row[e]).sum();
        for (j, &e) in idx[..TOP_K].iter().enumerate() {
            let i = ti * TOP_K + j;
            bad += usize::from(choice[i] != e as i32);
            bad += usize::from((w[i] - row[e] / sum).abs() > 1e-6);
            rows[e].push((i, w[i]));
        }
    }
    let mut end = 0;
    for (e, rs) in rows.iter().enumerate() {
        for (j, &(i, wi)) in rs.iter().enumerate() {
            let pos = end + j;
            bad += usize::from(row_of[i] != pos as i32 || tok_of[pos] != (i / TOP_K) as i32 || p[pos] != wi);
        }
        end += rs.len();
        bad += usize::from(offs[e] != end as i32);
    }
    Ok(bad)
}

/// The expert of row `r` given the inclusive group ends.
pub fn expert_of(offs: &[i32], r: usize) -> usize {
    offs.iter().position(|&o| r < o as usize).unwrap_or(offs.len() - 1)
}

/// One grouped MXFP4 GEMM on the sampled rows: `y[r] = p[r]? * epi(x[r] w[e(r)]^T)`.
#[allow(clippy::too_many_arguments)]
pub fn experts(
    ck: &mut Checker,
    what: &str,
    x: &Buf,
    w: &Experts,
    r: &Routing,
    p: bool,
    epi: Epilogue,
    y: &Buf,
    rows: &[usize],
) -> Res<()> {
    let s = ck.s;
    let offs = r.offs.fetch_i32(s)?;
    let pv = r.p.fetch(s)?;
    let (xr, yr) = (rows_of(s, x, rows)?, rows_of(s, y, rows)?);
    let mut want = vec![];
    for (i, &row) in rows.iter().enumerate() {
        let e = expert_of(&offs, row);
        let pr = [pv[row]];
        let one =
            rg::grouped_gemm(&xr[i * w.k..(i + 1) * w.k], 1, w.k, w.of(e), 1, w.n, &[1], p.then_some(&pr[..]), epi)?;
        want.extend(one);
    }
    let shape = format!("M{} K{} N{} G{EXPERTS}", x.shape[0], w.k, w.n);
    ck.row(what, &shape, err(&yr, &want), TOL, &format!("{} rows", rows.len()));
    Ok(())
}

/// The combine of the routed rows on the sampled tokens.
pub fn combine(ck: &mut Checker, y2: &Buf, r: &Routing, out: &Buf, tokens: &[usize]) -> Res<()> {
    let s = ck.s;
    let row_of = r.row_of.fetch_i32(s)?;
    let l = out.shape[1];
    let got = rows_of(s, out, tokens)?;
    let mut want = vec![];
    for &t in tokens {
        let mut acc = vec![0f64; l];
        for j in 0..TOP_K {
            let row = y2.fetch_rows(s, row_of[t * TOP_K + j] as usize..row_of[t * TOP_K + j] as usize + 1)?;
            acc.iter_mut().zip(&row).for_each(|(a, &v)| *a += v as f64);
        }
        want.extend(acc);
    }
    ck.row("combine (engine)", &shape_text(&out.shape), err(&got, &want), TOL, &format!("{} tokens", tokens.len()));
    Ok(())
}
