//! Compiling one kernel for embedding: the printed IR, the launch interface, the CUDA C, and PTX (+ CUBIN) from
//! NVRTC (+ ptxas), or the CUDA C alone for run-time NVRTC; and finding NVRTC at build time.

use crate::builder::{Artifacts, BuildError, write};
use k3k_codegen::BuildOptions;
use k3k_ir::Kernel;
use std::path::{Path, PathBuf};

/// Where NVRTC is, or why not (honouring `K3K_NVRTC` strictly: a path set there that does not exist is an
/// error, not a reason to look elsewhere).
pub fn find_nvrtc() -> Result<String, String> {
    if let Ok(p) = std::env::var("K3K_NVRTC") {
        let path = PathBuf::from(&p);
        let lib = if path.is_dir() { path.join(k3k_codegen::toolchain::NVRTC_LIB) } else { path };
        if !lib.is_file() {
            return Err(format!("K3K_NVRTC={p} does not name an existing libnvrtc.so.13 (or a folder holding one)"));
        }
    }
    k3k_codegen::toolchain::load_nvrtc().map_err(|e| format!("it was not found ({e})"))
}

/// What a launcher needs of a kernel: its name, threads, arguments, symbols, grid and shared memory, without
/// the body (whose float constants, such as -inf, JSON cannot carry).
pub fn launch_interface(k: &Kernel) -> Kernel {
    Kernel { vars: vec![], tiles: vec![], vecs: vec![], arrays: vec![], body: vec![], ..k.clone() }
}

pub(crate) fn compile(k: &Kernel, kdir: &Path, runtime_nvrtc: bool, assemble: bool) -> Result<Artifacts, BuildError> {
    let cg = |err| BuildError::Codegen { kernel: k.name.clone(), err: Box::new(err) };
    k3k_codegen::refuse_experiments("k3k-build").map_err(cg)?;
    // The printed IR, for people; the launch interface (the IR without its body), for the launcher.
    write(&kdir.join(format!("{}.ir.txt", k.name)), k3k_ir::print::kernel(k).as_bytes())?;
    let ir = kdir.join(format!("{}.launch.json", k.name));
    let json = serde_json::to_string(&launch_interface(k)).expect("a kernel serializes");
    write(&ir, json.as_bytes())?;
    let src = k3k_codegen::render(k).map_err(|e| cg(e.into()))?;
    let cu = kdir.join(format!("{}.cu", k.name));
    write(&cu, src.as_bytes())?;
    if runtime_nvrtc {
        return Ok(Artifacts { ir, ptx: None, cubin: None, cuda: Some(cu) });
    }
    let m = k3k_codegen::build(k, BuildOptions { assemble }).map_err(cg)?;
    let ptx = kdir.join(format!("{}.ptx", k.name));
    write(&ptx, m.ptx.as_bytes())?;
    let cubin = match m.cubin.as_ref().filter(|_| assemble) {
        Some(c) => {
            let p = kdir.join(format!("{}.sm_90a.cubin", k.name));
            write(&p, c)?;
            Some(p)
        }
        None => None,
    };
    Ok(Artifacts { ir, ptx: Some(ptx), cubin, cuda: None })
}
