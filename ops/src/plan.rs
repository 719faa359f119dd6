//! Plans: what an operator launches for one problem, independent of where it runs.
//!
//! A [`Plan`] is a set of named buffers (inputs with their data, outputs and scratch with their shapes) and an
//! ordered list of [`Step`]s (one kernel launch each, naming its buffers in kernel argument order). The
//! [`Executor`] runs a plan on the CPU interpreter or on a GPU, with the same checks and the same results, so an
//! operator is written once and every backend, the fuzzer, the tuner and the benchmarks share it.
//!
//! Streams: a plan may give its steps a [`Sched`] (a stream, 0 main or 1 side, and the earlier steps it waits
//! for). The CPU executors run the steps in plan order, which is a topological order of those dependencies (a
//! step may wait only for earlier steps), so their results do not depend on the schedule; the GPU executor runs
//! stream-1 steps on [`Gpu::side_stream`] and orders the streams with events only where a step waits for a step
//! of the other stream. [`Plan::check_schedule`] refuses a schedule that leaves two steps of different streams
//! unordered while they share a buffer one of them writes.

use crate::OpError;
use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_codegen::{BuildOptions, build};
use k3k_ir::{DType, HostTensor, Kernel, SymValue};
use k3k_runtime::{CudaEvent, DeviceTensor, Gpu, LoadedKernel, TimingOptions};
use std::collections::HashMap;

/// What a buffer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Read by the kernels; its data is given.
    Input,
    /// Written by the kernels; poisoned (NaN / 0xFF) before every run so an unwritten element shows.
    Output,
    /// Workspace between steps; poisoned before every run like an output.
    Scratch,
}

/// One named buffer of a plan.
#[derive(Clone, Debug)]
pub struct Buffer {
    pub name: String,
    pub role: Role,
    pub tensor: HostTensor,
}

/// One kernel launch.
#[derive(Clone, Debug)]
pub struct Step {
    pub kernel: Kernel,
    /// Buffer indices, in the kernel's tensor-argument order.
    pub args: Vec<usize>,
    pub scalars: Vec<(String, SymValue)>,
}

/// Where a step runs on a GPU and what it waits for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sched {
    /// 0: the main stream; 1: the side stream (higher priority, see [`Gpu::side_stream`]).
    pub stream: u8,
    /// Earlier steps (indices into [`Plan::steps`]) that must finish before this one starts. The previous step
    /// of the same stream always does; a wait is needed only for steps of the other stream.
    pub waits: Vec<usize>,
}

/// The streams a schedule may name.
pub const STREAMS: u8 = 2;

/// Buffers and launches for one problem.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub buffers: Vec<Buffer>,
    pub steps: Vec<Step>,
    /// Empty: every step on the main stream, in order (the plan of one stream). Else one entry per step.
    pub schedule: Vec<Sched>,
}

