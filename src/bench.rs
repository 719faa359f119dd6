//! `k3k bench`: time each benchmark preset of an operator on the GPU, check the very run against the f64
//! reference, and write `results/bench/<gpu-slug>/<op>.json` + `.md` in the SEMANTICS.md section 5 format. Peers
//! (torch, FLA) are timed by `scripts/peers.py` in the same device call on the same problems and merged in
//! with [`merge_peers`].

use k3k_ir::Knobs;
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::GpuExec;
use k3k_runtime::{TimingOptions, median};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Ceilings measured on the GPU (or the reference figures of SEMANTICS.md section 4 when not measured in this run).
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
        // The H200 reference figures of SEMANTICS.md section 4 (copy 4282 GB/s, 790 TFLOP/s bf16 for the floors).
        Ceilings { hbm_gbps: 4282.0, bf16_tflops: 790.0, source: "SEMANTICS.md section 4 (H200)".into() }
    }
}

/// One benchmark row (SEMANTICS.md section 5).
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
    /// Set when the row was not measured by the run that wrote the report but kept from an earlier report of the
    /// same operator and GPU (a `k3k bench --preset` run times only some presets; the others stay as they were
    /// measured, with their own same-run peer figure). `None` for the rows of this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier_run: Option<EarlierRun>,
    /// The knobs the preset's first kernel was built with, when `config` stands for others (an operator's
    /// defaults resolve to the knobs of the row count or shape, e.g. `gated_mla.decode`'s wgmma kernel from 64
    /// rows): what the report's config column shows. `None` when they are `config` itself, and in reports written
    /// before the field (it is filled by the run that measures the row, never later: later code may resolve the
    /// same defaults differently).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_knobs: Option<Knobs>,
    /// The op's other peers timed on this preset in the same run (`scripts/peers.py` ranks 1, 2, ...; rank 0 is
    /// `peer` / `peer_ms`), e.g. kda's FLA Triton path after FlashKDA: each gets a report line of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_peers: Vec<PeerTiming>,
}

/// One more peer's figure on a benchmark row (see [`BenchRow::more_peers`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerTiming {
    pub peer: String,
    pub ms: Option<f64>,
    /// Why it has no time, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the peer script added (e.g. FlashKDA's agreement with FLA's output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
}

impl BenchRow {
    /// Every peer figure of the row, rank 0 (`peer`, `peer_ms`) first.
    pub fn peer_figures(&self) -> impl Iterator<Item = (&str, Option<f64>)> {
        std::iter::once((self.peer.as_str(), self.peer_ms))
            .chain(self.more_peers.iter().map(|p| (p.peer.as_str(), p.ms)))
    }
}

/// The knobs `op`'s first kernel for preset `p` is built with at `knobs`, when they differ from `knobs` and name
/// every knob `knobs` names (a complete resolution; operators whose kernels each take a part of the knobs, or
/// whose first kernel is a helper, give `None`; see [`BenchRow::kernel_knobs`]; no GPU needed). A knob no kernel
/// of the problem records and that is at its default (mxfp4_matmul's `DQ` of the prefill path, `L2PF` off the gemv
/// ring) does not make a resolution incomplete: it is carried over as given.
pub fn kernel_knobs(op: &dyn Operator, p: &Preset, knobs: &Knobs) -> Option<Knobs> {
    let ks = op.kernels(p, knobs).ok()?;
    let mut first = ks.first()?.knobs.clone();
    let defaults = op.default_knobs();
    for (k, v) in &knobs.0 {
        if first.0.contains_key(k) {
            continue;
        }
        if defaults.0.get(k) != Some(v) || ks.iter().any(|kern| kern.knobs.0.contains_key(k)) {
            return None;
        }
        first.0.insert(k.clone(), v.clone());
    }
    (first != *knobs).then_some(first)
}

/// The run a kept row was measured in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierRun {
    pub date: String,
    pub k3k_commit: String,
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
    /// The timing experiments the kernels were built with (`K3K_EXPERIMENT`, see `k3k_codegen::EXPERIMENTS`):
    /// such a report is a measurement of modified kernels, never a result (`k3k bench --publish` refuses it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub experiments: Vec<String>,
}

/// The peer a user would otherwise pick for an operator (SEMANTICS.md section 4).
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
    /// [`local_memory_warning`] of each kernel the driver loaded with more local memory than allowed, and
    /// [`persistent_grid_warning`] of each persistent grid wider than what fits.
    warnings: Vec<String>,
}

