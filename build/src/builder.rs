//! The build-time half: [`Builder`] resolves requests to kernels, compiles them and writes the launchers.

mod resolve;

use resolve::resolve_request;

use crate::compile::compile;
pub use crate::compile::find_nvrtc;
use crate::emit;
use crate::lookup::{self, KnobSource};
pub(crate) use crate::names::signature;
use crate::names::{knob_free_names, role_of};
use crate::record::record_plan;
use crate::shapes::{
    MXFP4_OP, bucket_variant, build_preset, free_runtime_dims, runtime_dims, varlen_kernels, varlen_knobs,
};
use k3k_codegen::CODEGEN_VERSION;
use k3k_ir::{DType, Kernel, KnobValue, Knobs, SymKind, SymValue, stable_hash};
use k3k_ops::op::{Operator, Preset};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Environment variable that turns on run-time NVRTC without editing `build.rs` (`1`).
pub const ENV_RUNTIME_NVRTC: &str = "K3K_BUILD_RUNTIME_NVRTC";
/// Environment variable naming the results directory (default: the k3k checkout's `results/`).
pub const ENV_RESULTS_DIR: &str = "K3K_RESULTS_DIR";
/// The GPU targeted when `build.rs` names none.
pub const DEFAULT_GPU: &str = "nvidia-h200";
/// Const tables larger than this stay run-time inputs of a recorded plan.
pub(crate) const MAX_CONST_BYTES: usize = 4 << 20;

/// Why [`Builder::build`] failed. Every message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// NVRTC is needed at build time and was not found.
    #[error(
        "k3k-build: NVRTC 13.0 (libnvrtc.so.13) is needed to compile the k3k kernels to PTX at build time, and \
         {detail}.\n  To get it: run `scripts/install-cuda-tools.sh` in the k3k checkout (it installs the pip wheels \
         nvidia-cuda-nvrtc==13.0.88 and nvidia-cuda-nvcc==13.0.88 into .tools/cuda, where k3k finds them), or set \
         K3K_NVRTC=/path/to/libnvrtc.so.13 (on a CUDA 13.0 machine: /usr/local/cuda/lib64/libnvrtc.so.13).\n  Or \
         compile at run time instead: `Builder::runtime_nvrtc(true)` in build.rs (or {ENV_RUNTIME_NVRTC}=1) embeds \
         the CUDA C and compiles it with NVRTC when the program loads a kernel."
    )]
    NvrtcMissing { detail: String },
    /// The builder was used wrongly (unknown operator or preset, a request option before any request, ...).
    #[error("k3k-build: {0}")]
    Usage(String),
    /// The operator refused the shape or the knobs.
    #[error("k3k-build: request `{request}` on {gpu}: {err}")]
    Op { request: String, gpu: String, err: Box<k3k_ops::OpError> },
    /// The kernels or plans of one request cannot share one set of launchers.
    #[error("k3k-build: request `{request}`: {why}")]
    Inconsistent { request: String, why: String },
    /// Rendering or compiling a kernel failed.
    #[error("k3k-build: kernel `{kernel}`: {err}")]
    Codegen { kernel: String, err: Box<k3k_codegen::CodegenError> },
    /// Writing an output file failed.
    #[error("k3k-build: {path}: {err}")]
    Io { path: String, err: std::io::Error },
}

#[derive(Clone, Debug)]
enum Source {
    Op { name: String, preset: Option<String>, dims: Vec<(String, i64)> },
    Raw { kernels: Vec<Kernel> },
}

/// One request: an operator at one shape (or raw IR kernels), turned into one module of launchers.
#[derive(Clone, Debug)]
struct Request {
    source: Source,
    alias: Option<String>,
    knobs: Option<Knobs>,
    pins: Vec<(String, i64)>,
    free: Vec<String>,
    roles: Vec<String>,
    plan: bool,
    runtime_inputs: Vec<String>,
    /// `assume_folded_scales`: MXFP4 kernels that read every E8M0 scale byte as at most 128 (or 255).
    folded_scales: bool,
    /// `varlen(max_tokens, max_seqs)`: a KDA request for batches of run-time sequence lengths.
    varlen: Option<(usize, usize)>,
    /// `buckets(dim, values)`: one kernel per bucket of a run-time dim, picked at launch.
    buckets: Option<(String, Vec<i64>)>,
}

