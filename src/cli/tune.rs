//! `k3k tune`: measure each operator's knob space on this GPU, in child workers, into `results/`.
//!
//! The strategy is `k3k_tuner::search` (backend-agnostic); this module is its command line and glue
//! (`tune_glue`: the operators' candidate lists, one worker per GPU). Under one wall-time budget:
//! presets with the same kernels and shape bucket (the same tuning key) are tuned once; round 1 times every
//! preset's defaults and best guesses (winners of stale records of this GPU and of other GPUs' records, then the
//! points of a sample the cost model ranks best) before round 2 spends what is left on each preset in turn
//! (winners of the run's other presets of the same operator, the leader's neighbours, the sample, ranked by the
//! cost model); a short screen stops candidates clearly slower than the best so far (`--early-stop`); the winner is
//! re-timed and checked against the reference. A planning thread compiles the next lists (NVRTC + ptxas, on every
//! core) while the lanes time. `--op all` orders presets by tier: the anchor table of SEMANTICS.md section 4 (tier 0),
//! the other presets of its five operator families (tier 1), the rest (tier 2), each tier interleaving its
//! operators. `--plan` prints an estimate without a GPU. `--shard i/n`, or without it a Slurm array task's or a
//! Kubernetes Indexed Job's variables (`k3k_tuner::scheduler`), makes this process time one shard of every list.

use super::tune_glue::{OpPlanner, WorkerLane};
use k3k::ops::op::{Operator, Preset};
use k3k::runtime::Gpu;
use k3k::tuner::budget::{self, CostModel, PresetCost};
use k3k::tuner::cost::SmLimits;
use k3k::tuner::search::{Lane, SearchEvent, SearchOptions, SearchPreset, SearchReport, search};
use k3k::tuner::{
    CandidateSpec, GpuKey, ResultsStore, Shard, ShardSource, TuneOptions, Worker, WorkerMeasurer, WorkerSpec,
};
use k3k::tuning::{knob_map, knobs_of, plan_candidates, tune_key};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
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
    /// A custom problem instead of the presets, e.g. `G=2,c0=17,c1=5,K=32,N=48` (repeat for several).
    #[arg(long)]
    pub dims: Vec<String>,
    /// Wall-time budget (`90s`, `10m`, `1h`): round 1 shares it over every preset first, round 2 gets what is left
    /// (see the module doc); a preset whose round 1 could not time even its defaults is listed as not tuned.
    #[arg(long, default_value = "10m")]
    pub budget: String,
    /// Skip candidates already measured in the results file (after an interruption).
    #[arg(long)]
    pub resume: bool,
    /// Measure only shard `i/n` of every candidate list (0-based), e.g. for a job array; combine the files
    /// with `k3k results merge`. Without it, a Slurm array task (`SLURM_ARRAY_TASK_ID`) or a Kubernetes
    /// Indexed Job's pod (`JOB_COMPLETION_INDEX`, with `--shard-count`) names the shard; `--shard 0/1` tunes
    /// everything there.
    #[arg(long)]
    pub shard: Option<String>,
    /// The shard count that goes with a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX` (its `completions`,
    /// which Kubernetes does not export; or set `K3K_SHARD_COUNT`).
    #[arg(long)]
    pub shard_count: Option<u32>,
    /// Results folder.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// At most this many candidates per preset (the default knobs always included).
    #[arg(long, default_value_t = 24)]
    pub max_candidates: usize,
    /// Round 1: up to this many candidates per preset (the defaults, always timed, then the best guesses), for
    /// every preset before any preset gets more.
    #[arg(long, default_value_t = 4)]
    pub min_candidates: usize,
    /// Early stop: a candidate whose short screen (5 samples) reads over this factor times the best of its preset so
    /// far is not timed further (0: off; the defaults are always timed in full).
    #[arg(long, default_value_t = 1.25)]
    pub early_stop: f64,
    /// Measure on `cuda` or on the CPU interpreter (`cpu`: exercises the tuning machinery without a GPU; its
    /// times mean nothing and go to a `cpu-interp` results file; candidates are not compiled).
    #[arg(long, default_value = "cuda")]
    pub backend: String,
    /// Seconds one measurement may take before its worker is killed and the candidate scored as a timeout.
    #[arg(long, default_value_t = 120)]
    pub timeout_s: u64,
    /// Benchmark reports (`<dir>/<gpu>/<op>.json`, from `k3k bench` + `scripts/peers.py`) whose peer timings fill
    /// the table's peer column
    #[arg(long, default_value = "results/bench")]
    pub peers: PathBuf,
    /// Print the plan (candidates per preset, in run order, within the budget) and its estimated wall time, then
    /// exit: no GPU needed. Compile costs are measured here on a sample unless `--compile-s` is given.
    #[arg(long)]
    pub plan: bool,
    /// With `--plan`: the GPUs of the machine planned for (default 1).
    #[arg(long)]
    pub gpus: Option<usize>,
    /// With `--plan`: the host cores compiling there (default: the cores here).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// With `--plan`: compile seconds (one core) per candidate for every operator, instead of measuring here.
    #[arg(long)]
    pub compile_s: Option<f64>,
    /// With `--plan`: GPU seconds to time one candidate (inputs, launch, warm-up, ~100 ms of samples, round trip;
    /// 1.0-1.6 s measured on the H200 for most presets).
    #[arg(long, default_value_t = 1.3)]
    pub time_s: f64,
}