/// A warning when the driver loaded `kernel` with more local memory per thread (`local_bytes`: ptxas's spills and
/// stack frame) than its operator's spill allowance: hand-picked knobs can cap the registers below what the kernel
/// needs (e.g. mxfp4_matmul's MINB=6 with the automatic 7-8 warps of a small problem: 40 registers, 312 bytes), and
/// such a kernel runs, checks and times like any other, only slower. The tuner never keeps one (it prunes spilling
/// candidates at compile time); `k3k bench --knobs` says so in its log.
pub fn local_memory_warning(
    op: &dyn Operator,
    kernel: &k3k_ir::Kernel,
    local_bytes: i32,
    registers: i32,
) -> Option<String> {
    let allowed = op.known_spill_bytes(kernel);
    (local_bytes.max(0) as u32 > allowed).then(|| {
        format!(
            "{} has {local_bytes} bytes of local memory per thread at {registers} registers (spills or a stack \
             frame; {allowed} allowed for {}): with hand-picked knobs, usually a register cap (MINB) below what it needs",
            kernel.name,
            op.name()
        )
    })
}

/// A warning when `kernel` asks for a persistent grid (knob `CPS`: that many CTAs per SM) of more CTAs per SM than
/// fit at once (`blocks_per_sm`, the driver's occupancy at its block size and shared memory): the surplus CTAs start
/// only as others finish, and with equal shares of the work they then run a whole second round on their own. The
/// result stays right; the time does not mean what the knob says.
pub fn persistent_grid_warning(kernel: &k3k_ir::Kernel, blocks_per_sm: u32) -> Option<String> {
    let cps = kernel.knobs.u32("CPS").unwrap_or(0);
    (cps > blocks_per_sm).then(|| {
        format!(
            "{} asks for a persistent grid of {cps} CTAs per SM (CPS={cps}) but only {blocks_per_sm} fit on an SM at \
             once: the others start as those finish",
            kernel.name
        )
    })
}

fn measure(
    exec: &mut GpuExec,
    op: &dyn Operator,
    inst: &dyn k3k_ops::op::Instance,
    knobs: &Knobs,
    timing: TimingOptions,
) -> anyhow::Result<Measured> {
    let plan = inst.plan(knobs)?;
    exec.prepare(&plan)?;
    let warnings = exec
        .step_kernels(&plan)?
        .iter()
        .flat_map(|lk| {
            [
                local_memory_warning(op, &lk.kernel, lk.local_bytes, lk.registers),
                persistent_grid_warning(&lk.kernel, lk.blocks_per_sm),
            ]
        })
        .flatten()
        .collect();
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
    Ok(Measured { knobs: knobs.clone(), check, samples, steps, warnings })
}

