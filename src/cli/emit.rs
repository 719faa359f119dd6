//! `k3k emit`: dump one pipeline stage.

use k3k::codegen::{self, BuildOptions, toolchain};
use k3k::ir::print;
use k3k::tuner::slugify;
use k3k_build::{KnobSource, lookup};
use std::path::{Path, PathBuf};

/// Which stage to print.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The IR tile program.
    Ir,
    /// The generated CUDA C (prelude included).
    Cuda,
    /// PTX from NVRTC.
    Ptx,
    /// SASS (needs ptxas and cuobjdump or nvdisasm).
    Sass,
    /// ptxas's resource report (registers, shared memory, spills).
    Resources,
}

/// Arguments of `k3k emit`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Operator name (see `k3k list`).
    #[arg(long)]
    pub op: String,
    /// Stage to print.
    #[arg(long, value_enum, default_value = "ir")]
    pub emit: Stage,
    /// Benchmark preset name (default: the operator's first).
    #[arg(long)]
    pub preset: Option<String>,
    /// Problem dims instead of a preset, e.g. `G=4,mean=64,K=256,N=512`.
    #[arg(long)]
    pub dims: Option<String>,
    /// Knob overrides, e.g. `BM=64,STAGES=4` (default: the operator's defaults).
    #[arg(long)]
    pub knobs: Option<String>,
    /// Emit the kernels a GPU's tuning records select for the problem: the lookup k3k-build does (the record of
    /// the problem's shape bucket, else the nearest tuned bucket of the same program, on the NVRTC found here). A
    /// comment line in front of each operator's kernels names the record and the knobs; where no record applies,
    /// the default knobs, said in that line and in a warning on stderr.
    #[arg(long, conflicts_with = "knobs")]
    pub tuned: bool,
    /// With `--tuned`: the GPU whose records to use, by its results folder name (e.g. `nvidia-h200`; default: this
    /// machine's GPU).
    #[arg(long, requires = "tuned", value_name = "SLUG")]
    pub gpu: Option<String>,
    /// With `--tuned`: the results folder the records are read from.
    #[arg(long, default_value = "results", requires = "tuned")]
    pub results: PathBuf,
}

/// Why `emit --tuned` cannot look records up.
#[derive(Debug, thiserror::Error)]
pub enum TunedError {
    #[error("--gpu `{given}`: not a GPU slug; use `{slug}` (the name of its folder under results/)")]
    NotASlug { given: String, slug: String },
    #[error("--gpu {slug}: {} has no folder `{slug}` (tuned GPUs there: {available})", results.display())]
    UnknownGpu { slug: String, results: PathBuf, available: String },
    #[error(
        "--tuned: no GPU here to look records up for ({reason}); name one with --gpu <slug> (tuned GPUs in {}: \
         {available})",
        results.display()
    )]
    NoGpu { reason: String, results: PathBuf, available: String },
}

/// The GPU slugs with a folder of tuning records (`<slug>/*.json`) under `results`, or `none`.
fn tuned_gpus(results: &Path) -> String {
    let mut v: Vec<String> = std::fs::read_dir(results)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read_dir(e.path())
                .into_iter()
                .flatten()
                .flatten()
                .any(|f| f.path().extension().is_some_and(|x| x == "json"))
        })
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n != "bench")
        .collect();
    v.sort();
    if v.is_empty() { "none".into() } else { v.join(", ") }
}

/// The slug of the GPU whose records `--tuned` uses: `--gpu` (which must name a folder of `results`), else this
/// machine's GPU 0.
fn tuned_slug(gpu: Option<&str>, results: &Path) -> Result<String, TunedError> {
    match gpu.map(str::trim) {
        Some(g) => {
            let slug = slugify(g);
            if slug != g {
                return Err(TunedError::NotASlug { given: g.into(), slug });
            }
            if !results.join(&slug).is_dir() {
                return Err(TunedError::UnknownGpu { slug, results: results.into(), available: tuned_gpus(results) });
            }
            Ok(slug)
        }
        None => match k3k::runtime::Gpu::open(0) {
            Ok(g) => Ok(slugify(&g.info.name)),
            Err(e) => Err(TunedError::NoGpu {
                reason: e.to_string(),
                results: results.into(),
                available: tuned_gpus(results),
            }),
        },
    }
}

/// Arguments of `k3k nvrtc` (a debugging aid: compile a hand-edited CUDA file with k3k's NVRTC options).
#[derive(clap::Args, Debug)]
pub struct NvrtcArgs {
    /// The CUDA C file (e.g. the output of `k3k emit --emit cuda`, edited).
    pub file: std::path::PathBuf,
    /// Also assemble with ptxas and print its report instead of the PTX.
    #[arg(long)]
    pub ptxas: bool,
}

