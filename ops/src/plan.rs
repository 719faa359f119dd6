//! Plans: what an operator launches for one problem, independent of where it runs.
//!
//! A [`Plan`] is a set of named buffers (inputs with their data, outputs and scratch with their shapes) and an
//! ordered list of [`Step`]s (one kernel launch each, naming its buffers in kernel argument order). The
//! [`Executor`] runs a plan on the CPU interpreter or on a GPU, with the same checks and the same results, so an
//! operator is written once and every backend, the fuzzer, the tuner and the benchmarks share it.

use crate::OpError;
use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_codegen::{BuildOptions, build};
use k3k_ir::{DType, HostTensor, Kernel, SymValue};
use k3k_runtime::{DeviceTensor, Gpu, LoadedKernel, TimingOptions};
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

/// Buffers and launches for one problem.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub buffers: Vec<Buffer>,
    pub steps: Vec<Step>,
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
    /// Add a launch.
    pub fn step(&mut self, kernel: Kernel, args: &[usize], scalars: &[(&str, SymValue)]) {
        self.steps.push(Step {
            kernel,
            args: args.to_vec(),
            scalars: scalars.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        });
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

/// A GPU with a cache of loaded kernels.
pub struct GpuExec {
    pub gpu: Gpu,
    loaded: HashMap<String, LoadedKernel>,
}

impl GpuExec {
    /// Wrap an open GPU.
    pub fn new(gpu: Gpu) -> Self {
        GpuExec { gpu, loaded: HashMap::new() }
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

    /// Make sure every kernel of a plan is compiled and loaded (so timing excludes compilation).
    pub fn prepare(&mut self, plan: &Plan) -> Result<(), OpError> {
        for k in plan.kernels() {
            self.load(k)?;
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
        self.launch_plan_raw(plan, dev)
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
        let mut err = None;
        let samples = self.gpu.time(
            || {
                if let Err(e) = self.launch_plan_raw(plan, dev) {
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

    fn launch_plan_raw(&self, plan: &Plan, dev: &[DeviceTensor]) -> Result<(), OpError> {
        for s in &plan.steps {
            let lk = self
                .loaded
                .get(&k3k_ir::stable_hash(&s.kernel))
                .ok_or_else(|| OpError::Internal(format!("kernel `{}` not loaded", s.kernel.name)))?;
            let args: Vec<&DeviceTensor> = s.args.iter().map(|&i| &dev[i]).collect();
            let scalars: Vec<(&str, SymValue)> = s.scalars.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            self.gpu.launch(lk, &args, &scalars)?;
        }
        Ok(())
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
                let mut bufs: Vec<HostTensor> = plan
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
                for s in &plan.steps {
                    let mut args: Vec<HostTensor> = s.args.iter().map(|&i| take_host(&mut bufs[i])).collect();
                    let scalars: Vec<(&str, SymValue)> = s.scalars.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                    let r = interp::run(&s.kernel, &mut args, &scalars, InterpOptions::default());
                    for (&i, t) in s.args.iter().zip(args) {
                        bufs[i] = t;
                    }
                    r?;
                }
                let mut out = Outputs::default();
                for (b, t) in plan.buffers.iter().zip(bufs) {
                    if b.role == Role::Output {
                        out.0.insert(b.name.clone(), t);
                    }
                }
                Ok(out)
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
