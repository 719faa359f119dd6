//! `k3k worker`: the measuring child process of `k3k tune` (JSON lines on stdin/stdout, logs on stderr). A
//! candidate that faults takes this process down, not the tune: the parent records a crash and respawns it.

use k3k::ops::op::{Instance, Preset};
use k3k::ops::plan::{Executor, GpuExec};
use k3k::ops::registry;
use k3k::runtime::{Gpu, TimingOptions};
use k3k::tuner::protocol::{MeasureRequest, MeasureResponse, SCREEN_SAMPLES, Task, serve};
use k3k::tuner::{CheckRecord, FailStage, Outcome, TimingStats};
use std::time::Instant;

/// Arguments of `k3k worker`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Measure on the GPU (`cuda`) or on the CPU interpreter (`cpu`: wall-clock time of the interpreter, only
    /// meaningful for testing the tuning machinery without a GPU).
    #[arg(long, default_value = "cuda")]
    pub backend: String,
}

struct State {
    exec: Option<Executor>,
    backend: String,
    /// The last problem's instance (inputs are generated once per problem, not per candidate).
    inst: Option<(String, Box<dyn Instance>)>,
}

fn failed(stage: FailStage, e: impl std::fmt::Display) -> MeasureResponse {
    MeasureResponse::outcome(Outcome::failed(stage, e.to_string()))
}

impl State {
    fn exec(&mut self) -> Result<&mut Executor, String> {
        if self.exec.is_none() {
            self.exec = Some(match self.backend.as_str() {
                "cpu" => Executor::Cpu,
                _ => Executor::Gpu(Box::new(GpuExec::new(Gpu::open(0).map_err(|e| e.to_string())?))),
            });
        }
        Ok(self.exec.as_mut().expect("set above"))
    }