impl Request {
    fn new(source: Source) -> Self {
        Request {
            source,
            alias: None,
            knobs: None,
            pins: vec![],
            free: vec![],
            roles: vec![],
            plan: false,
            runtime_inputs: vec![],
            folded_scales: false,
            varlen: None,
            buckets: None,
        }
    }
}

/// Chooses operators, shapes and target GPUs in `build.rs`, and writes PTX (+ CUBIN) and typed launchers.
///
/// Request options (`preset`, `dims`, `alias`, `knobs`, `plan`, `pin`, `free_dims`, `roles`,
/// `runtime_input`) apply to the request started by the last [`Builder::op`] or [`Builder::kernel`].
/// See the crate docs for the generated code.
#[derive(Clone, Debug)]
pub struct Builder {
    requests: Vec<Request>,
    gpus: Vec<String>,
    results_dir: Option<PathBuf>,
    out_dir: Option<PathBuf>,
    module_file: String,
    emit_cubin: bool,
    runtime_nvrtc: bool,
    cargo_output: bool,
    misuse: Vec<String>,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

/// One emitted kernel.
#[derive(Clone, Debug)]
pub struct EmittedKernel {
    pub name: String,
    /// The kernel's IR (what the CPU interpreter runs to check it without a GPU).
    pub kernel: Kernel,
    /// The GPU slugs this kernel serves.
    pub gpus: Vec<String>,
    pub ir: PathBuf,
    pub cuda: PathBuf,
    pub ptx: Option<PathBuf>,
    pub cubin: Option<PathBuf>,
}

/// What one request resolved to on one GPU.
#[derive(Clone, Debug)]
pub struct ResolvedRequest {
    /// The module name in the generated file.
    pub module: String,
    pub op: String,
    pub shape: String,
    pub gpu: String,
    pub knobs: Knobs,
    pub source: KnobSource,
    pub kernels: Vec<String>,
}

/// What [`Builder::build`] wrote.
#[derive(Clone, Debug)]
pub struct Report {
    /// The generated Rust file (`OUT_DIR/k3k_kernels.rs`).
    pub rust_file: PathBuf,
    pub kernels: Vec<EmittedKernel>,
    pub requests: Vec<ResolvedRequest>,
    /// Every warning (also printed as `cargo:warning=` lines).
    pub warnings: Vec<String>,
}

/// One request on one GPU.
pub(crate) struct Variant {
    pub gpu: String,
    pub knobs: Knobs,
    pub source: String,
    /// Kernels in role order.
    pub kernels: Vec<Kernel>,
    pub plan: Option<RecordedPlan>,
    /// A varlen KDA request: its kernels are `kernels[0..3]` (intra, state from zeros, state from `h0`).
    pub varlen: Option<VarlenRecord>,
}

/// What the run-time half needs of a varlen KDA request (see `rt::KdaVarlenSpec`).
pub(crate) struct VarlenRecord {
    pub chunk: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
    pub op_dt: DType,
    pub max_tokens: usize,
    pub max_seqs: usize,
    pub token_inputs: usize,
    pub scalars: Vec<(String, SymValue)>,
}

/// A request resolved on every GPU.
pub(crate) struct Resolved {
    pub module: String,
    pub title: String,
    pub op: String,
    pub shape: String,
    pub roles: Vec<String>,
    pub pins: Vec<Vec<(String, i64)>>,
    pub variants: Vec<Variant>,
    /// Built with `assume_folded_scales()`: every launcher takes an `rt::FoldedScales`.
    pub folded_scales: bool,
    /// The operator's run-time dims this request leaves free (see [`runtime_dims`]).
    pub runtime_free: Vec<String>,
    /// `buckets(dim, values)`: the kernels are one per bucket, in `values` order.
    pub buckets: Option<(String, Vec<i64>)>,
}

/// One launch of a recorded plan: (role index, buffer indices, scalars).
pub(crate) type RecordedStep = (usize, Vec<usize>, Vec<(String, SymValue)>);

/// A plan recorded at build time.
pub(crate) struct RecordedPlan {
    pub buffers: Vec<RecordedBuffer>,
    pub steps: Vec<RecordedStep>,
}

pub(crate) struct RecordedBuffer {
    pub name: String,
    pub role: crate::rt::BufRole,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// The file holding a const table's bytes.
    pub data_file: Option<PathBuf>,
}

/// Paths of one compiled kernel, by IR hash.
pub(crate) struct Artifacts {
    pub ir: PathBuf,
    pub ptx: Option<PathBuf>,
    pub cubin: Option<PathBuf>,
    pub cuda: Option<PathBuf>,
}

fn parse_knobs(s: &str) -> Result<Knobs, String> {
    let mut k = Knobs::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, v) = part.split_once('=').ok_or_else(|| format!("knob `{part}` is not NAME=value"))?;
        let v = v.trim();
        let value = match (v.parse::<i64>(), v) {
            (Ok(i), _) => KnobValue::Int(i),
            (_, "true") => KnobValue::Bool(true),
            (_, "false") => KnobValue::Bool(false),
            _ => KnobValue::Str(v.to_string()),
        };
        k.0.insert(name.trim().to_string(), value);
    }
    Ok(k)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |err| BuildError::Io { path: path.display().to_string(), err }
}

