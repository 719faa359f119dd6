//! Where `results/`, `results/bench` and `proptest-regressions/` are when a command is run outside the
//! repository: a default folder missing from the current folder is looked for under `K3K_HOME`, then in the
//! nearest folder above the current one (then above the binary) that holds `Cargo.toml` and `results/`.
//! Which folder was used is said on stderr.

use std::path::{Path, PathBuf};

/// The environment variable naming the k3k checkout (the folder holding `results/`).
pub const HOME_ENV: &str = "K3K_HOME";

/// The folders resolved this way: the default values of the commands' path arguments.
pub const DEFAULT_DIRS: [&str; 3] = ["results", "results/bench", "proptest-regressions"];

fn is_root(d: &Path) -> bool {
    d.join("Cargo.toml").is_file() && d.join("results").is_dir()
}

/// The k3k checkout: `K3K_HOME` (which must be a folder), else the nearest folder above the current folder, else
/// above the running binary, holding `Cargo.toml` and `results/`; `Ok(None)` when there is none.
pub fn home() -> anyhow::Result<Option<PathBuf>> {
    if let Some(h) = std::env::var_os(HOME_ENV) {
        let p = PathBuf::from(&h);
        anyhow::ensure!(
            !h.is_empty() && p.is_dir(),
            "{HOME_ENV}={:?}: no such folder (expected the k3k checkout, the folder holding results/)",
            h.to_string_lossy()
        );
        return Ok(Some(p));
    }
    let starts =
        [std::env::current_dir().ok(), std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf))];
    Ok(starts.into_iter().flatten().find_map(|s| s.ancestors().find(|d| is_root(d)).map(Path::to_path_buf)))
}

/// `p` as given, unless it is one of [`DEFAULT_DIRS`] and the current folder has none: then the same folder under
/// [`home`], said on stderr (`what` names the argument, e.g. `--results`).
pub fn resolve(p: &Path, what: &str) -> anyhow::Result<PathBuf> {
    if p.is_absolute() || !DEFAULT_DIRS.iter().any(|d| Path::new(d) == p) || p.exists() {
        return Ok(p.to_path_buf());
    }
    match home()? {
        Some(h) => {
            let r = h.join(p);
            eprintln!("k3k: {what}: no ./{} here; using {}", p.display(), r.display());
            Ok(r)
        }
        None => {
            eprintln!(
                "k3k: {what}: no ./{} here and no k3k checkout above (set {HOME_ENV}); using ./{}",
                p.display(),
                p.display()
            );
            Ok(p.to_path_buf())
        }
    }
}