    /// [`State::answer`], and with `K3K_TUNE_PHASES=<file>` one JSON line per request appended to that file: the
    /// wall milliseconds of each phase (where a tune's time goes on the GPU side).
    fn handle(&mut self, req: MeasureRequest) -> MeasureResponse {
        let Some(path) = std::env::var_os("K3K_TUNE_PHASES") else {
            return self.answer(req, &mut Phases::default());
        };
        let (op, id, task) = (req.key.op.clone(), req.candidate.id.clone(), req.task);
        let mut ph = Phases { start: Some(Instant::now()), ..Default::default() };
        let resp = self.answer(req, &mut ph);
        ph.mark("end");
        let line = serde_json::json!({
            "op": op, "id": id, "task": task, "stopped": resp.stopped,
            "samples": resp.outcome.as_ref().and_then(|o| o.timing()).map(|t| t.samples),
            "ms": ph.marks.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        });
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{line}");
        }
        resp
    }

    fn answer(&mut self, req: MeasureRequest, ph: &mut Phases) -> MeasureResponse {
        // Test hook: make one candidate take the worker down the way an illegal address would.
        if std::env::var("K3K_TEST_CRASH_CANDIDATE").is_ok_and(|id| id == req.candidate.id) {
            eprintln!("k3k worker: K3K_TEST_CRASH_CANDIDATE={} -> abort", req.candidate.id);
            std::process::abort();
        }
        let Some(op) = registry::all().into_iter().find(|o| o.name() == req.key.op) else {
            return failed(FailStage::Prune, format!("unknown operator `{}`", req.key.op));
        };
        let preset =
            Preset { name: "tune".into(), dims: req.dims.iter().map(|(k, v)| (k.clone(), *v as i64)).collect() };
        let knobs = match k3k::tuning::knobs_of(&req.candidate.knobs) {
            Ok(k) => k,
            Err(e) => return failed(FailStage::Prune, e),
        };
        let ident = format!("{}|{:?}", req.key.op, req.dims);
        if self.inst.as_ref().is_none_or(|(id, _)| *id != ident) {
            self.inst = None; // free the previous problem's inputs first
            match op.instance(&preset, 0x7475_6e65) {
                Ok(i) => self.inst = Some((ident, i)),
                Err(e) => return failed(FailStage::Prune, e),
            }
            ph.mark("instance");
        }
        let plan = match self.inst.as_ref().expect("set above").1.plan(&knobs) {
            Ok(p) => p,
            Err(e) => return failed(FailStage::Prune, e),
        };
        ph.mark("plan");
        match req.task {
            Task::Check => {
                let out = match self
                    .exec()
                    .map_err(|e| e.to_string())
                    .and_then(|x| x.run(&plan).map_err(|e| e.to_string()))
                {
                    Ok(o) => o,
                    Err(_) => return MeasureResponse::check(CheckRecord { max_rel_err: f64::INFINITY, passed: false }),
                };
                match self.inst.as_ref().expect("set").1.check(&out) {
                    Ok(r) => MeasureResponse::check(CheckRecord { max_rel_err: r.max_rel_err, passed: r.passed }),
                    Err(_) => MeasureResponse::check(CheckRecord { max_rel_err: f64::INFINITY, passed: false }),
                }
            }
            Task::Time => {
                // Test hook: every measurement takes at least this long (budget tests on the CPU backend).
                if let Some(ms) = std::env::var("K3K_TEST_MEASURE_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                }
                // Test hook: the time of a candidate is a fixed function of its id, the same in every process, so
                // tests can compare the winners of separate runs (interpreter wall times are noise). CPU backend
                // only: made-up times never reach a GPU's results.
                // The early-stop screen is honoured the same way: over `stop_ms`, the screen's samples, flagged.
                if self.backend == "cpu" && std::env::var("K3K_TEST_TIME_BY_ID").is_ok_and(|v| v == "1") {
                    let ms = 1.0 + (k3k::tuner::stable_hash(&req.candidate.id) % 1_000_000) as f64 * 1e-5;
                    let stopped = req.bench.stop_ms > 0.0 && ms > req.bench.stop_ms;
                    let n = if stopped { SCREEN_SAMPLES } else { 10 };
                    return match TimingStats::from_samples(&vec![ms; n]) {
                        Ok(t) if stopped => MeasureResponse::stopped(Outcome::Timed(t)),
                        Ok(t) => MeasureResponse::outcome(Outcome::Timed(t)),
                        Err(e) => failed(FailStage::Launch, e),
                    };
                }
                let bench = req.bench;
                let exec = match self.exec() {
                    Ok(x) => x,
                    Err(e) => return failed(FailStage::Launch, e),
                };
                let samples = match exec {
                    Executor::Cpu => {
                        let mut s = vec![];
                        for _ in 0..bench.min_samples.clamp(1, 5) {
                            let t = Instant::now();
                            if let Err(e) = Executor::Cpu.run(&plan) {
                                return failed(FailStage::Launch, e);
                            }
                            s.push(t.elapsed().as_secs_f64() * 1e3);
                        }
                        s
                    }
                    Executor::Gpu(g) => {
                        if let Err(e) = g.prepare(&plan) {
                            return failed(FailStage::Compile, e);
                        }
                        ph.mark("prepare");
                        let dev = match g.upload(&plan) {
                            Ok(d) => d,
                            Err(e) => return failed(FailStage::Launch, e),
                        };
                        ph.mark("upload");
                        // A first run (it loads the modules), a second to estimate the time, then as many
                        // samples as the budget allows. The estimate once came from the first run, which can
                        // take twice a warm one: such a candidate got fewer samples over a shorter window than
                        // the others, whose medians are not comparable with it under power-limited clocks
                        // (2026-12-04: a stale GEMM record read 0.563 ms over 83 samples against the default's
                        // 0.602 over 214; the bench, with equal windows, read 0.611 vs 0.605).
                        for _ in 0..2 {
                            if let Err(e) = g.launch_all(&plan, &dev).and_then(|_| Ok(g.gpu.sync()?)) {
                                return failed(FailStage::Launch, e);
                            }
                        }
                        let t = Instant::now();
                        if let Err(e) = g.launch_all(&plan, &dev).and_then(|_| Ok(g.gpu.sync()?)) {
                            return failed(FailStage::Launch, e);
                        }
                        let (warmup, reps) = bench.runs_for(t.elapsed().as_secs_f64() * 1e3);
                        ph.mark("warm");
                        // The early-stop screen: a few samples under the same conditions (L2 flushed before each);
                        // clearly slower than the best so far, the candidate is not timed further.
                        if bench.stop_ms > 0.0 {
                            let screen = TimingOptions {
                                warmup: 1,
                                reps: SCREEN_SAMPLES,
                                flush_l2: bench.flush_l2,
                                ..Default::default()
                            };
                            let s = match g.time(&plan, &dev, screen) {
                                Ok(s) => s,
                                Err(e) => return failed(FailStage::Launch, e),
                            };
                            ph.mark("screen");
                            if let Ok(t) = TimingStats::from_samples(&s)
                                && t.median_ms > bench.stop_ms
                            {
                                return MeasureResponse::stopped(Outcome::Timed(t));
                            }
                        }
                        match g.time(
                            &plan,
                            &dev,
                            TimingOptions { warmup, reps, flush_l2: bench.flush_l2, ..Default::default() },
                        ) {
                            Ok(s) => s,
                            Err(e) => return failed(FailStage::Launch, e),
                        }
                    }
                };
                match TimingStats::from_samples(&samples) {
                    Ok(t) => MeasureResponse::outcome(Outcome::Timed(t)),
                    Err(e) => failed(FailStage::Launch, e),
                }
            }
        }
    }
}

/// Wall-time marks of one request (milliseconds since the previous mark), kept only when `start` is set.
#[derive(Default)]
struct Phases {
    start: Option<Instant>,
    marks: Vec<(&'static str, f64)>,
}

impl Phases {
    fn mark(&mut self, name: &'static str) {
        if let Some(t) = self.start {
            self.marks.push((name, t.elapsed().as_secs_f64() * 1e3));
            self.start = Some(Instant::now());
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let mut st = State { exec: None, backend: a.backend, inst: None };
    serve(|req: MeasureRequest| st.handle(req))?;
    Ok(0)
}
