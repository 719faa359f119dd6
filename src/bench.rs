//! `k3k bench`: time each benchmark preset of an operator on the GPU, check the very run against the f64
//! reference, and write `results/bench/<gpu-slug>/<op>.json` + `.md` in the SPEC section 5 format. Peers
//! (torch, FLA) are timed by `scripts/peers.py` in the same device call on the same problems and merged in
//! with [`merge_peers`].

use k3k_ir::Knobs;
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::GpuExec;
use k3k_runtime::{TimingOptions, median};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Ceilings measured on the GPU (or the SPEC anchors when not measured in this run).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ceilings {
    /// Device-to-device copy bandwidth, bytes read + written, GB/s.
    pub hbm_gbps: f64,
    /// Dense bf16 tensor-core rate, TFLOP/s.
    pub bf16_tflops: f64,
    /// Where the numbers come from.
    pub source: String,
}

impl Default for Ceilings {
    fn default() -> Self {
        // SPEC section 4 anchors on the H200 (copy 4282 GB/s; the table's floors use 790 TFLOP/s).
        Ceilings { hbm_gbps: 4282.0, bf16_tflops: 790.0, source: "SPEC section 4 anchors (H200)".into() }
    }
}

/// One benchmark row (SPEC section 5).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchRow {
    pub preset: String,
    pub k3k_ms: f64,
    pub k3k_p20_ms: f64,
    pub k3k_p80_ms: f64,
    pub peer: String,
    pub peer_ms: Option<f64>,
    pub floor_ms: f64,
    pub tflops: f64,
    pub gbps: f64,
    pub max_rel_err: f64,
    pub check_scope: String,
    pub config: Knobs,
    pub flops: f64,
    pub bytes: f64,
    /// The exact problem (shapes, ragged counts) the peer runs.
    pub problem: serde_json::Value,
    /// Every knob set timed on this preset in this run: its median ms, or `None` (JSON `null`) when it failed
    /// its check or did not run (e.g. knobs that do not apply to the shape); the row reports the fastest that
    /// passed.
    #[serde(default)]
    pub variants: Vec<(Knobs, Option<f64>)>,
}

/// One operator's benchmark file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema: u32,
    pub op: String,
    pub gpu: String,
    pub date: String,
    pub k3k_commit: String,
    pub ceilings: Ceilings,
    pub rows: Vec<BenchRow>,
}

/// The peer a user would otherwise pick for an operator (SPEC section 4).
pub fn peer_name(op: &str) -> &'static str {
    match op.split('.').next().unwrap_or(op) {
        "latent_moe_gemm" => "torch._grouped_mm",
        "mxfp4_matmul" => "cuBLAS bf16 (torch)",
        "gated_mla" => "torch SDPA + sigmoid gate / torch bmm decode",
        "kda" => "FLA chunk_kda (Triton)",
        "hist_quantile" => "torch.kthvalue",
        _ => "none",
    }
}

/// The commit the binary was built from.
pub const COMMIT: &str = env!("K3K_COMMIT");

/// One knob set measured on one instance: its check and timing samples.
struct Measured {
    knobs: Knobs,
    check: k3k_ops::op::CheckReport,
    samples: Vec<f64>,
    /// With `K3K_BENCH_STEPS=1`: each kernel of a multi-kernel plan timed alone (name, median ms).
    steps: Vec<(String, f64)>,
}