pub fn run_nvrtc(a: NvrtcArgs) -> anyhow::Result<i32> {
    let src = std::fs::read_to_string(&a.file)?;
    let name = a.file.file_stem().and_then(|s| s.to_str()).unwrap_or("kernel").to_string();
    let out = k3k::codegen::nvrtc::compile_ptx(&name, &src, k3k::codegen::ARCH)?;
    if a.ptxas {
        let asm = k3k::codegen::ptxas::assemble(&name, &out.ptx, k3k::codegen::ARCH)?;
        print!("{}", asm.log);
    } else {
        print!("{}", out.ptx);
    }
    Ok(0)
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    let ops = super::select_ops(&a.op)?;
    let tuned = if a.tuned {
        a.results = k3k::paths::resolve(&a.results, "--results")?;
        let slug = tuned_slug(a.gpu.as_deref(), &a.results)?;
        // As k3k-build: a record keyed by another NVRTC is stale; with no NVRTC here, any NVRTC's record. A
        // `K3K_NVRTC` naming something that is not NVRTC stays an error.
        let nvrtc = match toolchain::nvrtc_version() {
            Ok(v) => Some(v),
            Err(toolchain::ToolchainError::NvrtcMissing { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        Some((slug, nvrtc))
    } else {
        None
    };
    for op in ops {
        let preset = super::pick_preset(op.as_ref(), a.preset.as_deref(), a.dims.as_deref())?;
        let knobs = match &tuned {
            None => super::parse_knobs(op.as_ref(), a.knobs.as_deref())?,
            Some((slug, nvrtc)) => {
                let mut warnings = vec![];
                let (knobs, source) =
                    lookup::resolve(op.as_ref(), &preset, slug, &a.results, nvrtc.as_deref(), &mut warnings);
                for w in warnings {
                    eprintln!("warning: {w}");
                }
                if let KnobSource::Default { .. } = &source {
                    eprintln!(
                        "warning: {} `{}` on {slug}: no tuning record applies; emitting the {source}",
                        op.name(),
                        preset.name
                    );
                }
                let any_nvrtc = if nvrtc.is_none() { " (no NVRTC here: records of any NVRTC version)" } else { "" };
                println!(
                    "// k3k emit --tuned: {} `{}` on {slug}: {source}{any_nvrtc}; knobs {knobs}",
                    op.name(),
                    preset.name
                );
                knobs
            }
        };
        for k in op.kernels(&preset, &knobs)? {
            match a.emit {
                Stage::Ir => print!("{}", print::kernel(&k)),
                Stage::Cuda => print!("{}", codegen::render(&k)?),
                Stage::Ptx => print!("{}", codegen::build(&k, BuildOptions { assemble: false })?.ptx),
                Stage::Resources => {
                    let m = codegen::build(&k, BuildOptions { assemble: true })?;
                    println!("{}: {:?}", k.name, m.resources.as_ref().expect("assembled"));
                }
                Stage::Sass => {
                    let m = codegen::build(&k, BuildOptions { assemble: true })?;
                    print!("{}", disassemble(m.cubin.as_deref().expect("assembled"))?);
                }
            }
        }
    }
    Ok(0)
}

fn disassemble(cubin: &[u8]) -> anyhow::Result<String> {
    let ptxas = toolchain::find_ptxas()?;
    let bin = ptxas.parent().unwrap();
    let dir = tempfile_dir()?;
    let path = dir.join("k.cubin");
    std::fs::write(&path, cubin)?;
    for (tool, args) in [("cuobjdump", vec!["--dump-sass"]), ("nvdisasm", vec![])] {
        for cand in
            [bin.join(tool), std::path::PathBuf::from(tool), std::path::PathBuf::from("/usr/local/cuda/bin").join(tool)]
        {
            // cuobjdump runs the nvdisasm beside it (found through PATH).
            let path_var = match std::env::var_os("PATH") {
                Some(p) => std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&p)))?,
                None => bin.as_os_str().to_owned(),
            };
            if let Ok(o) = std::process::Command::new(&cand).env("PATH", &path_var).args(&args).arg(&path).output()
                && o.status.success()
            {
                return Ok(String::from_utf8_lossy(&o.stdout).into_owned());
            }
        }
    }
    anyhow::bail!(
        "no disassembler found: run `scripts/install-cuda-tools.sh --sass` (pip wheel nvidia-cuda-cuobjdump into .tools/cuda) or install a CUDA toolkit"
    )
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("k3k-sass-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
