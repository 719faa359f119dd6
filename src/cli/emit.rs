//! `k3k emit`: dump one pipeline stage.

use k3k::codegen::{self, BuildOptions, toolchain};
use k3k::ir::print;

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

pub fn run(a: Args) -> anyhow::Result<i32> {
    for op in super::select_ops(&a.op)? {
        let preset = super::pick_preset(op.as_ref(), a.preset.as_deref(), a.dims.as_deref())?;
        let knobs = super::parse_knobs(op.as_ref(), a.knobs.as_deref())?;
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
