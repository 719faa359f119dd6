//! `k3k bench`: GPU benchmarks in the SEMANTICS.md section 5 format.

use super::progress::Progress;
use k3k::bench::{self, BenchReport, Ceilings, PeerFile};
use k3k::ops::plan::GpuExec;
use k3k::runtime::{Gpu, TimingOptions};
use k3k::tuner::{GpuKey, ResultsStore};
use std::path::PathBuf;

/// Arguments of `k3k bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Operator (or family, or `all`).
    #[arg(long, default_value = "all")]
    pub op: String,
    /// Only these presets, separated by `;` (default: every benchmark preset of the operator).
    #[arg(long)]
    pub preset: Option<String>,
    /// Problems by their dims instead of presets, separated by `;`, e.g. `G=28,mean=1024,K=64,N=6144;...` (each a
    /// preset named `custom <dims>`, for the one operator of `--op`): sweeps off the preset list (the report keeps
    /// them like presets).
    #[arg(long, conflicts_with = "preset")]
    pub dims: Option<String>,
    /// Knob sets (default: the defaults, plus the tuned config of this GPU where `--results` has one for the
    /// preset's shape bucket; both are timed and the faster that passes is reported). Several sets separated by `;`
    /// are all timed and the fastest that passes its check is reported (every set's time is kept in the JSON).
    #[arg(long)]
    pub knobs: Option<String>,
    /// Timed repetitions per preset (at least).
    #[arg(long, default_value_t = 30)]
    pub reps: usize,
    /// Keep timing until this many ms of wall time (L2 flushes included) have passed, at most 4096 repetitions:
    /// the sample window of the peers' `triton.testing.do_bench(rep=200)`, so both sides are timed under the
    /// same sustained load. 0: exactly `--reps`.
    #[arg(long, default_value_t = 200.0)]
    pub window_ms: f64,
    /// Where reports go.
    #[arg(long, default_value = "results/bench")]
    pub out: PathBuf,
    /// Where tuned configs are looked up (when `--knobs` is not given).
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Instead of running: merge peer timings (from scripts/peers.py) into the existing reports.
    #[arg(long)]
    pub merge_peers: Option<PathBuf>,
    /// Instead of running: fold the reports of a run written elsewhere (`<DIR>/<gpu>/<op>.json`, e.g. a device
    /// call's output) into `--out`, keeping the rows of `--out`'s reports that the run did not time, each marked
    /// with the run it came from.
    #[arg(long, value_name = "DIR")]
    pub publish: Option<PathBuf>,
}

