//! PTX -> CUBIN through ptxas, and the resource report (registers, shared memory, spills) it prints.

use crate::toolchain::{ToolchainError, find_ptxas};
use serde::{Deserialize, Serialize};
use std::process::Command;

/// What ptxas says one kernel uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub registers: u32,
    pub static_shared_bytes: u32,
    pub stack_frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    /// ptxas serialized the kernel's `wgmma.mma_async` instructions (its C7518 "Potential Performance Loss"
    /// note): each product then waits for the previous one, which undoes the asynchronous pipeline the program
    /// was written for (e.g. a product left in flight across a branch on the thread index).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wgmma_serialized: bool,
}

impl Resources {
    /// True when registers spilled to local memory.
    pub fn spills(&self) -> bool {
        self.spills_over(0)
    }

    /// True when more than `allowed` bytes were spilled (stored, or loaded) to local memory: an operator's
    /// measured allowance (`Operator::known_spill_bytes` in k3k-ops).
    pub fn spills_over(&self, allowed: u32) -> bool {
        self.spill_store_bytes > allowed || self.spill_load_bytes > allowed
    }
}

/// Why assembling failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PtxasError {
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    #[error("ptxas failed for `{kernel}`:\n{log}")]
    Failed { kernel: String, log: String },
    #[error("could not run ptxas: {0}")]
    Io(String),
    #[error("ptxas printed no resource line for `{kernel}`:\n{log}")]
    NoReport { kernel: String, log: String },
    #[error("ptxas ran over {secs} s for `{kernel}` and was killed (set {PTXAS_TIMEOUT_ENV} to allow longer)")]
    Timeout { kernel: String, secs: f64 },
}

/// The environment variable that bounds one ptxas run, in seconds (default [`PTXAS_TIMEOUT_DEFAULT_S`]).
pub const PTXAS_TIMEOUT_ENV: &str = "K3K_PTXAS_TIMEOUT_S";
/// The default bound of one ptxas run: the largest kernels assemble in a few seconds.
pub const PTXAS_TIMEOUT_DEFAULT_S: f64 = 120.0;

/// The bound of one ptxas run: `K3K_PTXAS_TIMEOUT_S` (a positive number of seconds, at most a day) or 120 s.
pub fn ptxas_timeout() -> Result<std::time::Duration, ToolchainError> {
    crate::toolchain::seconds_from_env(PTXAS_TIMEOUT_ENV, PTXAS_TIMEOUT_DEFAULT_S)
}

/// Run `cmd` to its end with its output captured, killing it after `limit` (`Ok(None)` then).
fn output_within(cmd: &mut Command, limit: std::time::Duration) -> std::io::Result<Option<std::process::Output>> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = vec![];
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok(Some(std::process::Output { status, stdout, stderr }))
}

/// ptxas output: the CUBIN and the parsed resource report.
#[derive(Debug, Clone)]
pub struct Assembled {
    pub cubin: Vec<u8>,
    pub resources: Resources,
    pub log: String,
}

/// Assemble PTX for `arch` with `-v` and parse its report.
pub fn assemble(kernel: &str, ptx: &str, arch: &str) -> Result<Assembled, PtxasError> {
    let ptxas = find_ptxas()?;
    let limit = ptxas_timeout()?;
    let dir = tempfile::tempdir().map_err(|e| PtxasError::Io(e.to_string()))?;
    let src = dir.path().join("k.ptx");
    let out = dir.path().join("k.cubin");
    std::fs::write(&src, ptx).map_err(|e| PtxasError::Io(e.to_string()))?;
    let o = output_within(
        Command::new(&ptxas).arg(format!("-arch={arch}")).arg("-v").arg("-O3").arg(&src).arg("-o").arg(&out),
        limit,
    )
    .map_err(|e| PtxasError::Io(format!("{}: {e}", ptxas.display())))?
    .ok_or_else(|| PtxasError::Timeout { kernel: kernel.into(), secs: limit.as_secs_f64() })?;
    let log = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() {
        return Err(PtxasError::Failed { kernel: kernel.into(), log });
    }
    let resources =
        parse_report(&log).ok_or_else(|| PtxasError::NoReport { kernel: kernel.into(), log: log.clone() })?;
    let cubin = std::fs::read(&out).map_err(|e| PtxasError::Io(e.to_string()))?;
    Ok(Assembled { cubin, resources, log })
}

fn number_before(s: &str, suffix: &str) -> Option<u32> {
    let i = s.find(suffix)?;
    s[..i].split_whitespace().last()?.parse().ok()
}

/// Parse ptxas -v output (`Used N registers, ... M bytes smem`, `F bytes stack frame, S bytes spill stores, L bytes
/// spill loads`).
pub fn parse_report(log: &str) -> Option<Resources> {
    let mut r = Resources::default();
    let mut seen = false;
    for line in log.lines() {
        if line.contains("Used") && line.contains("registers") {
            seen = true;
            r.registers = number_before(line, " registers")?;
            r.static_shared_bytes = number_before(line, " bytes smem").unwrap_or(0);
        }
        if line.contains("wgmma.mma_async instructions are serialized") {
            r.wgmma_serialized = true;
        }
        if line.contains("stack frame") {
            r.stack_frame_bytes = number_before(line, " bytes stack frame").unwrap_or(0);
            r.spill_store_bytes = number_before(line, " bytes spill stores").unwrap_or(0);
            r.spill_load_bytes = number_before(line, " bytes spill loads").unwrap_or(0);
        }
    }
    seen.then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ptxas_v() {
        let log = "ptxas info    : 0 bytes gmem\nptxas info    : Compiling entry function 'g' for 'sm_90a'\n\
                   ptxas info    : Function properties for g\n    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 168 registers, used 1 barriers, 32 bytes smem, 400 bytes cmem[0]\n";
        let r = parse_report(log).unwrap();
        assert_eq!(
            r,
            Resources {
                registers: 168,
                static_shared_bytes: 32,
                stack_frame_bytes: 24,
                spill_store_bytes: 8,
                spill_load_bytes: 12,
                wgmma_serialized: false,
            }
        );
        assert!(r.spills());
        assert!(parse_report("nothing here").is_none());
    }

    /// ptxas 13.0's note when it serializes a kernel's wgmma products (seen on a decode kernel whose score product
    /// stayed in flight across a branch on the thread index).
    #[test]
    fn notices_serialized_wgmma() {
        let log = "ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized due \
                   to program dependence on compiler-inserted WG.DP in divergent path in the function 'k'\n\
                   ptxas info    : Used 214 registers, used 1 barriers, 0 bytes smem\n";
        assert!(parse_report(log).unwrap().wgmma_serialized);
        assert!(!parse_report("ptxas info    : Used 8 registers\n").unwrap().wgmma_serialized);
    }
}
