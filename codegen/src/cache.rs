//! The module cache: compiled PTX (and CUBIN + resources when assembled) keyed by the hash of the generated
//! source, the target architecture, the NVRTC version and the codegen version. In memory for the process and on
//! disk under `K3K_CACHE_DIR` (default `$XDG_CACHE_HOME/k3k` or `~/.cache/k3k`); `K3K_CACHE=0` turns the disk
//! cache off. Disk entries are written atomically, so a crash never leaves a torn entry behind.

use crate::ptxas::Resources;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// One compiled kernel.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompiledModule {
    pub kernel: String,
    pub key: String,
    pub ptx: String,
    #[serde(skip)]
    pub cubin: Option<Vec<u8>>,
    pub resources: Option<Resources>,
    pub nvrtc_ms: f64,
    /// True when this came out of a cache rather than a fresh compile.
    #[serde(skip)]
    pub cached: bool,
}

fn disk_dir() -> Option<PathBuf> {
    if std::env::var("K3K_CACHE").is_ok_and(|v| v == "0") {
        return None;
    }
    if let Ok(d) = std::env::var("K3K_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("k3k"));
    }
    std::env::var("HOME").ok().map(|h| PathBuf::from(h).join(".cache").join("k3k"))
}

fn memory() -> &'static Mutex<HashMap<String, Arc<CompiledModule>>> {
    static M: OnceLock<Mutex<HashMap<String, Arc<CompiledModule>>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// Look a module up (memory first, then disk). `need_cubin` skips disk entries without a CUBIN.
pub fn get(key: &str, need_cubin: bool) -> Option<Arc<CompiledModule>> {
    if let Some(m) = memory().lock().unwrap().get(key)
        && (!need_cubin || m.cubin.is_some())
    {
        return Some(m.clone());
    }
    let dir = disk_dir()?;
    let meta: CompiledModule = serde_json::from_slice(&std::fs::read(dir.join(format!("{key}.json"))).ok()?).ok()?;
    let cubin = std::fs::read(dir.join(format!("{key}.cubin"))).ok();
    if need_cubin && cubin.is_none() {
        return None;
    }
    let m = Arc::new(CompiledModule { cubin, cached: true, ..meta });
    memory().lock().unwrap().insert(key.to_string(), m.clone());
    Some(m)
}

fn write_atomic(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("cache path has a parent");
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, data)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Store a module in memory and (best effort) on disk.
pub fn put(m: CompiledModule) -> Arc<CompiledModule> {
    let m = Arc::new(m);
    memory().lock().unwrap().insert(m.key.clone(), m.clone());
    if let Some(dir) = disk_dir()
        && std::fs::create_dir_all(&dir).is_ok()
    {
        if let Some(c) = &m.cubin {
            let _ = write_atomic(&dir.join(format!("{}.cubin", m.key)), c);
        }
        if let Ok(j) = serde_json::to_vec(&*m) {
            let _ = write_atomic(&dir.join(format!("{}.json", m.key)), &j);
        }
    }
    m
}