/// Time and check every preset of `op` under each knob set `knobs_for` lists (tuned or default first); the
/// row reports the fastest knob set whose run passed its check. The report is written into `dir` after every
/// preset ([`write_report_keeping`], rows of the earlier report that this run has not timed kept in the
/// operator's preset order), so a run cut short (a timeout, a killed job, a GPU fault) keeps every preset it
/// finished. A preset on which no knob set ran is logged and left out; the call then fails after the last
/// preset, naming them. Returns the path and the last write's note.
#[allow(clippy::too_many_arguments)]
pub fn bench_op_into(
    dir: &Path,
    exec: &mut GpuExec,
    op: &dyn Operator,
    presets: &[Preset],
    knobs_for: &dyn Fn(&Preset) -> Vec<Knobs>,
    timing: TimingOptions,
    ceilings: &Ceilings,
    log: &mut dyn FnMut(&str),
) -> anyhow::Result<(PathBuf, Option<String>)> {
    let order = preset_order(op);
    let mut last = None;
    let mut report = BenchReport {
        schema: 1,
        op: op.name().into(),
        gpu: exec.gpu.info.name.clone(),
        date: k3k_tuner::record::utc_date_today(),
        k3k_commit: COMMIT.into(),
        ceilings: ceilings.clone(),
        rows: vec![],
        experiments: k3k_codegen::experiments()?.iter().map(|n| n.to_string()).collect(),
    };
    let mut not_run = vec![];
    for (i, p) in presets.iter().enumerate() {
        let inst = op.instance(p, 0x006b_336b_0000 + i as u64)?;
        let mut best: Option<Measured> = None;
        let mut variants = vec![];
        for knobs in knobs_for(p) {
            match measure(exec, op, inst.as_ref(), &knobs, timing) {
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
                    for w in &m.warnings {
                        log(&format!("    warning: {w}"));
                    }
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
            log(&format!("{:<44} no knob set ran: left out of the report", p.name));
            not_run.push(p.name.clone());
            continue;
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
            kernel_knobs: kernel_knobs(op, p, &m.knobs),
            config: m.knobs.clone(),
            flops: w.flops,
            bytes: w.bytes,
            problem: inst.problem(),
            variants,
            earlier_run: None,
            more_peers: vec![],
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
        report.rows.push(row);
        last = Some(write_report_keeping(dir, report.clone(), &order)?);
    }
    if !not_run.is_empty() {
        anyhow::bail!("{}: no knob set ran on preset(s) {}", op.name(), not_run.join(", "));
    }
    last.ok_or_else(|| anyhow::anyhow!("{}: no preset to benchmark", op.name()))
}

/// Render a report as a markdown table.
pub fn render_markdown(r: &BenchReport) -> String {
    let mut s = format!(
        "# {} on {} ({})\n\nk3k commit `{}`. Ceilings: {:.0} GB/s, {:.0} TFLOP/s bf16 ({}). Times are medians of CUDA-event \
         samples with an L2 flush before each; `rel err` is the relative L2 error (SEMANTICS.md section 3) of this very run against the f64 \
         CPU reference.\n\n| preset | k3k ms | peer | peer ms | speedup | floor ms | k3k / floor | TFLOP/s | GB/s | rel err | config |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        r.op, r.gpu, r.date, r.k3k_commit, r.ceilings.hbm_gbps, r.ceilings.bf16_tflops, r.ceilings.source
    );
    if !r.experiments.is_empty() {
        s.insert_str(
            s.find("\n\n").map_or(0, |i| i + 2),
            &format!(
                "**Timing experiment `K3K_EXPERIMENT={}`: modified kernels, not a result.**\n\n",
                r.experiments.join(",")
            ),
        );
    }
    for row in &r.rows {
        let preset = match &row.earlier_run {
            Some(e) => format!("{} (kept from the run of {}, `{}`)", row.preset, e.date, e.k3k_commit),
            None => row.preset.clone(),
        };
        // One line per peer: the row's own (rank 0), then each more peer of the same run with the same k3k figures.
        for (peer, peer_ms) in row.peer_figures() {
            let (peer_ms, speed) = match peer_ms {
                Some(p) => (format!("{p:.4}"), format!("{:.2}x", p / row.k3k_ms)),
                None => ("-".into(), "-".into()),
            };
            s.push_str(&format!(
                "| {} | {:.4} | {} | {} | {} | {:.4} | {:.2}x | {:.1} | {:.0} | {:.2e} | {} |\n",
                preset,
                row.k3k_ms,
                peer,
                peer_ms,
                speed,
                row.floor_ms,
                row.k3k_ms / row.floor_ms,
                row.tflops,
                row.gbps,
                row.max_rel_err,
                match &row.kernel_knobs {
                    Some(k) => format!("`{k}` (automatic for `{}`)", row.config),
                    None => format!("`{}`", row.config),
                }
            ));
        }
    }
    s
}

/// Keep the rows of an earlier report (same operator and GPU) whose presets this run did not time, each marked
/// with the run it came from; rows follow `order` (the operator's preset order; unknown presets last, in their
/// earlier order). Returns how many rows were kept.
pub fn keep_earlier_rows(new: &mut BenchReport, old: BenchReport, order: &[String]) -> usize {
    if old.op != new.op || old.gpu != new.gpu {
        return 0;
    }
    let mut kept = 0;
    for mut row in old.rows {
        if new.rows.iter().any(|r| r.preset == row.preset) {
            continue;
        }
        if row.earlier_run.is_none() {
            row.earlier_run = Some(EarlierRun { date: old.date.clone(), k3k_commit: old.k3k_commit.clone() });
        }
        new.rows.push(row);
        kept += 1;
    }
    let pos = |p: &str| order.iter().position(|o| o == p).unwrap_or(order.len());
    // A stable sort: rows of unknown presets keep their relative order.
    new.rows.sort_by_key(|r| pos(&r.preset));
    kept
}

/// The order of an operator's report rows: its benchmark presets, in order.
pub fn preset_order(op: &dyn Operator) -> Vec<String> {
    op.bench_presets().into_iter().map(|p| p.name).collect()
}

/// The report files under `dir` (`<gpu-slug>/<op>.json`, as [`report_path`] places them), sorted; other files
/// beside the GPU folders are not reports.
pub fn report_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = vec![];
    for gpu in std::fs::read_dir(dir)? {
        let gpu = gpu?.path();
        if !gpu.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&gpu)? {
            let f = f?.path();
            if f.extension().is_some_and(|e| e == "json") {
                files.push(f);
            }
        }
    }
    files.sort();
    Ok(files)
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

/// Write a report as [`write_report`] does, after keeping the rows of the report already there that this run
/// did not time ([`keep_earlier_rows`], in the order of `order`). A report there that does not parse is moved
/// aside (`<op>.json.corrupt-<unix seconds>`, named in the returned note), never overwritten silently.
/// Returns the path and a note for the user when rows were kept or a file was moved aside.
pub fn write_report_keeping(
    dir: &Path,
    mut r: BenchReport,
    order: &[String],
) -> anyhow::Result<(PathBuf, Option<String>)> {
    let path = report_path(dir, &r.gpu, &r.op);
    let note = match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(anyhow::anyhow!("{}: cannot read the existing report: {e}", path.display())),
        Ok(bytes) => match serde_json::from_slice::<BenchReport>(&bytes) {
            Ok(old) => {
                let kept = keep_earlier_rows(&mut r, old, order);
                (kept > 0).then(|| format!("kept {kept} row(s) of the earlier report (presets not timed in this run)"))
            }
            Err(e) => {
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let aside = path.with_extension(format!("json.corrupt-{secs}"));
                std::fs::rename(&path, &aside)?;
                eprintln!(
                    "warning: benchmark report {} did not parse ({e}); moved aside to {}",
                    path.display(),
                    aside.display()
                );
                Some(format!("the existing report did not parse ({e}); moved aside to {}", aside.display()))
            }
        },
    };
    Ok((write_report(dir, &r)?, note))
}