fn measure(
    exec: &mut GpuExec,
    inst: &dyn k3k_ops::op::Instance,
    knobs: &Knobs,
    timing: TimingOptions,
) -> anyhow::Result<Measured> {
    let plan = inst.plan(knobs)?;
    exec.prepare(&plan)?;
    let dev = exec.upload(&plan)?;
    exec.launch_all(&plan, &dev)?;
    exec.gpu.sync()?;
    let out = exec.download(&plan, &dev)?;
    let check = inst.check(&out)?;
    let samples = exec.time(&plan, &dev, timing)?;
    // `K3K_BENCH_RETIME=n`: n more timing rounds on the same device buffers, logged to stderr (tells the spread of
    // re-timing one upload from the spread between uploads, i.e. between knob sets).
    let retime: usize = std::env::var("K3K_BENCH_RETIME").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    for r in 0..retime {
        let again = median(&exec.time(&plan, &dev, timing)?);
        eprintln!("    retime {r} (same buffers) {again:>9.4} ms [{knobs}]");
    }
    let mut steps = vec![];
    if plan.steps.len() > 1 && std::env::var("K3K_BENCH_STEPS").is_ok_and(|v| v == "1") {
        for s in &plan.steps {
            let one = k3k_ops::plan::Plan { buffers: vec![], steps: vec![s.clone()], ..Default::default() };
            steps.push((s.kernel.name.clone(), median(&exec.time(&one, &dev, timing)?)));
        }
    }
    Ok(Measured { knobs: knobs.clone(), check, samples, steps })
}

/// Time and check every preset of `op` under each knob set `knobs_for` lists (tuned or default first); the
/// row reports the fastest knob set whose run passed its check.
pub fn bench_op(
    exec: &mut GpuExec,
    op: &dyn Operator,
    presets: &[Preset],
    knobs_for: &dyn Fn(&Preset) -> Vec<Knobs>,
    timing: TimingOptions,
    ceilings: &Ceilings,
    log: &mut dyn FnMut(&str),
) -> anyhow::Result<BenchReport> {
    let mut rows = vec![];
    for (i, p) in presets.iter().enumerate() {
        let inst = op.instance(p, 0x006b_336b_0000 + i as u64)?;
        let mut best: Option<Measured> = None;
        let mut variants = vec![];
        for knobs in knobs_for(p) {
            match measure(exec, inst.as_ref(), &knobs, timing) {
                Ok(m) => {
                    let ms = median(&m.samples);
                    log(&format!(
                        "  {:<44} {:>9.4} ms rel {:.2e} {} [{}]",
                        p.name,
                        ms,
                        m.check.max_rel_err,
                        if m.check.passed { "ok" } else { "CHECK FAILED" },
                        knobs
                    ));
                    for (name, ms) in &m.steps {
                        log(&format!("    step {name:<58} {ms:>9.4} ms"));
                    }
                    variants.push((knobs.clone(), m.check.passed.then_some(ms)));
                    let better = match &best {
                        None => true,
                        Some(b) => {
                            (m.check.passed && !b.check.passed)
                                || (m.check.passed == b.check.passed && ms < median(&b.samples))
                        }
                    };
                    if better {
                        best = Some(m);
                    }
                }
                Err(e) => {
                    log(&format!("  {:<44} FAILED to run [{}]: {e:#}", p.name, knobs));
                    variants.push((knobs.clone(), None));
                }
            }
        }
        let Some(m) = best else {
            anyhow::bail!("{}: no knob set ran on preset `{}`", op.name(), p.name);
        };
        let mut sorted = m.samples.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |f: f64| sorted[((sorted.len() - 1) as f64 * f).round() as usize];
        let ms = median(&m.samples);
        let w = inst.work();
        let floor_ms = (w.flops / (ceilings.bf16_tflops * 1e9)).max(w.bytes / (ceilings.hbm_gbps * 1e6));
        let row = BenchRow {
            preset: p.name.clone(),
            k3k_ms: ms,
            k3k_p20_ms: q(0.2),
            k3k_p80_ms: q(0.8),
            peer: peer_name(op.name()).into(),
            peer_ms: None,
            floor_ms,
            tflops: w.flops / ms / 1e9,
            gbps: w.bytes / ms / 1e6,
            max_rel_err: m.check.max_rel_err,
            check_scope: if m.check.passed { m.check.scope.clone() } else { format!("FAILED: {}", m.check.detail) },
            config: m.knobs.clone(),
            flops: w.flops,
            bytes: w.bytes,
            problem: inst.problem(),
            variants,
        };
        log(&format!(
            "{:<44} {:>9.4} ms {:>7.1} TFLOP/s {:>7.0} GB/s floor {:>8.4} ms rel {:.2e} {}",
            p.name,
            ms,
            row.tflops,
            row.gbps,
            floor_ms,
            m.check.max_rel_err,
            if m.check.passed { "ok" } else { "CHECK FAILED" }
        ));
        rows.push(row);
    }
    Ok(BenchReport {
        schema: 1,
        op: op.name().into(),
        gpu: exec.gpu.info.name.clone(),
        date: k3k_tuner::record::utc_date_today(),
        k3k_commit: COMMIT.into(),
        ceilings: ceilings.clone(),
        rows,
    })
}