pub(crate) fn write(path: &Path, data: &[u8]) -> Result<(), BuildError> {
    // Leave an identical file alone: its mtime is what cargo's change tracking looks at.
    if std::fs::read(path).is_ok_and(|old| old == data) {
        return Ok(());
    }
    std::fs::write(path, data).map_err(io(path))
}

/// A short text for a shape (`G=8,K=3584,N=6144`).
pub(crate) fn dims_text(dims: &BTreeMap<String, i64>) -> String {
    dims.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

impl Builder {
    /// A builder with no requests, target `nvidia-h200` unless [`Builder::gpu`] says otherwise, CUBIN on.
    pub fn new() -> Self {
        Builder {
            requests: vec![],
            gpus: vec![],
            results_dir: None,
            out_dir: None,
            module_file: "k3k_kernels.rs".into(),
            emit_cubin: true,
            runtime_nvrtc: false,
            cargo_output: true,
            misuse: vec![],
        }
    }

    fn last(&mut self, what: &str) -> Option<&mut Request> {
        if self.requests.is_empty() {
            self.misuse.push(format!("`{what}` was called before any `op(..)` or `kernel(..)` request"));
        }
        self.requests.last_mut()
    }

    /// Start a request for operator `name` (as `k3k list` names it: `latent_moe_gemm`, `hist_quantile.qb`,
    /// `kda`, ...). Give its shape with [`Builder::preset`] and/or [`Builder::dims`].
    pub fn op(mut self, name: &str) -> Self {
        self.requests.push(Request::new(Source::Op { name: name.into(), preset: None, dims: vec![] }));
        self
    }

    /// Start a request for IR kernels built in `build.rs` (e.g. with [`crate::ops`] builders of an operator that
    /// is not registered); `alias` names the module.
    pub fn kernels(mut self, alias: &str, kernels: Vec<Kernel>) -> Self {
        let mut r = Request::new(Source::Raw { kernels });
        r.alias = Some(alias.into());
        self.requests.push(r);
        self
    }

    /// The shape: one of the operator's benchmark presets, by name (`k3k list` shows them).
    pub fn preset(mut self, name: &str) -> Self {
        if let Some(Request { source: Source::Op { preset, .. }, .. }) = self.last("preset") {
            *preset = Some(name.into());
        }
        self
    }

    /// The shape as the operator's preset dims (added to, or overriding, a preset's).
    pub fn dims(mut self, dims: &[(&str, i64)]) -> Self {
        if let Some(Request { source: Source::Op { dims: d, .. }, .. }) = self.last("dims") {
            d.extend(dims.iter().map(|(k, v)| (k.to_string(), *v)));
        }
        self
    }

    /// The module name of the request in the generated file (default: from the operator and the shape).
    pub fn alias(mut self, name: &str) -> Self {
        if let Some(r) = self.last("alias") {
            r.alias = Some(name.into());
        }
        self
    }

    /// Force knobs (`"SPLIT=1"`): set on top of the tuned knobs from `results/` (or the defaults). When the
    /// combination does not build, the defaults with these knobs are used.
    pub fn knobs(mut self, knobs: &str) -> Self {
        match parse_knobs(knobs) {
            Ok(k) => {
                if let Some(r) = self.last("knobs") {
                    r.knobs = Some(k);
                }
            }
            Err(e) => self.misuse.push(e),
        }
        self
    }

    /// Also record the operator's whole plan for this exact shape (buffers, launches, scalars, shape-only tables)
    /// and generate a `Plan` type that runs it. The operator's seeded inputs for the shape are generated (twice)
    /// at build time to record it, so keep such shapes model-sized.
    pub fn plan(mut self, on: bool) -> Self {
        if let Some(r) = self.last("plan") {
            r.plan = on;
        }
        self
    }

    /// `mxfp4_matmul` only: build the faster kernels that read every E8M0 scale byte of the weights as at most
    /// 128 (or 255 = NaN): one multiply per decoded value instead of two. By default k3k-build emits the kernels
    /// that are right for every scale byte 0-255; with this, the launchers take an extra argument
    /// `scales: rt::FoldedScales`, made by [`crate::rt::FoldedScales::check`] over the scale bytes (once, when the
    /// weights are loaded) or unsafely asserted, so the assumption shows at every call.
    pub fn assume_folded_scales(mut self) -> Self {
        if let Some(r) = self.last("assume_folded_scales") {
            r.folded_scales = true;
        }
        self
    }

    /// `kda` only: also generate `Varlen`, which runs the chunked KDA on a batch whose sequence lengths come at
    /// run time (`cu_seqlens`), up to `max_tokens` tokens in `max_seqs` sequences, on a workspace the caller
    /// allocates (`Varlen::workspace_bytes()`). The request's dims give the heads, head dims and options; the
    /// automatic knob choices that depend on the batch are made for `max_seqs` sequences sharing `max_tokens`
    /// (or for the request's `B`/`T` when given) and then fixed, so one pair of kernels serves every batch.
    pub fn varlen(mut self, max_tokens: usize, max_seqs: usize) -> Self {
        if let Some(r) = self.last("varlen") {
            r.varlen = Some((max_tokens, max_seqs));
        }
        self
    }

    /// Build one kernel per bucket of the run-time dim `dim` (each with the knobs tuned for that bucket, as the
    /// tuner buckets shapes) and generate `Dispatch`, whose `launch` takes any value of `dim` and runs the kernel of
    /// the smallest bucket at or above it (the largest bucket past them all). For shapes where the operator
    /// picks kernels by size, such as MXFP4's decode-like and mid-size paths by token count `M`. Every bucket
    /// must be one kernel with the same arguments (a bucket whose path needs several kernels is a build error).
    pub fn buckets(mut self, dim: &str, values: &[i64]) -> Self {
        if let Some(r) = self.last("buckets") {
            let mut v = values.to_vec();
            v.sort_unstable();
            v.dedup();
            r.buckets = Some((dim.to_string(), v));
        }
        self
    }

    /// A plan input to keep as a run-time argument even if it looks like a shape-only table.
    pub fn runtime_input(mut self, buffer: &str) -> Self {
        if let Some(r) = self.last("runtime_input") {
            r.runtime_inputs.push(buffer.into());
        }
        self
    }

    /// Check at every launch that kernel dim `sym` equals `value` (kernel dims named like a request dim are
    /// pinned automatically).
    pub fn pin(mut self, sym: &str, value: i64) -> Self {
        if let Some(r) = self.last("pin") {
            r.pins.push((sym.into(), value));
        }
        self
    }

    /// Kernel dims *not* to pin to the request's value (they may vary from launch to launch).
    pub fn free_dims(mut self, syms: &[&str]) -> Self {
        if let Some(r) = self.last("free_dims") {
            r.free.extend(syms.iter().map(|s| s.to_string()));
        }
        self
    }

    /// Names of the request's kernels in the generated module, in the operator's kernel order (default: from
    /// the kernel names).
    pub fn roles(mut self, names: &[&str]) -> Self {
        if let Some(r) = self.last("roles") {
            r.roles = names.iter().map(|s| s.to_string()).collect();
        }
        self
    }

    /// Add a target GPU by its slug (`results/<slug>/`, e.g. `nvidia-h200`). Each request gets one variant per
    /// GPU (its knobs from that GPU's results); the launcher picks the variant whose slug matches the device at
    /// run time, else the first.
    pub fn gpu(mut self, slug: &str) -> Self {
        self.gpus.push(slug.into());
        self
    }

    /// The results directory (default: `$K3K_RESULTS_DIR`, else the k3k checkout's `results/`).
    pub fn results_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.results_dir = Some(dir.into());
        self
    }

    /// Where to write (default: `$OUT_DIR`). Kernels go to `<out>/k3k/`, the Rust file to `<out>/k3k_kernels.rs`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// The generated Rust file's name (default `k3k_kernels.rs`).
    pub fn module_file(mut self, name: &str) -> Self {
        self.module_file = name.into();
        self
    }

    /// Also assemble CUBIN for sm_90a with ptxas when ptxas is found (default on; PTX only otherwise, with a
    /// warning). An sm_90 device loads the CUBIN; others get the PTX.
    pub fn emit_cubin(mut self, on: bool) -> Self {
        self.emit_cubin = on;
        self
    }

    /// Embed CUDA C and compile it with NVRTC at run time instead of PTX at build time (no NVRTC needed to
    /// build; NVRTC 13.0 needed where the program runs). Also on with `K3K_BUILD_RUNTIME_NVRTC=1`.
    pub fn runtime_nvrtc(mut self, on: bool) -> Self {
        self.runtime_nvrtc = on;
        self
    }

    /// Print `cargo:` lines (warnings, rerun triggers); default on.
    pub fn cargo_output(mut self, on: bool) -> Self {
        self.cargo_output = on;
        self
    }

    /// [`Builder::build`], or print the error and exit the build script with status 1.
    pub fn build_or_exit(self) -> Report {
        let cargo = self.cargo_output;
        match self.build() {
            Ok(r) => r,
            Err(e) => {
                if cargo {
                    for line in e.to_string().lines() {
                        println!("cargo:warning={line}");
                    }
                }
                eprintln!("{e}");
                std::process::exit(1)
            }
        }
    }

    /// Resolve every request, compile its kernels and write `OUT_DIR/k3k/*` and `OUT_DIR/k3k_kernels.rs`.
    pub fn build(self) -> Result<Report, BuildError> {
        if let Some(m) = self.misuse.first() {
            return Err(BuildError::Usage(m.clone()));
        }
        if self.requests.is_empty() {
            return Err(BuildError::Usage("no requests: call `op(..)` or `kernels(..)` before `build()`".into()));
        }
        let out = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(std::env::var_os("OUT_DIR").ok_or_else(|| {
                BuildError::Usage("OUT_DIR is not set (run from a build script, or call `out_dir(..)`)".into())
            })?),
        };
        let runtime_nvrtc = self.runtime_nvrtc || std::env::var(ENV_RUNTIME_NVRTC).is_ok_and(|v| v == "1");
        let gpus = if self.gpus.is_empty() { vec![DEFAULT_GPU.to_string()] } else { self.gpus.clone() };
        for g in &gpus {
            if crate::rt::slugify(g) != *g {
                return Err(BuildError::Usage(format!(
                    "GPU `{g}` is not a slug; use `{}` (the results/<slug>/ folder name)",
                    crate::rt::slugify(g)
                )));
            }
        }
        let results = self
            .results_dir
            .clone()
            .or_else(|| std::env::var_os(ENV_RESULTS_DIR).map(PathBuf::from))
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("results"));
        let results = results.canonicalize().unwrap_or(results);
        let mut warnings: Vec<String> = vec![];
        let mut cargo_lines: Vec<String> = vec![];
        for var in [
            "K3K_NVRTC",
            "K3K_PTXAS",
            "K3K_PTXAS_TIMEOUT_S",
            "K3K_NVRTC_TIMEOUT_S",
            "K3K_CUDA_TOOLS",
            "K3K_HOME",
            "CUDA_HOME",
            ENV_RUNTIME_NVRTC,
            ENV_RESULTS_DIR,
        ] {
            cargo_lines.push(format!("cargo:rerun-if-env-changed={var}"));
        }
        if results.is_dir() {
            cargo_lines.push(format!("cargo:rerun-if-changed={}", results.display()));
        }

        // The toolchain, before any work.
        if !runtime_nvrtc && let Err(detail) = find_nvrtc() {
            return Err(BuildError::NvrtcMissing { detail });
        }
        // NVRTC's version is part of the tuning key (unknown with run-time NVRTC and no NVRTC here).
        let nvrtc =
            if runtime_nvrtc && find_nvrtc().is_err() { None } else { k3k_codegen::toolchain::nvrtc_version().ok() };
        let assemble = self.emit_cubin
            && !runtime_nvrtc
            && {
                match k3k_codegen::toolchain::find_ptxas() {
                    Ok(_) => true,
                    Err(_) => {
                        warnings.push("ptxas not found: emitting PTX only (the driver JIT-compiles it at load); install nvidia-cuda-nvcc==13.0.88 (scripts/install-cuda-tools.sh) or set K3K_PTXAS for CUBIN".into());
                        false
                    }
                }
            };

        let mut aliases = std::collections::HashSet::new();
        for a in self.requests.iter().filter_map(|r| r.alias.as_deref()) {
            if !aliases.insert(crate::ident::snake(a)) {
                return Err(BuildError::Usage(format!(
                    "alias `{a}` names two requests; give each request its own alias (the module name)"
                )));
            }
        }
        let kdir = out.join("k3k");
        std::fs::create_dir_all(&kdir).map_err(io(&kdir))?;
        let ops = k3k_ops::registry::all();
        let modules = crate::ident::unique(
            self.requests
                .iter()
                .map(|r| {
                    crate::ident::snake(match (&r.alias, &r.source) {
                        (Some(a), _) => a,
                        (None, Source::Op { name, .. }) => name,
                        (None, Source::Raw { .. }) => "kernels",
                    })
                })
                .collect(),
            &["k3k_build", "rt", "ALL_KERNELS", "TARGET_GPUS", "verify_embedded"],
        );
        let mut resolved: Vec<Resolved> = vec![];
        let mut report_requests = vec![];
        for (r, module) in self.requests.iter().zip(modules) {
            let (res, reqs) =
                resolve_request(module, r, &ops, &gpus, &results, nvrtc.as_deref(), &kdir, &mut warnings)?;
            resolved.push(res);
            report_requests.extend(reqs);
        }

        // Compile every distinct kernel once.
        let mut artifacts: HashMap<String, Artifacts> = HashMap::new();
        let mut emitted: Vec<EmittedKernel> = vec![];
        let mut names: HashMap<String, String> = HashMap::new();
        for r in &resolved {
            for v in &r.variants {
                for k in &v.kernels {
                    let h = stable_hash(k);
                    if let Some(a) = artifacts.get(&h) {
                        let e = emitted.iter_mut().find(|e| e.ir == a.ir).expect("emitted");
                        if !e.gpus.contains(&v.gpu) {
                            e.gpus.push(v.gpu.clone());
                        }
                        continue;
                    }
                    if let Some(other) = names.insert(k.name.clone(), h.clone())
                        && other != h
                    {
                        return Err(BuildError::Inconsistent {
                            request: r.module.clone(),
                            why: format!("two different kernels are both named `{}`", k.name),
                        });
                    }
                    let a = compile(k, &kdir, runtime_nvrtc, assemble)?;
                    emitted.push(EmittedKernel {
                        name: k.name.clone(),
                        kernel: k.clone(),
                        gpus: vec![v.gpu.clone()],
                        ir: a.ir.clone(),
                        cuda: kdir.join(format!("{}.cu", k.name)),
                        ptx: a.ptx.clone(),
                        cubin: a.cubin.clone(),
                    });
                    artifacts.insert(h, a);
                }
            }
        }

        let src = emit::generate(&resolved, &artifacts, &gpus, runtime_nvrtc);
        let rust_file = out.join(&self.module_file);
        write(&rust_file, src.as_bytes())?;
        if self.cargo_output {
            for w in &warnings {
                println!("cargo:warning=k3k-build: {w}");
            }
            for l in &cargo_lines {
                println!("{l}");
            }
        }
        Ok(Report { rust_file, kernels: emitted, requests: report_requests, warnings })
    }
}

/// The codegen version the kernels were rendered with (for generated docs).
pub(crate) fn codegen_version() -> u32 {
    CODEGEN_VERSION
}