/// Parse `90s`, `10m`, `1h` or plain seconds (at most 30 days: [`k3k::input::parse_duration`]).
pub fn parse_budget(s: &str) -> anyhow::Result<Duration> {
    k3k::input::parse_duration("--budget", s)
}

/// The most GPUs and compile jobs a plan is made for.
const MAX_GPUS: usize = 1024;
const MAX_JOBS: usize = 1 << 16;

/// The operator families of SEMANTICS.md section 2 (anchors in its section 4); `--op all` tunes their presets first.
pub const SPEC_FAMILIES: [&str; 5] = ["latent_moe_gemm", "mxfp4_matmul", "kda", "gated_mla", "hist_quantile"];

/// The presets of the anchor table of SEMANTICS.md section 4, as (operator, preset).
pub const SPEC_PRESETS: [(&str, &str); 18] = [
    ("latent_moe_gemm", "G28 mean256 K3584 N6144"),
    ("latent_moe_gemm", "G28 mean1024 K3584 N6144"),
    ("latent_moe_gemm", "G28 mean1024 K3072 N3584"),
    ("latent_moe_gemm", "G56 mean64 K3584 N6144"),
    ("mxfp4_matmul", "MXFP4 linear M1 N6144 K3584"),
    ("mxfp4_matmul", "MXFP4 linear M64 N6144 K3584"),
    ("mxfp4_matmul", "MXFP4 linear M4096 N6144 K3584"),
    ("mxfp4_matmul", "MXFP4 decode 28 experts x 4 tokens N6144 K3584"),
    ("gated_mla.prefill", "causal T8192 H96 d192/128"),
    ("gated_mla.prefill", "causal T32768 H12"),
    ("gated_mla.decode", "b128 S4096 H12"),
    ("gated_mla.decode", "b128 S4096 H96"),
    ("hist_quantile.qb", "T262144 E896 k16 B1024"),
    ("hist_quantile.column", "T262144 E896 B1024 f0.982"),
    ("kda", "B1 T8192 H96 K128 safe"),
    ("kda", "B1 T65536 H32 K128 safe"),
    ("kda", "B1 T16384 H32 K128 safe"),
    ("kda", "B1 T16384 H32 K128 exact"),
];

