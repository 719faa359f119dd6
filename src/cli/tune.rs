//! `k3k tune`: measure each operator's knob space on this GPU, in child workers, into `results/`.

use k3k::ops::op::{Operator, Preset};
use k3k::runtime::Gpu;
use k3k::tuner::{GpuKey, ResultsStore, Shard, TuneEvent, TuneOptions, Worker, WorkerMeasurer, WorkerSpec, tune};
use k3k::tuning::{knob_map, knobs_of, plan_candidates, plan_neighbours, tune_key};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
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
    /// Benchmark reports (`<dir>/<gpu>/<op>.json`, from `k3k bench` + `scripts/peers.py`) whose peer timings fill
    /// the table's peer column
    #[arg(long, default_value = "results/bench")]
    pub peers: PathBuf,
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
    // Round 1 samples the space (two thirds of the candidates), round 2 spends the rest on the points one knob
    // away from round 1's winner.
    let first_round = (a.max_candidates * 2).div_ceil(3).max(1);
    let (cands, pruned) = plan_candidates(op, preset, first_round);
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
    let mut on_event = |ev: TuneEvent<'_>| match ev {
        TuneEvent::Measured { id, outcome } => {
            bar.inc(1);
            bar.set_message(match outcome.timing() {
                Some(t) => format!("{id}: {:.4} ms", t.median_ms),
                None => format!("{id}: failed"),
            });
        }
        TuneEvent::Skipped { count } => bar.inc(count as u64),
        _ => {}
    };
    let mut report = tune(store, &key, &cands, &opts, &mut m, &mut on_event)?;
    let load = || -> anyhow::Result<Option<k3k::tuner::TuneEntry>> {
        Ok(store.load(&gpu_key.slug(), op.name())?.and_then(|f| f.entry(&key).cloned()))
    };
    let leader = load()?.and_then(|e| {
        let w = e.winner.clone()?;
        let knobs = knobs_of(&e.candidate(&w)?.knobs).ok()?;
        let done: HashSet<String> = e.candidates.iter().map(|c| c.id.clone()).collect();
        Some((knobs, done))
    });
    if a.max_candidates > first_round
        && let Some((leader, done)) = leader
    {
        let (near, _) = plan_neighbours(op, preset, &leader, &done, a.max_candidates - first_round);
        if !near.is_empty() {
            bar.inc_length(near.len() as u64);
            let r2 = tune(store, &key, &near, &opts, &mut m, &mut on_event)?;
            report.measured += r2.measured;
            report.failed += r2.failed;
            report.winner = r2.winner;
            report.winner_ms = r2.winner_ms;
        }
    }
    bar.finish_and_clear();
    let entry = load()?;
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
    let peers = peer_times(&a.peers, &gpu_key);
    let table = render_table(&rows, &peers);
    print!("\n{table}");
    let skipped = skipped.into_inner().unwrap();
    if !skipped.is_empty() {
        println!("budget of {} spent after {:.0?}; not tuned: {}", a.budget, start.elapsed(), skipped.join(", "));
    }
    println!("results in {} ({:.0?})", a.results.join(gpu_key.slug()).display(), start.elapsed());
    if !rows.is_empty() && a.backend != "cpu" {
        let md = format!(
            "# k3k tune on {} ({})\n\n`k3k tune --op {} --preset {} --budget {} --max-candidates {}{}`: {} preset(s) in \
             {:.0} s wall on {gpus} GPU(s).\n\n```\n{table}```\n",
            gpu_key.name,
            k3k::tuner::utc_date_today(),
            a.op,
            a.preset,
            a.budget,
            a.max_candidates,
            a.shard.as_deref().map(|s| format!(" --shard {s}")).unwrap_or_default(),
            rows.len(),
            start.elapsed().as_secs_f64(),
        );
        let path = a.results.join(gpu_key.slug()).join("TUNE.md");
        std::fs::create_dir_all(path.parent().expect("a folder"))?;
        k3k::bench::write_atomic(&path, md.as_bytes())?;
    }
    Ok(0)
}

/// Peer name and time per (op, preset) from the benchmark reports of this GPU, with the report's date.
fn peer_times(dir: &Path, gpu: &GpuKey) -> HashMap<(String, String), (String, f64, String)> {
    let mut out = HashMap::new();
    let Ok(reports) = k3k::report::load_reports(dir) else { return out };
    for r in reports.iter().filter(|r| k3k::environment::gpu_slug(&r.gpu) == gpu.slug()) {
        for row in &r.rows {
            if let Some(ms) = row.peer_ms {
                out.insert((r.op.clone(), row.preset.clone()), (row.peer.clone(), ms, r.date.clone()));
            }
        }
    }
    out
}

/// The final table: per preset the default and tuned times, their ratio, the peer's time (from the benchmark
/// report of the same GPU) and the tuned kernel's ratio to it, and the median tuned-vs-default speedup.
fn render_table(rows: &[Row], peers: &HashMap<(String, String), (String, f64, String)>) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<20} {:<46} {:>5} {:>5} {:>10} {:>10} {:>7} {:>10} {:>8}  winner",
        "op", "preset", "timed", "fail", "default ms", "tuned ms", "speedup", "peer ms", "vs peer"
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
    let mut speedups = vec![];
    let mut dates = std::collections::BTreeSet::new();
    for r in rows {
        let sp = match (r.default_ms, r.tuned_ms) {
            (Some(d), Some(t)) if t > 0.0 => Some(d / t),
            _ => None,
        };
        speedups.extend(sp);
        let peer = peers.get(&(r.op.clone(), r.preset.clone()));
        if let Some((_, _, d)) = peer {
            dates.insert(d.clone());
        }
        let vs = match (peer, r.tuned_ms) {
            (Some((_, p, _)), Some(t)) if t > 0.0 => format!("{:.2}x", p / t),
            _ => "-".into(),
        };
        let _ = writeln!(
            t,
            "{:<20} {:<46} {:>5} {:>5} {:>10} {:>10} {:>7} {:>10} {:>8}  {}",
            r.op,
            r.preset,
            r.measured,
            r.failed,
            f(r.default_ms),
            f(r.tuned_ms),
            sp.map_or("-".into(), |x| format!("{x:.2}x")),
            f(peer.map(|p| p.1)),
            vs,
            r.winner
        );
    }
    if !speedups.is_empty() {
        speedups.sort_by(f64::total_cmp);
        let n = speedups.len();
        let median = if n % 2 == 1 { speedups[n / 2] } else { (speedups[n / 2 - 1] + speedups[n / 2]) / 2.0 };
        let geo = (speedups.iter().map(|x| x.ln()).sum::<f64>() / n as f64).exp();
        let _ = writeln!(t, "tuned vs default over {n} preset(s): median {median:.2}x, geometric mean {geo:.2}x");
    }
    if !dates.is_empty() {
        let d: Vec<_> = dates.into_iter().collect();
        let _ = writeln!(
            t,
            "peer ms: from the benchmark reports of this GPU (k3k bench + scripts/peers.py, {})",
            d.join(", ")
        );
    }
    t
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
