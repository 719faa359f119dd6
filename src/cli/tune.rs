//! `k3k tune`: measure each operator's knob space on this GPU, in child workers, into `results/`.

use k3k::ops::op::{Operator, Preset};
use k3k::runtime::Gpu;
use k3k::tuner::{GpuKey, ResultsStore, Shard, TuneEvent, TuneOptions, Worker, WorkerMeasurer, WorkerSpec, tune};
use k3k::tuning::{knob_map, plan_candidates, tune_key};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Arguments of `k3k tune`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Operator (or family, or `all`).
    #[arg(long, default_value = "all")]
    pub op: String,
    /// One benchmark preset by name, or `k3` for every K3-like preset of the operator.
    #[arg(long, default_value = "k3")]
    pub preset: String,
    /// A custom problem instead of the presets, e.g. `G=2,c0=17,c1=5,K=32,N=48`.
    #[arg(long)]
    pub dims: Option<String>,
    /// Wall-time budget (`90s`, `10m`, `1h`): presets not started when it runs out are skipped (and listed).
    #[arg(long, default_value = "10m")]
    pub budget: String,
    /// Skip candidates already measured in the results file (after an interruption).
    #[arg(long)]
    pub resume: bool,
    /// Measure only shard `i/n` of every candidate list (0-based), e.g. for a job array; combine the files
    /// with `k3k results merge`.
    #[arg(long)]
    pub shard: Option<String>,
    /// Results folder.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// At most this many candidates per preset (the default knobs always included).
    #[arg(long, default_value_t = 24)]
    pub max_candidates: usize,
    /// Measure on `cuda` or on the CPU interpreter (`cpu`: exercises the tuning machinery without a GPU; its
    /// times mean nothing and go to a `cpu-interp` results file).
    #[arg(long, default_value = "cuda")]
    pub backend: String,
    /// Seconds one measurement may take before its worker is killed and the candidate scored as a timeout.
    #[arg(long, default_value_t = 120)]
    pub timeout_s: u64,
}

/// Parse `90s`, `10m`, `1h` or plain seconds.
pub fn parse_budget(s: &str) -> anyhow::Result<Duration> {
    let (num, unit) =
        s.trim().split_at(s.trim().find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.trim().len()));
    let v: f64 = num.parse().map_err(|_| anyhow::anyhow!("--budget: `{s}` is not like 90s, 10m or 1h"))?;
    let secs = match unit {
        "" | "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => anyhow::bail!("--budget: unknown unit in `{s}` (use s, m or h)"),
    };
    Ok(Duration::from_secs_f64(secs))
}

struct Row {
    op: String,
    preset: String,
    measured: usize,
    failed: usize,
    default_ms: Option<f64>,
    tuned_ms: Option<f64>,
    winner: String,
}