/// 0: an anchor preset (SEMANTICS.md section 4); 1: another preset of one of its operator families; 2: the rest.
pub fn tier(op: &str, preset: &str) -> u8 {
    if SPEC_PRESETS.contains(&(op, preset)) {
        0
    } else if SPEC_FAMILIES.iter().any(|f| op == *f || op.starts_with(&format!("{f}."))) {
        1
    } else {
        2
    }
}

/// One preset of the run.
#[derive(Debug, Clone)]
pub struct Item {
    pub op: &'static str,
    pub preset: Preset,
    pub tier: u8,
}

/// The presets of the run in order: by tier, and within a tier the operators interleaved (the first preset of
/// each operator, then the second of each, ...), so a budget that runs out leaves every operator some presets.
pub fn ordered_work(ops: &[Box<dyn Operator>], preset: &str, dims: &[String]) -> anyhow::Result<Vec<Item>> {
    let mut per_op: Vec<Vec<Item>> = vec![];
    for op in ops {
        let mut items = vec![];
        if dims.is_empty() {
            for p in op.bench_presets() {
                if preset == "k3" || preset == p.name {
                    items.push(Item { op: op.name(), tier: tier(op.name(), &p.name), preset: p });
                }
            }
        } else {
            for d in dims {
                let p = super::pick_preset(op.as_ref(), None, Some(d))?;
                // A shape no kernel builds for is refused here, before any planning or compiling.
                op.kernels(&p, &op.default_knobs())
                    .map_err(|e| anyhow::anyhow!("--dims {d}: {} builds no kernel for this shape: {e}", op.name()))?;
                items.push(Item { op: op.name(), tier: tier(op.name(), &p.name), preset: p });
            }
        }
        per_op.push(items);
    }
    let mut out = vec![];
    for t in 0..=2u8 {
        let mut queues: Vec<std::collections::VecDeque<Item>> =
            per_op.iter().map(|v| v.iter().filter(|i| i.tier == t).cloned().collect()).collect();
        while queues.iter().any(|q| !q.is_empty()) {
            for q in &mut queues {
                out.extend(q.pop_front());
            }
        }
    }
    Ok(out)
}

fn find_op(name: &str) -> Box<dyn Operator> {
    k3k::ops::registry::all().into_iter().find(|o| o.name() == name).expect("registered")
}