/// Render a report as a markdown table.
pub fn render_markdown(r: &BenchReport) -> String {
    let mut s = format!(
        "# {} on {} ({})\n\nk3k commit `{}`. Ceilings: {:.0} GB/s, {:.0} TFLOP/s bf16 ({}). Times are medians of CUDA-event \
         samples with an L2 flush before each; `rel err` is SPEC 3's relative L2 error of this very run against the f64 \
         CPU reference.\n\n| preset | k3k ms | peer | peer ms | speedup | floor ms | k3k / floor | TFLOP/s | GB/s | rel err | config |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        r.op, r.gpu, r.date, r.k3k_commit, r.ceilings.hbm_gbps, r.ceilings.bf16_tflops, r.ceilings.source
    );
    for row in &r.rows {
        let (peer_ms, speed) = match row.peer_ms {
            Some(p) => (format!("{p:.4}"), format!("{:.2}x", p / row.k3k_ms)),
            None => ("-".into(), "-".into()),
        };
        s.push_str(&format!(
            "| {} | {:.4} | {} | {} | {} | {:.4} | {:.2}x | {:.1} | {:.0} | {:.2e} | `{}` |\n",
            row.preset,
            row.k3k_ms,
            row.peer,
            peer_ms,
            speed,
            row.floor_ms,
            row.k3k_ms / row.floor_ms,
            row.tflops,
            row.gbps,
            row.max_rel_err,
            row.config
        ));
    }
    s
}

/// Where an operator's report lives.
pub fn report_path(dir: &Path, gpu_name: &str, op: &str) -> PathBuf {
    dir.join(crate::environment::gpu_slug(gpu_name)).join(format!("{op}.json"))
}

/// Write a report (JSON + markdown) atomically.
pub fn write_report(dir: &Path, r: &BenchReport) -> anyhow::Result<PathBuf> {
    let path = report_path(dir, &r.gpu, &r.op);
    std::fs::create_dir_all(path.parent().unwrap())?;
    write_atomic(&path, serde_json::to_string_pretty(r)?.as_bytes())?;
    write_atomic(&path.with_extension("md"), render_markdown(r).as_bytes())?;
    Ok(path)
}

/// Write a file atomically (a temporary beside it, then a rename).
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// Peer timings produced by `scripts/peers.py`: `{"ceilings": {...}, "rows": [{"op", "preset", "peer", "ms"}]}`.
#[derive(Clone, Debug, Deserialize)]
pub struct PeerFile {
    #[serde(default)]
    pub ceilings: Option<Ceilings>,
    pub rows: Vec<PeerRow>,
}

/// One peer timing.
#[derive(Clone, Debug, Deserialize)]
pub struct PeerRow {
    pub op: String,
    pub preset: String,
    pub peer: String,
    pub ms: Option<f64>,
    #[serde(default)]
    pub error: Option<String>,
}

/// Fill peer figures (and measured ceilings, recomputing floors) into a report.
pub fn merge_peers(r: &mut BenchReport, peers: &PeerFile) {
    if let Some(c) = &peers.ceilings {
        r.ceilings = c.clone();
        for row in &mut r.rows {
            row.floor_ms = (row.flops / (c.bf16_tflops * 1e9)).max(row.bytes / (c.hbm_gbps * 1e6));
        }
    }
    for row in &mut r.rows {
        if let Some(p) = peers.rows.iter().find(|p| p.op == r.op && p.preset == row.preset) {
            row.peer = p.peer.clone();
            row.peer_ms = p.ms;
        }
    }
}