/// `--publish`: every report under `from` folded into `out` (rows in the operator's preset order).
fn publish(from: &std::path::Path, out: &std::path::Path) -> anyhow::Result<i32> {
    let files = bench::report_files(from)?;
    if files.is_empty() {
        anyhow::bail!("{}: no reports (<gpu>/<op>.json) to publish", from.display());
    }
    for f in files {
        let r: BenchReport = serde_json::from_slice(&std::fs::read(&f)?)
            .map_err(|e| anyhow::anyhow!("{}: not a benchmark report: {e}", f.display()))?;
        if !r.experiments.is_empty() {
            anyhow::bail!(
                "{}: measured with the timing experiments {} (modified kernels): not a result to publish",
                f.display(),
                r.experiments.join(",")
            );
        }
        let op = k3k::ops::registry::all()
            .into_iter()
            .find(|o| o.name() == r.op)
            .ok_or_else(|| anyhow::anyhow!("{}: unknown operator `{}`", f.display(), r.op))?;
        let (path, note) = bench::write_report_keeping(out, r, &bench::preset_order(op.as_ref()))?;
        println!("{}{}", path.display(), note.map(|n| format!(": {n}")).unwrap_or_default());
    }
    Ok(0)
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    a.out = k3k::paths::resolve(&a.out, "--out")?;
    a.results = k3k::paths::resolve(&a.results, "--results")?;
    if let Some(peers) = &a.merge_peers {
        let bytes = std::fs::read(peers).map_err(|e| anyhow::anyhow!("--merge-peers {}: {e}", peers.display()))?;
        let pf: PeerFile = serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: not a peers file: {e}", peers.display()))?;
        let mut merged = 0;
        for f in &bench::report_files(&a.out)? {
            let bytes = std::fs::read(f).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
            let mut r: BenchReport = serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: not a benchmark report: {e}", f.display()))?;
            if bench::merge_peers(&mut r, &pf) {
                bench::write_report(&a.out, &r)?;
                merged += 1;
            }
        }
        println!("merged peer timings into {merged} reports under {}", a.out.display());
        return Ok(0);
    }
    if let Some(from) = &a.publish {
        return publish(from, &a.out);
    }
    let experiments = k3k::codegen::experiments()?;
    if !experiments.is_empty() {
        println!(
            "{}={}: timing experiments, modified kernels (most compute wrong values on purpose and fail their \
             checks; the times say what the removed or reordered work cost); the report records them",
            k3k::codegen::EXPERIMENT_ENV,
            experiments.join(",")
        );
    }
    // Every argument is checked before the GPU is opened: the timing window, presets, dims and knob sets.
    k3k::input::seconds("--window-ms", a.window_ms / 1e3)?;
    if a.reps == 0 {
        anyhow::bail!("--reps: must be at least 1");
    }
    let mut work = vec![];
    for op in super::select_ops(&a.op)? {
        let presets: Vec<_> = match &a.dims {
            Some(d) => d
                .split(';')
                .filter(|s| !s.trim().is_empty())
                .map(|s| super::pick_preset(op.as_ref(), None, Some(s.trim())))
                .collect::<anyhow::Result<_>>()?,
            None => op
                .bench_presets()
                .into_iter()
                .filter(|p| a.preset.as_ref().is_none_or(|sel| sel.split(';').any(|n| n.trim() == p.name)))
                .collect(),
        };
        if presets.is_empty() {
            continue;
        }
        let sets: Vec<_> = match &a.knobs {
            None => vec![op.default_knobs()],
            Some(s) => s.split(';').map(|one| super::parse_knobs(op.as_ref(), Some(one))).collect::<Result<_, _>>()?,
        };
        work.push((op, presets, sets));
    }
    if work.is_empty() {
        anyhow::bail!(
            "no preset of `--op {}` matches `--preset {}` (see `k3k list` for each operator's presets)",
            a.op,
            a.preset.as_deref().unwrap_or("")
        );
    }
    let gpu = Gpu::open(0)?;
    let gpu_key = GpuKey::new(gpu.info.name.clone(), gpu.info.compute_capability, gpu.info.sm_count);
    // A results folder that does not exist just means nothing is tuned; a corrupt file is an error (by name).
    let store = if a.results.exists() { Some(ResultsStore::open(&a.results)?) } else { None };
    let mut exec = GpuExec::new(gpu);
    let timing = TimingOptions { reps: a.reps, min_window_ms: a.window_ms, ..Default::default() };
    let bar = Progress::new(work.iter().map(|(_, presets, _)| presets.len() as u64).sum(), "bench");
    for (op, presets, sets) in work {
        // Without `--knobs`: the defaults and, where this GPU has a tuned record for the preset's shape bucket,
        // the tuned config too (both timed in this run; the row reports the faster that passed, and both stay
        // in the JSON's `variants`). `bench_op_into` asks once per preset, as the preset starts: the bar counts the
        // presets started.
        let knobs_for = |p: &k3k::ops::op::Preset| -> Vec<k3k::ir::Knobs> {
            bar.set_message(format!("{}: {}", op.name(), p.name));
            bar.inc(1);
            let mut v = sets.clone();
            if a.knobs.is_none()
                && let Some(store) = &store
            {
                let (tuned, _) = bar.suspend(|| k3k::tuning::tuned_knobs(store, op.as_ref(), p, &gpu_key));
                if !v.contains(&tuned) {
                    v.push(tuned);
                }
            }
            v
        };
        bar.println(&format!("== {} on {}", op.name(), exec.gpu.info.name));
        // The report is rewritten after every preset: a run cut short keeps what it finished.
        let (path, note) = bench::bench_op_into(
            &a.out,
            &mut exec,
            op.as_ref(),
            &presets,
            &knobs_for,
            timing,
            &Ceilings::default(),
            &mut |l| bar.println(l),
        )?;
        bar.println(&format!("wrote {}", path.display()));
        if let Some(note) = note {
            bar.println(&format!("  {note}"));
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::publish;
    use k3k::bench::BenchReport;
    use std::path::Path;

    fn read(p: &Path) -> BenchReport {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    }

    #[test]
    fn publishing_a_partial_run_keeps_the_presets_it_did_not_time() {
        // A device run that timed six of mxfp4_matmul's presets, published over a report that also has a seventh.
        let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bench-run-mxfp4");
        let new = read(&run.join("nvidia-h200/mxfp4_matmul.json"));
        let mut old = new.clone();
        old.date = "2026-01-01".into();
        old.rows.truncate(1);
        old.rows[0].preset = "MXFP4 decode 28 experts x 4 tokens N6144 K3584 situ_glu+p".into();
        assert!(new.rows.iter().all(|r| r.preset != old.rows[0].preset), "the fixture must lack that preset");
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(out.path().join("nvidia-h200")).unwrap();
        let at = out.path().join("nvidia-h200/mxfp4_matmul.json");
        std::fs::write(&at, serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(publish(&run, out.path()).unwrap(), 0);
        let got = read(&at);
        assert_eq!(got.rows.len(), new.rows.len() + 1);
        let kept = got.rows.iter().find(|r| r.preset == old.rows[0].preset).unwrap();
        assert_eq!(kept.earlier_run.as_ref().map(|e| e.date.as_str()), Some("2026-01-01"));
        assert!(got.rows.iter().filter(|r| r.preset != kept.preset).all(|r| r.earlier_run.is_none()));
        // Rows follow the operator's preset order: the GLU preset comes right after the plain 28-expert decode.
        let pos = |p: &str| got.rows.iter().position(|r| r.preset == p).unwrap();
        assert_eq!(pos(&kept.preset), pos("MXFP4 decode 28 experts x 4 tokens N6144 K3584") + 1);
        assert!(std::fs::read_to_string(at.with_extension("md")).unwrap().contains("kept from the run of 2026-01-01"));
        // A folder with no reports is an error, not a silent no-op.
        let empty = tempfile::tempdir().unwrap();
        assert!(publish(empty.path(), out.path()).unwrap_err().to_string().contains("no reports"));
    }

    /// A run made with `K3K_EXPERIMENT` (modified kernels) is refused, and the results are left as they were.
    #[test]
    fn publishing_a_timing_experiment_is_refused() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/bench/nvidia-h200");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bench-run-mxfp4");
        let mut r = read(&fixture.join("nvidia-h200/mxfp4_matmul.json"));
        r.experiments = vec!["NODECODE".into()];
        let run = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(run.path().join("nvidia-h200")).unwrap();
        std::fs::write(run.path().join("nvidia-h200/mxfp4_matmul.json"), serde_json::to_vec(&r).unwrap()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let e = publish(run.path(), out.path()).unwrap_err().to_string();
        assert!(e.contains("NODECODE") && e.contains("not a result"), "{e}");
        assert!(!out.path().join("nvidia-h200/mxfp4_matmul.json").exists());
        // The markdown of such a report says what it is, at the top.
        let md = k3k::bench::render_markdown(&r);
        assert!(md.contains("Timing experiment `K3K_EXPERIMENT=NODECODE`: modified kernels, not a result."), "{md}");
        assert!(!k3k::bench::render_markdown(&read(&root.join("mxfp4_matmul.json"))).contains("Timing experiment"));
    }
}