/// One row of the final table.
pub struct Row {
    op: String,
    preset: String,
    measured: usize,
    failed: usize,
    stopped: usize,
    default_ms: Option<f64>,
    /// The defaults' p20..p80 spread (ms), for the noise verdict.
    default_spread: Option<(f64, f64)>,
    tuned_ms: Option<f64>,
    winner: String,
    /// Whether the winner is the operator's defaults.
    winner_is_default: bool,
    /// The preset whose record this one shares (the same kernels and shape bucket).
    shared_with: Option<String>,
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    a.results = k3k::paths::resolve(&a.results, "--results")?;
    a.peers = k3k::paths::resolve(&a.peers, "--peers")?;
    k3k::codegen::refuse_experiments("tune")?;
    let budget = parse_budget(&a.budget)?;
    if !matches!(a.backend.as_str(), "cuda" | "cpu") {
        anyhow::bail!("--backend: unknown backend `{}` (cuda or cpu)", a.backend);
    }
    if a.timeout_s == 0 {
        anyhow::bail!("--timeout-s: must be at least 1 (no measurement finishes in 0 s)");
    }
    let timeout = k3k::input::seconds("--timeout-s", a.timeout_s as f64)?;
    if let Some(c) = a.compile_s {
        k3k::input::seconds("--compile-s", c)?;
    }
    k3k::input::seconds("--time-s", a.time_s)?;
    if a.gpus.is_some_and(|g| !(1..=MAX_GPUS).contains(&g)) {
        anyhow::bail!("--gpus: 1 to {MAX_GPUS} GPUs");
    }
    if a.jobs.is_some_and(|j| !(1..=MAX_JOBS).contains(&j)) {
        anyhow::bail!("--jobs: 1 to {MAX_JOBS} compile jobs");
    }
    if a.min_candidates > a.max_candidates {
        anyhow::bail!("--min-candidates {} is more than --max-candidates {}", a.min_candidates, a.max_candidates);
    }
    if a.max_candidates == 0 || a.min_candidates == 0 {
        anyhow::bail!("--max-candidates and --min-candidates: at least 1 (the defaults)");
    }
    if !(a.early_stop == 0.0 || (1.0..=100.0).contains(&a.early_stop)) {
        anyhow::bail!("--early-stop: 0 (off) or a factor from 1 to 100, not {}", a.early_stop);
    }
    let choice = k3k::tuner::scheduler::choose_from_process_env(a.shard.as_deref(), a.shard_count)?;
    let shard: Shard = choice.shard;
    let ops = super::select_ops(&a.op)?;
    let items = ordered_work(&ops, &a.preset, &a.dims)?;
    if items.is_empty() {
        anyhow::bail!("no preset matches `--preset {}`", a.preset);
    }
    if a.plan {
        return print_plan(&a, &items, budget);
    }
    println!("{choice}");
    let (gpu_key, gpus) = if a.backend == "cpu" {
        (GpuKey::new("cpu-interp", (0, 0), 1), 1)
    } else {
        let g = Gpu::open(0)?;
        let key = GpuKey::new(g.info.name.clone(), g.info.compute_capability, g.info.sm_count);
        drop(g);
        (key, Gpu::count().max(1))
    };
    let store = ResultsStore::open(&a.results)?;
    let start = Instant::now();
    let mut presets = vec![];
    for it in &items {
        let op = find_op(it.op);
        presets.push(SearchPreset {
            label: format!("{} / {}", it.op, it.preset.name),
            op: it.op.to_string(),
            key: tune_key(op.as_ref(), &it.preset, &gpu_key)?,
            default_id: CandidateSpec::from_knobs(knob_map(&op.default_knobs())).id,
        });
    }
    let planner = OpPlanner {
        items: &items,
        ops: k3k::ops::registry::all(),
        store: &store,
        gpu: &gpu_key,
        compile: a.backend != "cpu",
        limits: SmLimits::sm90(gpu_key.sm_count),
    };
    let mut lanes: Vec<Box<dyn Lane + '_>> = vec![];
    for gi in 0..gpus {
        let mut spec = WorkerSpec::new(std::env::current_exe()?).arg("worker").arg("--backend").arg(&a.backend);
        if gpus > 1 {
            spec = spec.env("CUDA_VISIBLE_DEVICES", gi.to_string());
        }
        let m = WorkerMeasurer::new(Worker::new(spec, timeout), Default::default());
        lanes.push(Box::new(WorkerLane { m, items: &items }));
    }
    let opts = SearchOptions {
        budget,
        first: a.min_candidates,
        max: a.max_candidates,
        tune: TuneOptions {
            shard,
            resume: a.resume,
            max_consecutive_transient: 4,
            // The leader re-timed (its first pass is the one most likely flattered by noise): one longer window
            // per preset and round, not three.
            retime_top: 1,
            early_stop: a.early_stop,
            ..TuneOptions::default()
        },
        plan_batch: 4,
        assumed_candidate_s: a.time_s,
    };
    let report = search(&store, &presets, &planner, lanes, &opts, &|ev| log_event(&presets, ev));
    let rows = table_rows(&store, &gpu_key, &items, &presets, &report)?;
    let not_tuned: Vec<String> = report.not_tuned().iter().map(|&i| presets[i].label.clone()).collect();
    let peers = peer_times(&a.peers, &gpu_key);
    let table = render_table(&rows, &peers);
    print!("\n{table}");
    if !not_tuned.is_empty() {
        println!("not tuned: {}", not_tuned.join(", "));
    }
    let mut errors: Vec<String> = report
        .presets
        .iter()
        .zip(&presets)
        .flat_map(|(r, p)| r.errors.iter().map(move |e| format!("{}: {e}", p.label)))
        .collect();
    for r in rows.iter().filter(|r| r.measured > 0 && r.failed == r.measured) {
        errors.push(format!("{} / {}: every one of its {} candidate(s) failed", r.op, r.preset, r.measured));
    }
    if !errors.is_empty() {
        println!("not tuned because of an error: {}", errors.join("; "));
    }
    let wall = start.elapsed().as_secs_f64();
    println!("results in {} ({wall:.0} s)", a.results.join(gpu_key.slug()).display());
    if !rows.is_empty() && a.backend != "cpu" {
        let tuned = rows.len() - not_tuned.len();
        let run = format!(
            "## {}: `k3k tune --op {} --preset {} --budget {} --max-candidates {}{}`\n\n{tuned} of {} preset(s) tuned in \
             {wall:.0} s wall on {gpus} GPU(s){}.\n\n```\n{table}```\n{}{}",
            k3k::tuner::utc_date_today(),
            a.op,
            a.preset,
            a.budget,
            a.max_candidates,
            if shard == Shard::ALL { String::new() } else { format!(" --shard {shard}") },
            rows.len(),
            match choice.source {
                ShardSource::Slurm { .. } | ShardSource::Kubernetes { .. } => format!("; {choice}"),
                _ => String::new(),
            },
            if not_tuned.is_empty() { String::new() } else { format!("\nNot tuned: {}\n", not_tuned.join(", ")) },
            verdict_note(&rows),
        );
        let path = a.results.join(gpu_key.slug()).join("TUNE.md");
        std::fs::create_dir_all(path.parent().expect("a folder"))?;
        let before = std::fs::read_to_string(&path).ok();
        let md = tune_log(before.as_deref(), &gpu_key.name, &run);
        k3k::bench::write_atomic(&path, md.as_bytes())?;
    }
    Ok(if errors.is_empty() && not_tuned.is_empty() { 0 } else { 1 })
}