impl Plan {
    /// Add an input buffer; returns its index.
    pub fn input(&mut self, name: &str, tensor: HostTensor) -> usize {
        self.buffers.push(Buffer { name: name.into(), role: Role::Input, tensor });
        self.buffers.len() - 1
    }
    /// Add an output buffer of a shape; returns its index.
    pub fn output(&mut self, name: &str, dtype: DType, shape: &[usize]) -> usize {
        self.buffers.push(Buffer { name: name.into(), role: Role::Output, tensor: HostTensor::zeros(dtype, shape) });
        self.buffers.len() - 1
    }
    /// Add a scratch buffer of a shape; returns its index.
    pub fn scratch(&mut self, name: &str, dtype: DType, shape: &[usize]) -> usize {
        self.buffers.push(Buffer { name: name.into(), role: Role::Scratch, tensor: HostTensor::zeros(dtype, shape) });
        self.buffers.len() - 1
    }
    /// Run the steps in plan order on host copies of the buffers (every buffer but the inputs poisoned first),
    /// each step's kernel launched by `launch` on its tensor arguments and scalars; returns every buffer, in
    /// `buffers` order. The CPU backends (the interpreter's [`Executor::Cpu`], the JIT's) are this loop with
    /// their own launch.
    pub fn run_host(
        &self,
        mut launch: impl FnMut(&Kernel, &mut [HostTensor], &[(&str, SymValue)]) -> Result<(), OpError>,
    ) -> Result<Vec<HostTensor>, OpError> {
        let mut bufs: Vec<HostTensor> = self
            .buffers
            .iter()
            .map(|b| {
                let mut t = b.tensor.clone();
                if b.role != Role::Input {
                    t.poison();
                }
                t
            })
            .collect();
        for s in &self.steps {
            let mut args: Vec<HostTensor> = s.args.iter().map(|&i| take_host(&mut bufs[i])).collect();
            let scalars: Vec<(&str, SymValue)> = s.scalars.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            let r = launch(&s.kernel, &mut args, &scalars);
            for (&i, t) in s.args.iter().zip(args) {
                bufs[i] = t;
            }
            r?;
        }
        Ok(bufs)
    }
    /// The outputs among the buffers [`Plan::run_host`] returned.
    pub fn outputs(&self, bufs: Vec<HostTensor>) -> Outputs {
        let mut out = Outputs::default();
        for (b, t) in self.buffers.iter().zip(bufs) {
            if b.role == Role::Output {
                out.0.insert(b.name.clone(), t);
            }
        }
        out
    }
    /// Add a launch (on the main stream).
    pub fn step(&mut self, kernel: Kernel, args: &[usize], scalars: &[(&str, SymValue)]) {
        self.steps.push(Step {
            kernel,
            args: args.to_vec(),
            scalars: scalars.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        });
        if !self.schedule.is_empty() {
            self.schedule.push(Sched::default());
        }
    }
    /// Add a launch on `stream` that waits for the earlier steps `waits`; returns its step index. (Checked by
    /// [`Plan::check_schedule`] before any executor runs the plan.)
    pub fn step_on(
        &mut self,
        kernel: Kernel,
        args: &[usize],
        scalars: &[(&str, SymValue)],
        stream: u8,
        waits: &[usize],
    ) -> usize {
        // The steps added before the first scheduled one ran on the main stream.
        self.schedule.resize(self.steps.len(), Sched::default());
        self.steps.push(Step {
            kernel,
            args: args.to_vec(),
            scalars: scalars.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        });
        self.schedule.push(Sched { stream, waits: waits.to_vec() });
        self.steps.len() - 1
    }
    /// The schedule of step `i` (the main stream, no waits, when the plan has none).
    pub fn sched(&self, i: usize) -> Sched {
        self.schedule.get(i).cloned().unwrap_or_default()
    }
    /// True when some step runs on the side stream.
    pub fn uses_side_stream(&self) -> bool {
        self.schedule.iter().any(|s| s.stream != 0)
    }
    /// Check the schedule: one entry per step (or none), streams below [`STREAMS`], waits only for earlier steps,
    /// and every pair of steps on different streams that share a buffer which either of them writes (by the
    /// kernels' declared access) ordered by the waits (transitively, through either stream's order). The error
    /// names the step and the buffer.
    pub fn check_schedule(&self) -> Result<(), OpError> {
        let n = self.steps.len();
        if self.schedule.is_empty() {
            return Ok(());
        }
        let err = |step: usize, why: String| OpError::Schedule { step, why };
        if self.schedule.len() != n {
            return Err(err(n, format!("{} schedule entries for {n} steps", self.schedule.len())));
        }
        // before[j][i]: step i finishes before step j starts.
        let mut before: Vec<Vec<bool>> = Vec::with_capacity(n);
        let mut last_on = [None::<usize>; STREAMS as usize];
        for (j, sc) in self.schedule.iter().enumerate() {
            if sc.stream >= STREAMS {
                return Err(err(j, format!("stream {} (streams are 0 and 1)", sc.stream)));
            }
            let mut b = vec![false; n];
            let mut preds = sc.waits.clone();
            if let Some(w) = sc.waits.iter().find(|&&w| w >= j) {
                return Err(err(j, format!("waits for step {w}, which is not an earlier step")));
            }
            preds.extend(last_on[sc.stream as usize]);
            for p in preds {
                b[p] = true;
                for (x, &y) in before[p].iter().enumerate() {
                    b[x] |= y;
                }
            }
            before.push(b);
            last_on[sc.stream as usize] = Some(j);
        }
        let writes = |s: &Step, a: usize| -> Vec<bool> {
            s.args
                .iter()
                .zip(&s.kernel.tensors)
                .filter(|(b, _)| **b == a)
                .map(|(_, t)| t.access != k3k_ir::Access::Read)
                .collect()
        };
        for (j, bj) in before.iter().enumerate() {
            for (i, &ordered) in bj.iter().enumerate().take(j) {
                if self.schedule[i].stream == self.schedule[j].stream || ordered {
                    continue;
                }
                for &a in &self.steps[j].args {
                    if !self.steps[i].args.contains(&a) {
                        continue;
                    }
                    let w = writes(&self.steps[i], a).into_iter().chain(writes(&self.steps[j], a)).any(|w| w);
                    if w {
                        return Err(err(
                            j,
                            format!(
                                "`{}` (stream {}) and step {i} `{}` (stream {}) share buffer `{}`, which one of them \
                                 writes, without a wait between them",
                                self.steps[j].kernel.name,
                                self.schedule[j].stream,
                                self.steps[i].kernel.name,
                                self.schedule[i].stream,
                                self.buffers[a].name
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
    /// Index of a buffer by name.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.buffers.iter().position(|b| b.name == name)
    }
    /// The distinct kernels of the plan.
    pub fn kernels(&self) -> Vec<&Kernel> {
        let mut seen = std::collections::HashSet::new();
        self.steps.iter().map(|s| &s.kernel).filter(|k| seen.insert(k3k_ir::stable_hash(k))).collect()
    }
}

/// Outputs of a run, by buffer name.
#[derive(Clone, Debug, Default)]
pub struct Outputs(pub HashMap<String, HostTensor>);

impl Outputs {
    /// An output by name.
    pub fn get(&self, name: &str) -> Result<&HostTensor, OpError> {
        self.0.get(name).ok_or_else(|| OpError::Internal(format!("plan produced no output `{name}`")))
    }
}

/// A GPU with a cache of loaded kernels (and the events of scheduled plans).
pub struct GpuExec {
    pub gpu: Gpu,
    loaded: HashMap<String, LoadedKernel>,
    /// For plans that use the side stream: one event per step (recorded after a step that a step of the other
    /// stream waits for), then the fork and the join event. Reused from run to run: a wait captures the record
    /// that precedes it, so re-recording an event later does not affect an enqueued wait.
    events: Vec<CudaEvent>,
}

impl GpuExec {
    /// Wrap an open GPU.
    pub fn new(gpu: Gpu) -> Self {
        GpuExec { gpu, loaded: HashMap::new(), events: vec![] }
    }

    /// Loaded kernels are keyed by the stable hash of their IR, never by name: two variants that differ only
    /// in, say, their alignment class must not share a module.
    fn load(&mut self, k: &Kernel) -> Result<&LoadedKernel, OpError> {
        let key = k3k_ir::stable_hash(k);
        if !self.loaded.contains_key(&key) {
            // CUBIN is assembled for sm_90a: other GPUs get PTX, which their driver JIT-compiles.
            let opts = match self.gpu.info.compute_capability {
                (9, 0) => BuildOptions::for_loading(),
                _ => BuildOptions { assemble: false },
            };
            let m = build(k, opts)?;
            let lk = self.gpu.load(k, &m)?;
            self.loaded.insert(key.clone(), lk);
        }
        Ok(&self.loaded[&key])
    }

    /// Check a plan's schedule and make sure every kernel of it is compiled and loaded, and for a plan that uses
    /// the side stream that the stream and its events exist (so timing excludes compilation and creation).
    pub fn prepare(&mut self, plan: &Plan) -> Result<(), OpError> {
        plan.check_schedule()?;
        for k in plan.kernels() {
            self.load(k)?;
        }
        if plan.uses_side_stream() {
            self.gpu.side_stream()?;
            while self.events.len() < plan.steps.len() + 2 {
                self.events.push(self.gpu.new_sync_event()?);
            }
        }
        Ok(())
    }

    /// Upload a plan's buffers (outputs and scratch poisoned).
    pub fn upload(&self, plan: &Plan) -> Result<Vec<DeviceTensor>, OpError> {
        plan.buffers
            .iter()
            .map(|b| match b.role {
                Role::Input => Ok(self.gpu.upload(&b.tensor)?),
                Role::Output | Role::Scratch => Ok(self.gpu.poisoned(b.tensor.dtype, &b.tensor.shape)?),
            })
            .collect()
    }

    /// Enqueue every step of a plan on resident buffers.
    pub fn launch_all(&mut self, plan: &Plan, dev: &[DeviceTensor]) -> Result<(), OpError> {
        self.prepare(plan)?;
        let kernels = self.step_kernels(plan)?;
        self.launch_plan_raw(plan, &kernels, dev)
    }

    /// The loaded kernel of every step, in step order (after [`GpuExec::prepare`]). Looked up once per run or
    /// timing, never per launch: the key is the hash of the printed IR, which costs 20-350 us of host time for
    /// the large kernels (kda.decode: 350 us on a 2-core x86 machine), and hashing inside the timed loop let the
    /// host fall behind a short kernel plus its L2 flush, so the GPU idled inside the timed interval.
    pub fn step_kernels(&self, plan: &Plan) -> Result<Vec<&LoadedKernel>, OpError> {
        plan.steps
            .iter()
            .map(|s| {
                self.loaded
                    .get(&k3k_ir::stable_hash(&s.kernel))
                    .ok_or_else(|| OpError::Internal(format!("kernel `{}` not loaded", s.kernel.name)))
            })
            .collect()
    }

    /// Download the outputs of a plan.
    pub fn download(&self, plan: &Plan, dev: &[DeviceTensor]) -> Result<Outputs, OpError> {
        let mut out = Outputs::default();
        for (b, d) in plan.buffers.iter().zip(dev) {
            if b.role == Role::Output {
                out.0.insert(b.name.clone(), self.gpu.download(d)?);
            }
        }
        Ok(out)
    }

    /// Time the whole plan (all steps) on resident buffers; ms per sample.
    pub fn time(&mut self, plan: &Plan, dev: &[DeviceTensor], opts: TimingOptions) -> Result<Vec<f64>, OpError> {
        self.prepare(plan)?;
        let kernels = self.step_kernels(plan)?;
        let mut err = None;
        let samples = self.gpu.time(
            || {
                if let Err(e) = self.launch_plan_raw(plan, &kernels, dev) {
                    err = Some(e.to_string());
                }
                Ok(())
            },
            opts,
        );
        if let Some(e) = err {
            return Err(OpError::Internal(e));
        }
        Ok(samples?)
    }

    /// Enqueue the steps (after [`GpuExec::prepare`]). A plan without side-stream steps is enqueued on the main
    /// stream alone, as before streams existed. Otherwise: the side stream first waits for the main stream (a
    /// fork event: the side steps follow every upload, poison memset and earlier launch); a step waits for each
    /// waited step of the other stream (an event recorded right after that step); at the end the main stream
    /// waits for the side stream (a join event), so that whatever is enqueued on the main stream next (the timing
    /// end event, downloads, a sync, the next run) follows the whole plan.
    fn launch_plan_raw(&self, plan: &Plan, kernels: &[&LoadedKernel], dev: &[DeviceTensor]) -> Result<(), OpError> {
        let side = plan.uses_side_stream();
        let n = plan.steps.len();
        if side && self.events.len() < n + 2 {
            return Err(OpError::Internal("a plan with side-stream steps was launched before GpuExec::prepare".into()));
        }
        let main = &self.gpu.stream;
        let side_stream = if side { Some(self.gpu.side_stream()?) } else { None };
        let on = |s: u8| if s == 0 { main } else { side_stream.expect("side stream prepared") };
        // Steps that a step of the other stream waits for get an event after their launch.
        let mut signal = vec![false; n];
        for j in 0..n {
            let sj = plan.sched(j);
            for &w in &sj.waits {
                if plan.sched(w).stream != sj.stream {
                    signal[w] = true;
                }
            }
        }
        let (fork, join) = (n, n + 1);
        if side {
            self.gpu.record(&self.events[fork], main)?;
            self.gpu.wait(on(1), &self.events[fork])?;
        }
        let enqueue = || -> Result<(), OpError> {
            for ((i, s), lk) in plan.steps.iter().enumerate().zip(kernels) {
                let args: Vec<&DeviceTensor> = s.args.iter().map(|&i| &dev[i]).collect();
                let scalars: Vec<(&str, SymValue)> = s.scalars.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                let sc = plan.sched(i);
                let stream = on(sc.stream);
                for &w in &sc.waits {
                    if plan.sched(w).stream != sc.stream {
                        self.gpu.wait(stream, &self.events[w])?;
                    }
                }
                self.gpu.launch_on(stream, lk, &args, &scalars)?;
                if signal[i] {
                    self.gpu.record(&self.events[i], stream)?;
                }
            }
            Ok(())
        };
        let r = enqueue();
        // Join even when a step failed to enqueue: the side launches already enqueued must finish before the main
        // stream frees or reuses any buffer (frees are ordered on the main stream).
        if side {
            self.gpu.record(&self.events[join], on(1))?;
            self.gpu.wait(main, &self.events[join])?;
        }
        r
    }
}

/// Where plans run.
pub enum Executor {
    /// The CPU interpreter (reference semantics of the IR; slow; every global access bounds-checked).
    Cpu,
    /// A GPU.
    Gpu(Box<GpuExec>),
}

impl Executor {
    /// A short name for tables.
    pub fn name(&self) -> &'static str {
        match self {
            Executor::Cpu => "cpu-interp",
            Executor::Gpu(_) => "cuda",
        }
    }

    /// Run a plan once (outputs poisoned first) and return its outputs.
    pub fn run(&mut self, plan: &Plan) -> Result<Outputs, OpError> {
        match self {
            Executor::Cpu => {
                // Steps in plan order: a topological order of the schedule's waits.
                plan.check_schedule()?;
                let bufs = plan.run_host(|kernel, args, scalars| {
                    interp::run(kernel, args, scalars, InterpOptions::default())?;
                    Ok(())
                })?;
                Ok(plan.outputs(bufs))
            }
            Executor::Gpu(g) => {
                g.prepare(plan)?;
                let dev = g.upload(plan)?;
                g.launch_all(plan, &dev)?;
                g.gpu.sync()?;
                g.download(plan, &dev)
            }
        }
    }
}

/// Move a host tensor out of a slot, leaving an empty tensor behind.
fn take_host(t: &mut HostTensor) -> HostTensor {
    std::mem::replace(t, HostTensor { dtype: DType::U8, shape: vec![0], data: vec![] })
}