fn tune_one(
    op: &dyn Operator,
    preset: &Preset,
    gpu_key: &GpuKey,
    store: &ResultsStore,
    a: &Args,
    shard: Shard,
    visible_gpu: Option<usize>,
) -> anyhow::Result<Row> {
    let key = tune_key(op, preset, gpu_key)?;
    let (cands, pruned) = plan_candidates(op, preset, a.max_candidates);
    eprintln!("{} / {}: {} candidates ({} pruned before timing)", op.name(), preset.name, cands.len(), pruned.len());
    let mut spec = WorkerSpec::new(std::env::current_exe()?).arg("worker").arg("--backend").arg(&a.backend);
    if let Some(i) = visible_gpu {
        spec = spec.env("CUDA_VISIBLE_DEVICES", i.to_string());
    }
    let worker = Worker::new(spec, Duration::from_secs(a.timeout_s));
    let dims = preset.dims.iter().map(|(k, v)| (k.clone(), (*v).max(0) as u64)).collect();
    let mut m = WorkerMeasurer::new(worker, dims);
    let default_id = k3k::tuner::CandidateSpec::from_knobs(knob_map(&op.default_knobs())).id;
    let opts = TuneOptions {
        shard,
        resume: a.resume,
        default_candidate: Some(default_id),
        max_consecutive_transient: 4,
        ..Default::default()
    };
    let bar = indicatif::ProgressBar::new(cands.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:.bold} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_prefix(format!("{} {}", op.name(), preset.name));
    let report = tune(store, &key, &cands, &opts, &mut m, &mut |ev| match ev {
        TuneEvent::Measured { id, outcome } => {
            bar.inc(1);
            bar.set_message(match outcome.timing() {
                Some(t) => format!("{id}: {:.4} ms", t.median_ms),
                None => format!("{id}: failed"),
            });
        }
        TuneEvent::Skipped { count } => bar.inc(count as u64),
        _ => {}
    })?;
    bar.finish_and_clear();
    let entry = store.load(&gpu_key.slug(), op.name())?.and_then(|f| f.entry(&key).cloned());
    Ok(Row {
        op: op.name().into(),
        preset: preset.name.clone(),
        measured: report.measured,
        failed: report.failed,
        default_ms: entry.as_ref().and_then(|e| e.default_ms),
        tuned_ms: report.winner_ms,
        winner: report.winner.unwrap_or_else(|| "-".into()),
    })
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let budget = parse_budget(&a.budget)?;
    let shard: Shard = match &a.shard {
        Some(s) => s.parse().map_err(|e| anyhow::anyhow!("--shard: {e}"))?,
        None => Shard::ALL,
    };
    let (gpu_key, gpus) = if a.backend == "cpu" {
        (GpuKey::new("cpu-interp", (0, 0), 1), 1)
    } else {
        let g = Gpu::open(0)?;
        let key = GpuKey::new(g.info.name.clone(), g.info.compute_capability, g.info.sm_count);
        drop(g);
        (key, Gpu::count().max(1))
    };
    let store = ResultsStore::open(&a.results)?;
    let mut work = VecDeque::new();
    for op in super::select_ops(&a.op)? {
        if a.dims.is_some() {
            work.push_back((op.name(), super::pick_preset(op.as_ref(), None, a.dims.as_deref())?));
            continue;
        }
        for p in op.bench_presets() {
            if a.preset == "k3" || a.preset == p.name {
                work.push_back((op.name(), p));
            }
        }
    }
    if work.is_empty() {
        anyhow::bail!("no preset matches `--preset {}`", a.preset);
    }
    let start = Instant::now();
    let queue = Mutex::new(work);
    let rows = Mutex::new(vec![]);
    let skipped = Mutex::new(vec![]);
    // One worker per visible GPU, each taking presets from a shared queue; the store serializes writes.
    std::thread::scope(|s| {
        for gi in 0..gpus {
            let (queue, rows, skipped, store, a, gpu_key) = (&queue, &rows, &skipped, &store, &a, &gpu_key);
            s.spawn(move || {
                loop {
                    let Some((name, preset)) = queue.lock().unwrap().pop_front() else { break };
                    if start.elapsed() > budget {
                        skipped.lock().unwrap().push(format!("{name} / {}", preset.name));
                        continue;
                    }
                    let op = k3k::ops::registry::all().into_iter().find(|o| o.name() == name).expect("registered");
                    let visible = (gpus > 1).then_some(gi);
                    match tune_one(op.as_ref(), &preset, gpu_key, store, a, shard, visible) {
                        Ok(r) => rows.lock().unwrap().push(r),
                        Err(e) => eprintln!("{name} / {}: {e:#}", preset.name),
                    }
                }
            });
        }
    });
    let rows = rows.into_inner().unwrap();
    println!(
        "\n{:<18} {:<40} {:>6} {:>6} {:>10} {:>10} {:>8}  winner",
        "op", "preset", "timed", "failed", "default ms", "tuned ms", "speedup"
    );
    for r in &rows {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
        let sp = match (r.default_ms, r.tuned_ms) {
            (Some(d), Some(t)) if t > 0.0 => format!("{:.2}x", d / t),
            _ => "-".into(),
        };
        println!(
            "{:<18} {:<40} {:>6} {:>6} {:>10} {:>10} {:>8}  {}",
            r.op,
            r.preset,
            r.measured,
            r.failed,
            f(r.default_ms),
            f(r.tuned_ms),
            sp,
            r.winner
        );
    }
    let skipped = skipped.into_inner().unwrap();
    if !skipped.is_empty() {
        println!("budget of {} spent after {:.0?}; not tuned: {}", a.budget, start.elapsed(), skipped.join(", "));
    }
    println!("results in {} ({:.0?})", a.results.join(gpu_key.slug()).display(), start.elapsed());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::parse_budget;
    use std::time::Duration;

    #[test]
    fn budgets() {
        assert_eq!(parse_budget("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_budget("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_budget("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_budget("30").unwrap(), Duration::from_secs(30));
        assert!(parse_budget("10 parsecs").is_err());
    }
}