/// A progress line per job on stderr.
fn log_event(presets: &[SearchPreset], ev: SearchEvent<'_>) {
    match ev {
        SearchEvent::Started { preset, round, planned, share_s } => eprintln!(
            "{} [round {round}]: {} candidates ({} pruned; planned in {:.1} s), up to {share_s:.0} s",
            presets[preset].label,
            planned.cands.len(),
            planned.pruned,
            planned.compile_s
        ),
        SearchEvent::Finished { preset, round, report, lane_s } => eprintln!(
            "{} [round {round}]: {} timed ({} stopped early, {} failed, {} cut) in {lane_s:.1} s, winner {}",
            presets[preset].label,
            report.measured,
            report.stopped,
            report.failed,
            report.cut,
            report.winner_ms.map_or("-".into(), |t| format!("{t:.4} ms"))
        ),
        SearchEvent::Failed { preset, round, error } => {
            eprintln!("{} [round {round}]: {error}", presets[preset].label)
        }
        SearchEvent::Skipped { .. } | SearchEvent::Tune { .. } => {}
    }
}

/// The rows of the final table, from the search's report and the stored entries.
fn table_rows(
    store: &ResultsStore,
    gpu: &GpuKey,
    items: &[Item],
    presets: &[SearchPreset],
    report: &SearchReport,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![];
    for (i, (it, p)) in items.iter().zip(presets).enumerate() {
        let r = &report.presets[i];
        let entry = store.load(&gpu.slug(), it.op)?.and_then(|f| f.entry(&p.key).cloned());
        let timing = |id: &str| entry.as_ref().and_then(|e| e.candidate(id)).and_then(|c| c.outcome.timing().cloned());
        let def = timing(&p.default_id);
        let winner = entry.as_ref().and_then(|e| e.winner.clone());
        rows.push(Row {
            op: it.op.into(),
            preset: it.preset.name.clone(),
            measured: r.measured,
            failed: r.failed,
            stopped: r.stopped,
            default_ms: entry.as_ref().and_then(|e| e.default_ms).or(def.as_ref().map(|t| t.median_ms)),
            default_spread: def.as_ref().map(|t| (t.p20_ms, t.p80_ms)),
            tuned_ms: winner.as_deref().and_then(timing).map(|t| t.median_ms),
            winner_is_default: winner.as_deref() == Some(p.default_id.as_str()),
            winner: winner.unwrap_or_else(|| "-".into()),
            shared_with: r.shared_with.map(|o| presets[o].label.clone()),
        });
    }
    Ok(rows)
}