/// Write a file atomically (a temporary beside it, then a rename). The new file keeps the old one's mode (0644
/// when there is none), and a read-only file (no owner write bit) is not replaced: an error naming it.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(path) {
        Ok(m) if m.permissions().mode() & 0o200 == 0 => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{} is read-only; it was not replaced", path.display()),
            ));
        }
        Ok(m) => m.permissions().mode() & 0o7777,
        Err(_) => 0o644,
    };
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, data)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, path)
}

/// Peer timings produced by `scripts/peers.py`: `{"ceilings": {...}, "rows": [{"op", "preset", "peer", "ms"}]}`.
#[derive(Clone, Debug, Deserialize)]
pub struct PeerFile {
    /// The GPU the peers ran on (`torch.cuda.get_device_name()`; absent in files written before 2026-12-07).
    #[serde(default)]
    pub gpu: Option<String>,
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
    /// The peer's place among its op's peers (0: the report's peer column; files written before ranks existed
    /// had one peer per op, rank 0).
    #[serde(default)]
    pub rank: u32,
    #[serde(default)]
    pub extra: Option<serde_json::Value>,
}

/// Fill peer figures (and measured ceilings, recomputing floors) into a report: on each row of this run, the
/// file's rows for its op and preset in rank order (ties in file order), the first as `peer` / `peer_ms` and the
/// others as [`BenchRow::more_peers`] (replacing those of an earlier merge). A row with no peer in the file keeps
/// what it had. A file that does not speak of this report (another GPU, where the file names one, or no row of
/// the report's operator) leaves it as it is and gives `false`: `k3k bench --merge-peers` rewrites only the reports
/// that took a merge, so a folder holding reports of other GPUs keeps them as they were (before 2026-12-07 every
/// report under `--out` took the file's ceilings).
pub fn merge_peers(r: &mut BenchReport, peers: &PeerFile) -> bool {
    if !(peers.gpu.as_deref().is_none_or(|g| g == r.gpu) && peers.rows.iter().any(|p| p.op == r.op)) {
        return false;
    }
    if let Some(c) = &peers.ceilings {
        r.ceilings = c.clone();
        for row in &mut r.rows {
            row.floor_ms = (row.flops / (c.bf16_tflops * 1e9)).max(row.bytes / (c.hbm_gbps * 1e6));
        }
    }
    // Rows kept from an earlier run keep that run's peer: a peer timed now would not be a same-run figure.
    for row in r.rows.iter_mut().filter(|row| row.earlier_run.is_none()) {
        let mut mine: Vec<&PeerRow> = peers.rows.iter().filter(|p| p.op == r.op && p.preset == row.preset).collect();
        mine.sort_by_key(|p| p.rank);
        let Some((first, rest)) = mine.split_first() else { continue };
        row.peer = first.peer.clone();
        row.peer_ms = first.ms;
        row.more_peers = rest
            .iter()
            .map(|p| PeerTiming { peer: p.peer.clone(), ms: p.ms, error: p.error.clone(), extra: p.extra.clone() })
            .collect();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench's local-memory warning: named kernel, bytes and registers past the operator's allowance; nothing
    /// within it (kda's 16-byte intra kernel) or at zero.
    #[test]
    fn local_memory_past_the_allowance_is_warned_about() {
        let op = k3k_ops::mx::matmul::Mxfp4Matmul;
        let p = Preset::new("t", &[("G", 33), ("per", 4), ("N", 512), ("K", 2816), ("tiles", 1)]);
        let k = &op.kernels(&p, &op.default_knobs()).unwrap()[0];
        let w = local_memory_warning(&op, k, 312, 40).expect("312 bytes past a 0-byte allowance");
        assert!(w.starts_with(&k.name) && w.contains("312 bytes") && w.contains("40 registers"), "{w}");
        assert!(local_memory_warning(&op, k, 0, 127).is_none());
        let kda = k3k_ops::kda::Kda;
        let kp = Preset::new("t", &[("B", 1), ("T", 256), ("H", 2), ("K", 128), ("V", 128), ("safe", 1)]);
        let kernels = kda.kernels(&kp, &kda.default_knobs()).unwrap();
        let intra = kernels.iter().find(|k| k.name.starts_with("k3k_kda_intra_")).expect("kda's intra kernel");
        let allowed = kda.known_spill_bytes(intra) as i32;
        assert!(allowed > 0, "{}: the plain safe intra kernel has a measured allowance", intra.name);
        assert!(local_memory_warning(&kda, intra, allowed, 168).is_none(), "within the measured allowance");
        assert!(local_memory_warning(&kda, intra, allowed + 16, 168).is_some());
    }

    /// The persistent-grid warning: a CPS past the CTAs that fit per SM is named; one that fits, and a kernel
    /// without the knob, are not.
    #[test]
    fn persistent_grids_wider_than_an_sm_holds_are_warned_about() {
        let op = k3k_ops::mx::matmul::Mxfp4Matmul;
        let p = Preset::new("t", &[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("tiles", 1)]);
        let knobs = op.default_knobs().with("CPS", 5i64).with("SK", 1i64);
        let k = &op.kernels(&p, &knobs).unwrap()[0];
        let w = persistent_grid_warning(k, 4).expect("5 CTAs per SM where 4 fit");
        assert!(w.starts_with(&k.name) && w.contains("CPS=5") && w.contains("only 4 fit"), "{w}");
        assert!(persistent_grid_warning(k, 5).is_none());
        let plain = &op.kernels(&p, &op.default_knobs()).unwrap()[0];
        assert!(persistent_grid_warning(plain, 1).is_none(), "CPS=0: a hardware-scheduled grid");
    }

    fn row(preset: &str, ms: f64, peer_ms: Option<f64>) -> BenchRow {
        BenchRow {
            preset: preset.into(),
            k3k_ms: ms,
            k3k_p20_ms: ms,
            k3k_p80_ms: ms,
            peer: "peer".into(),
            peer_ms,
            floor_ms: 0.1,
            tflops: 1.0,
            gbps: 1.0,
            max_rel_err: 1e-3,
            check_scope: "all".into(),
            config: Knobs::new().with("BM", 128i64),
            flops: 1e9,
            bytes: 1e6,
            problem: serde_json::json!({"preset": preset}),
            variants: vec![],
            earlier_run: None,
            kernel_knobs: None,
            more_peers: vec![],
        }
    }

    #[test]
    fn the_config_column_shows_the_knobs_the_kernels_were_built_with() {
        // gated_mla.decode's defaults stand for the row count's knobs: the wgmma kernel at 96 heads.
        let op = k3k_ops::registry::all().into_iter().find(|o| o.name() == "gated_mla.decode").unwrap();
        let presets = op.bench_presets();
        let h96 = presets.iter().find(|p| p.name.contains("H96")).unwrap();
        let built = kernel_knobs(op.as_ref(), h96, &op.default_knobs()).expect("resolved knobs");
        assert_eq!(built.str("MMA").unwrap(), "wgmma");
        assert_eq!(kernel_knobs(op.as_ref(), h96, &built), None, "explicit knobs are used as given");
        // kda's first kernel takes none of the operator's knobs: no resolution is shown.
        let kda = k3k_ops::registry::all().into_iter().find(|o| o.name() == "kda").unwrap();
        assert_eq!(kernel_knobs(kda.as_ref(), &kda.bench_presets()[0], &kda.default_knobs()), None);
        // mxfp4_matmul's 28 x 4 decode: the gemv kernel's knobs, plus the default knobs no kernel of it records.
        let mx = k3k_ops::registry::all().into_iter().find(|o| o.name() == "mxfp4_matmul").unwrap();
        let g28 = mx.bench_presets().into_iter().find(|p| p.name == "MXFP4 decode 28 experts x 4 tokens N6144 K3584");
        let g28 = g28.unwrap();
        let got = kernel_knobs(mx.as_ref(), &g28, &mx.default_knobs()).expect("resolved knobs");
        for (k, v) in [
            ("PATH", "gemv"),
            ("BN", "32"),
            ("BK", "256"),
            ("STAGES", "3"),
            ("DQ", "auto"),
            ("L2PF", "128"),
            ("COPY", "auto"),
        ] {
            assert_eq!(got.0.get(k).map(|x| x.to_string()), Some(v.to_string()), "{k} in {got}");
        }
        assert_eq!(kernel_knobs(mx.as_ref(), &g28, &got), None, "the resolution resolves to itself");
        // A non-default value of a knob no kernel records is not a resolution.
        assert_eq!(kernel_knobs(mx.as_ref(), &g28, &mx.default_knobs().with("DQ", "tile")), None);
        let mut r = row("b128 S4096 H96", 0.46, Some(0.76));
        r.config = op.default_knobs();
        r.kernel_knobs = Some(built.clone());
        let md = render_markdown(&report("2026-12-04", "abc", vec![r, row("other", 1.0, None)]));
        assert!(md.contains(&format!("`{built}` (automatic for `{}`)", op.default_knobs())), "{md}");
        assert!(md.contains("| `BM=128` |"), "{md}");
    }

    fn report(date: &str, commit: &str, rows: Vec<BenchRow>) -> BenchReport {
        BenchReport {
            schema: 1,
            op: "kda".into(),
            gpu: "NVIDIA H200".into(),
            date: date.into(),
            k3k_commit: commit.into(),
            ceilings: Ceilings::default(),
            rows,
            experiments: vec![],
        }
    }

    fn order() -> Vec<String> {
        ["A", "B", "C"].map(String::from).to_vec()
    }

    #[test]
    fn a_partial_run_keeps_the_other_presets_marked_and_in_order() {
        let old =
            report("2026-12-01", "old", vec![row("A", 1.0, Some(2.0)), row("B", 3.0, Some(4.0)), row("C", 5.0, None)]);
        let mut new = report("2026-12-02", "new", vec![row("B", 2.5, None)]);
        assert_eq!(keep_earlier_rows(&mut new, old, &order()), 2);
        let presets: Vec<_> = new.rows.iter().map(|r| r.preset.as_str()).collect();
        assert_eq!(presets, ["A", "B", "C"]);
        // The row timed now is this run's; the kept ones carry their run and their own peer figure.
        assert_eq!(new.rows[1].k3k_ms, 2.5);
        assert_eq!(new.rows[1].earlier_run, None);
        let e = EarlierRun { date: "2026-12-01".into(), k3k_commit: "old".into() };
        assert_eq!(new.rows[0].earlier_run.as_ref(), Some(&e));
        assert_eq!((new.rows[0].k3k_ms, new.rows[0].peer_ms), (1.0, Some(2.0)));
        assert!(render_markdown(&new).contains("A (kept from the run of 2026-12-01, `old`)"));
        // `k3k report`'s summary dates each row by the run that timed it.
        let summary = crate::report::markdown(std::slice::from_ref(&new));
        let line = |p: &str| summary.lines().find(|l| l.contains(&format!("| {p} |"))).unwrap().to_string();
        assert!(line("A").ends_with("| 2026-12-01 | `old` |"), "{}", line("A"));
        assert!(line("B").ends_with("| 2026-12-02 | `new` |"), "{}", line("B"));
        // A peer file timed in a later run fills only the row of this run.
        let peers = PeerFile {
            gpu: None,
            ceilings: None,
            rows: ["A", "B"]
                .map(|p| PeerRow {
                    op: "kda".into(),
                    preset: p.into(),
                    peer: "FLA".into(),
                    ms: Some(9.0),
                    error: None,
                    rank: 0,
                    extra: None,
                })
                .to_vec(),
        };
        merge_peers(&mut new, &peers);
        assert_eq!(new.rows[1].peer_ms, Some(9.0));
        assert_eq!(new.rows[0].peer_ms, Some(2.0), "a kept row's peer is its own run's");
    }

    /// A peers file merges only into the reports of its GPU and its operators: a folder seeded with another GPU's
    /// reports keeps their ceilings and peers (2026-12-07: an H100 run had rewritten the H200 reports' ceilings).
    #[test]
    fn peers_merge_only_into_reports_of_their_gpu_and_op() {
        let r = report("2026-12-07", "new", vec![row("A", 2.0, None)]);
        let file = |gpu: Option<&str>, op: &str| PeerFile {
            gpu: gpu.map(String::from),
            ceilings: Some(Ceilings { hbm_gbps: 3047.0, bf16_tflops: 700.0, source: "here".into() }),
            rows: vec![PeerRow {
                op: op.into(),
                preset: "A".into(),
                peer: "FlashKDA".into(),
                ms: Some(1.0),
                error: None,
                rank: 0,
                extra: None,
            }],
        };
        let merged = |f: PeerFile| {
            let mut m = r.clone();
            (merge_peers(&mut m, &f), m)
        };
        let (took, m) = merged(file(Some("NVIDIA H200"), "kda"));
        assert!(took && m.ceilings.hbm_gbps == 3047.0 && m.rows[0].peer_ms == Some(1.0));
        for (f, what) in [
            (file(Some("NVIDIA H100 80GB HBM3"), "kda"), "another GPU"),
            (file(Some("NVIDIA H200"), "mxfp4_matmul"), "another operator"),
        ] {
            let (took, m) = merged(f);
            assert!(!took, "{what}");
            assert_eq!((m.ceilings.hbm_gbps, m.rows[0].peer_ms), (r.ceilings.hbm_gbps, r.rows[0].peer_ms), "{what}");
        }
        assert!(merged(file(None, "kda")).0, "a file of an older peers.py names no GPU");
    }

    /// Several peers of one op (kda: FlashKDA rank 0, FLA rank 1): the rank-0 peer fills the peer column, the others
    /// `more_peers`, each with a report line and a summary line of its own; ranks order them whatever the file
    /// order; a later merge replaces them; a file of an older peers.py (no ranks: one peer per op) still merges.
    #[test]
    fn several_peers_per_preset_get_a_line_each() {
        let peer = |preset: &str, name: &str, rank: u32, ms: Option<f64>| PeerRow {
            op: "kda".into(),
            preset: preset.into(),
            peer: name.into(),
            ms,
            error: ms.is_none().then(|| "not built".to_string()),
            rank,
            extra: Some(serde_json::json!({"vs_fla_triton_rel_o": 0.01})),
        };
        let mut r = report("2026-12-06", "new", vec![row("A", 2.0, None), row("B", 1.0, None)]);
        let file = PeerFile {
            gpu: None,
            ceilings: None,
            rows: vec![
                peer("A", "FLA (Triton)", 1, Some(3.0)),
                peer("B", "FLA (Triton)", 1, Some(2.5)),
                peer("A", "FlashKDA", 0, Some(1.5)),
                peer("B", "FlashKDA", 0, None),
            ],
        };
        merge_peers(&mut r, &file);
        assert_eq!((r.rows[0].peer.as_str(), r.rows[0].peer_ms), ("FlashKDA", Some(1.5)));
        assert_eq!(r.rows[0].more_peers.len(), 1);
        assert_eq!((r.rows[0].more_peers[0].peer.as_str(), r.rows[0].more_peers[0].ms), ("FLA (Triton)", Some(3.0)));
        assert_eq!(
            (r.rows[1].peer.as_str(), r.rows[1].peer_ms),
            ("FlashKDA", None),
            "a failed rank-0 peer stays first"
        );
        let md = render_markdown(&r);
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with("| A |") || l.starts_with("| B |")).collect();
        assert_eq!(lines.len(), 4, "{md}");
        assert!(lines[0].contains("| FlashKDA | 1.5000 | 0.75x |"), "{}", lines[0]);
        assert!(lines[1].contains("| FLA (Triton) | 3.0000 | 1.50x |"), "{}", lines[1]);
        assert!(lines[2].contains("| FlashKDA | - | - |") && lines[3].contains("| FLA (Triton) | 2.5000 | 2.50x |"));
        let summary = crate::report::markdown(std::slice::from_ref(&r));
        assert_eq!(summary.lines().filter(|l| l.contains("| kda | A |")).count(), 2, "{summary}");
        // The JSON keeps them (and the error and extra); reports without the field read as no more peers.
        let back: BenchReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.rows[0].more_peers, r.rows[0].more_peers);
        assert_eq!(back.rows[0].more_peers[0].extra, Some(serde_json::json!({"vs_fla_triton_rel_o": 0.01})));
        let mut old_json = serde_json::to_value(row("C", 1.0, Some(2.0))).unwrap();
        assert!(old_json.get("more_peers").is_none(), "an empty list is not written");
        old_json.as_object_mut().unwrap().remove("more_peers");
        assert!(serde_json::from_value::<BenchRow>(old_json).unwrap().more_peers.is_empty());
        // A second merge with one peer per preset (an older peers.py file: no rank) replaces the more peers.
        let old_file: PeerFile =
            serde_json::from_str(r#"{"rows": [{"op": "kda", "preset": "A", "peer": "FLA", "ms": 4.0}]}"#).unwrap();
        merge_peers(&mut r, &old_file);
        assert_eq!((r.rows[0].peer.as_str(), r.rows[0].peer_ms, r.rows[0].more_peers.len()), ("FLA", Some(4.0), 0));
        assert_eq!(r.rows[1].more_peers.len(), 1, "a preset the file does not name keeps its peers");
    }

    #[test]
    fn a_row_kept_twice_keeps_its_first_run_and_other_ops_are_not_mixed() {
        let mut first = row("A", 1.0, None);
        first.earlier_run = Some(EarlierRun { date: "2026-11-30".into(), k3k_commit: "first".into() });
        let old = report("2026-12-01", "old", vec![first]);
        let mut new = report("2026-12-02", "new", vec![row("B", 2.0, None)]);
        keep_earlier_rows(&mut new, old, &order());
        assert_eq!(new.rows[0].earlier_run.as_ref().unwrap().k3k_commit, "first");
        let mut other = report("2026-12-01", "old", vec![row("C", 1.0, None)]);
        other.op = "kda.decode".into();
        assert_eq!(keep_earlier_rows(&mut new, other, &order()), 0);
        assert_eq!(new.rows.len(), 2);
    }

    #[test]
    fn writing_keeps_earlier_rows_and_moves_a_corrupt_report_aside() {
        let dir = tempfile::tempdir().unwrap();
        let old = report("2026-12-01", "old", vec![row("A", 1.0, None), row("C", 5.0, None)]);
        write_report(dir.path(), &old).unwrap();
        let (path, note) =
            write_report_keeping(dir.path(), report("2026-12-02", "new", vec![row("B", 2.0, None)]), &order()).unwrap();
        assert!(note.unwrap().contains("kept 2 row"));
        let back: BenchReport = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back.rows.iter().map(|r| r.preset.as_str()).collect::<Vec<_>>(), ["A", "B", "C"]);
        assert_eq!(back.k3k_commit, "new");
        std::fs::write(&path, b"{ not json").unwrap();
        let (path, note) =
            write_report_keeping(dir.path(), report("2026-12-02", "new", vec![row("B", 2.0, None)]), &order()).unwrap();
        assert!(note.unwrap().contains("moved aside"));
        let back: BenchReport = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back.rows.len(), 1);
        let aside: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".json.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1);
        assert_eq!(std::fs::read(aside[0].path()).unwrap(), b"{ not json");
    }

    /// The write pattern of [`bench_op_into`]: the report so far rewritten after every preset over an earlier
    /// report. A run cut short after B leaves A kept from the earlier run and B this run's; the finished run
    /// leaves only this run's rows, none of them marked as kept.
    #[test]
    fn rewriting_after_every_preset_keeps_what_a_cut_run_finished() {
        let dir = tempfile::tempdir().unwrap();
        let old = report("2026-12-01", "old", vec![row("A", 1.0, Some(2.0)), row("B", 3.0, None), row("C", 5.0, None)]);
        write_report(dir.path(), &old).unwrap();
        let mut run = report("2026-12-02", "new", vec![]);
        let read = |p: &Path| serde_json::from_slice::<BenchReport>(&std::fs::read(p).unwrap()).unwrap();
        for (preset, ms) in [("B", 2.5), ("A", 0.5)] {
            run.rows.push(row(preset, ms, None));
            let (path, _) = write_report_keeping(dir.path(), run.clone(), &order()).unwrap();
            if preset == "B" {
                // Cut here: B is this run's, A and C the earlier run's.
                let back = read(&path);
                let kept: Vec<_> = back.rows.iter().map(|r| (r.preset.as_str(), r.earlier_run.is_some())).collect();
                assert_eq!(kept, [("A", true), ("B", false), ("C", true)]);
            }
        }
        run.rows.push(row("C", 4.5, None));
        let (path, note) = write_report_keeping(dir.path(), run.clone(), &order()).unwrap();
        assert_eq!(note, None, "nothing kept once every preset ran");
        let back = read(&path);
        assert!(back.rows.iter().all(|r| r.earlier_run.is_none()));
        assert_eq!(back.rows.iter().map(|r| r.k3k_ms).collect::<Vec<_>>(), [0.5, 2.5, 4.5]);
    }
}