/// Whether the defaults are already the optimum of what was timed: `default` when they won, `noise` when the
/// winner is within the defaults' own p20..p80 spread or 2% of their median, else the gain.
fn verdict(r: &Row) -> String {
    match (r.default_ms, r.tuned_ms) {
        _ if r.winner_is_default => "default".into(),
        (Some(d), Some(t)) if t > 0.0 => {
            let lo = r.default_spread.map_or(d, |s| s.0).min(d * 0.98);
            if t >= lo { "noise".into() } else { format!("+{:.0}%", (d / t - 1.0) * 100.0) }
        }
        _ => "-".into(),
    }
}

/// The note under a run's table: how many presets the defaults already serve.
fn verdict_note(rows: &[Row]) -> String {
    let own: Vec<&Row> = rows.iter().filter(|r| r.shared_with.is_none() && r.tuned_ms.is_some()).collect();
    let default = own.iter().filter(|r| verdict(r) == "default").count();
    let noise = own.iter().filter(|r| verdict(r) == "noise").count();
    format!(
        "\nOf the {} preset(s) tuned: the defaults won {default}, and {noise} more winner(s) are within the defaults' \
         timing noise (p20 of the defaults, or 2%): there the defaults are already the optimum of what was timed. \
         `verdict`: `default`, `noise`, or the gain over the defaults.\n",
        own.len()
    )
}

/// The tune log `TUNE.md` of a GPU's results folder: its title, then this run's section, then everything the
/// file held under its title before (earlier runs and notes), so that a tune of one operator keeps the tables of
/// the others.
fn tune_log(before: Option<&str>, gpu: &str, run: &str) -> String {
    let earlier = before.map_or("", |b| match b.split_once('\n') {
        Some((first, rest)) if first.starts_with("# k3k tune on ") => rest.trim_start_matches('\n'),
        _ => b,
    });
    let mut md = format!("# k3k tune on {gpu}\n\n{}\n", run.trim_end());
    if !earlier.trim().is_empty() {
        md.push('\n');
        md.push_str(earlier);
        if !md.ends_with('\n') {
            md.push('\n');
        }
    }
    md
}

/// Compile seconds (one core) of one candidate of `op` at `preset`: the slowest of up to two candidates compiled
/// here that were not in the module cache; `None` when no compile ran (no NVRTC, or all cached).
fn measure_compile_s(op: &dyn Operator, preset: &Preset, cands: &[CandidateSpec]) -> Option<f64> {
    let mut worst: Option<f64> = None;
    let mut fresh = 0;
    for c in cands.iter().take(8) {
        let Ok(k) = knobs_of(&c.knobs) else { continue };
        let t = Instant::now();
        match k3k::tuning::compile_candidate(op, preset, &k) {
            Ok(st) if st.cached == 0 => {
                let dt = t.elapsed().as_secs_f64();
                worst = Some(worst.map_or(dt, |w| w.max(dt)));
                fresh += 1;
            }
            Ok(_) => {}
            Err(e) if e.contains("NVRTC") || e.contains("nvrtc") => return None,
            Err(_) => {}
        }
        if fresh >= 2 {
            break;
        }
    }
    worst
}

/// `--plan`: the candidates of each preset (structural pruning only), the compile cost per operator, and the
/// allocation of `k3k_tuner::budget::allocate` with its simulated wall time.
fn print_plan(a: &Args, items: &[Item], budget_d: Duration) -> anyhow::Result<i32> {
    let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    // Every list is compiled ahead by the planning thread (`first_round` 1.0).
    let model = CostModel {
        jobs,
        lanes: a.gpus.unwrap_or(1).max(1),
        time_s: a.time_s,
        first_round: 1.0,
        ..CostModel::default()
    };
    let mut compile_of: HashMap<&str, (f64, &'static str)> = HashMap::new();
    let mut costs = vec![];
    for it in items {
        let op = find_op(it.op);
        let (cands, _) = plan_candidates(op.as_ref(), &it.preset, a.max_candidates, false, &[]);
        let c = match (a.compile_s, compile_of.get(it.op)) {
            (Some(c), _) => (c, "given"),
            (None, Some(c)) => *c,
            (None, None) => {
                let c = match measure_compile_s(op.as_ref(), &it.preset, &cands) {
                    Some(c) => (c, "measured here"),
                    None => anyhow::bail!(
                        "--plan: cannot measure the compile time of {} here (no NVRTC, or every sampled candidate \
                         cached); pass --compile-s",
                        it.op
                    ),
                };
                compile_of.insert(it.op, c);
                c
            }
        };
        costs.push((PresetCost { tier: it.tier, available: cands.len(), compile_s: c.0 }, c.1));
    }
    let pc: Vec<PresetCost> = costs.iter().map(|c| c.0.clone()).collect();
    let budget_s = budget_d.as_secs_f64();
    let alloc = budget::allocate(&pc, &model, budget_s, a.min_candidates, a.max_candidates);
    println!(
        "plan for {} GPU(s), {} compile job(s), {:.2} s GPU time per candidate, {:.1} s fixed per preset; budget {}",
        model.lanes, model.jobs, model.time_s, model.fixed_s, a.budget
    );
    println!(
        "{:<4} {:<20} {:<46} {:>5} {:>9} {:>6} {:>8}  compile",
        "tier", "op", "preset", "avail", "compile s", "plan", "first"
    );
    for ((it, (c, how)), n) in items.iter().zip(&costs).zip(&alloc) {
        println!(
            "{:<4} {:<20} {:<46} {:>5} {:>9.2} {:>6} {:>8}  {how}",
            it.tier,
            it.op,
            it.preset.name,
            c.available,
            c.compile_s,
            n,
            budget::first_round(*n, model.first_round)
        );
    }
    let est = budget::simulate(&pc, &alloc, &model);
    let planned = alloc.iter().filter(|&&n| n > 0).count();
    let tier0 = items.iter().zip(&alloc).filter(|(it, _)| it.tier == 0).count();
    let tier0_planned = items.iter().zip(&alloc).filter(|(it, n)| it.tier == 0 && **n > 0).count();
    println!(
        "estimated wall {est:.0} s of {budget_s:.0} s: {planned} of {} preset(s) planned ({tier0_planned} of {tier0} \
         SPEC anchor presets), {} candidates",
        items.len(),
        alloc.iter().sum::<usize>()
    );
    let min_n = items.iter().zip(&alloc).filter(|(it, _)| it.tier == 0).map(|(_, n)| *n).min();
    if let Some(n) = min_n {
        println!("fewest candidates of a SPEC anchor preset: {n}");
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
        "{:<20} {:<46} {:>5} {:>4} {:>4} {:>10} {:>10} {:>7} {:>8} {:>10} {:>8}  winner",
        "op", "preset", "timed", "stop", "fail", "default ms", "tuned ms", "speedup", "verdict", "peer ms", "vs peer"
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
    let mut speedups = vec![];
    let mut dates = std::collections::BTreeSet::new();
    for r in rows {
        let sp = match (r.default_ms, r.tuned_ms) {
            (Some(d), Some(t)) if t > 0.0 => Some(d / t),
            _ => None,
        };
        if r.shared_with.is_none() {
            speedups.extend(sp);
        }
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
            "{:<20} {:<46} {:>5} {:>4} {:>4} {:>10} {:>10} {:>7} {:>8} {:>10} {:>8}  {}",
            r.op,
            r.preset,
            r.measured,
            r.stopped,
            r.failed,
            f(r.default_ms),
            f(r.tuned_ms),
            sp.map_or("-".into(), |x| format!("{x:.2}x")),
            verdict(r),
            f(peer.map(|p| p.1)),
            vs,
            match &r.shared_with {
                Some(o) => format!("= {o} (same kernels and shape bucket: its record)"),
                None => r.winner.clone(),
            }
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
    use super::{parse_budget, tune_log};
    use std::time::Duration;

    #[test]
    fn tune_log_keeps_earlier_runs() {
        let first = tune_log(None, "NVIDIA H200", "## 2026-12-04: `k3k tune --op all`\n\ntable A\n");
        assert_eq!(first, "# k3k tune on NVIDIA H200\n\n## 2026-12-04: `k3k tune --op all`\n\ntable A\n");
        // A later run of one operator goes first; the earlier run and notes stay, the title once.
        let second = tune_log(Some(&first), "NVIDIA H200", "## 2026-12-05: `k3k tune --op kda`\n\ntable B\n");
        assert_eq!(
            second,
            "# k3k tune on NVIDIA H200\n\n## 2026-12-05: `k3k tune --op kda`\n\ntable B\n\n## 2026-12-04: `k3k tune --op \
             all`\n\ntable A\n"
        );
        // A file written before the log format (dated title, notes): kept whole below the new run.
        let old = "# k3k tune on NVIDIA H200 (2026-12-01)\n\n**Note.** read first\n\n`k3k tune --op all`: 18 presets\n";
        let third = tune_log(Some(old), "NVIDIA H200", "## run C\n");
        assert_eq!(
            third,
            "# k3k tune on NVIDIA H200\n\n## run C\n\n**Note.** read first\n\n`k3k tune --op all`: 18 presets\n"
        );
        assert_eq!(third.matches("# k3k tune on").count(), 1);
    }

    #[test]
    fn budgets() {
        assert_eq!(parse_budget("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_budget("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_budget("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_budget("30").unwrap(), Duration::from_secs(30));
        assert!(parse_budget("10 parsecs").is_err());
    }
}

#[cfg(test)]
mod order_tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn spec_presets_exist_and_come_first_interleaved() {
        let ops = k3k::ops::registry::all();
        for (op, p) in SPEC_PRESETS {
            let o = ops.iter().find(|o| o.name() == op).unwrap_or_else(|| panic!("no operator {op}"));
            assert!(o.bench_presets().iter().any(|x| x.name == p), "{op} has no preset `{p}`");
        }
        let items = ordered_work(&ops, "k3", &[]).unwrap();
        let total: usize = ops.iter().map(|o| o.bench_presets().len()).sum();
        assert_eq!(items.len(), total);
        assert!(items[..18].iter().all(|i| i.tier == 0));
        assert!(items[18..].iter().all(|i| i.tier > 0));
        assert!(items.windows(2).all(|w| w[0].tier <= w[1].tier));
        // interleaved: the first operators of tier 0 are all different
        let first: Vec<&str> = items[..5].iter().map(|i| i.op).collect();
        let distinct: HashSet<&str> = first.iter().copied().collect();
        assert_eq!(distinct.len(), 5, "{first:?}");
        assert_eq!(tier("mx.quantize", "MXFP8 ceil bf16 R4096 K7168"), 2);
        assert_eq!(tier("gated_mla.gate", "b128 H12"), 1);
        assert_eq!(tier("latent_moe_gemm", "G28 mean256 K3584 N6144 situ_glu+p"), 1);
    }
}
