//! The results store: `<root>/<gpu-slug>/<op>.json`, read and written safely.
//!
//! - **Atomic writes**: a temp file in the same directory, `fsync`, `rename`, `fsync` of the directory.
//!   A reader sees the old file or the new one, never half of one, even after a `kill -9` or a crash.
//! - **Read-modify-write under a lock**: every change takes an exclusive advisory lock on
//!   `<op>.json.lock` (`flock`, released when the process dies), so two tuning processes writing the
//!   same file do not lose each other's records. Plain reads need no lock thanks to the atomic rename,
//!   so a read-only results directory (shipped with a binary) can be looked up.
//! - **Write-through**: [`ResultsStore::record_candidate`] persists each measurement at once, so an
//!   interrupted run loses at most the candidate that was in flight.
//! - **Corrupt files are kept**: a file that does not parse or breaks the schema's invariants is
//!   renamed to `<op>.json.corrupt-<unix-ts>` and reported as [`StoreError::Corrupt`]; it is never
//!   overwritten. A file from a newer schema is left in place ([`StoreError::UnsupportedSchema`]).

use crate::error::StoreError;
use crate::key::{GpuKey, TuneKey};
use crate::lookup::LookupHit;
use crate::merge::merge;
use crate::record::{CandidateResult, CheckRecord, ResultsFile, SCHEMA_VERSION, utc_date_today};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A directory of results files.
#[derive(Debug, Clone)]
pub struct ResultsStore {
    root: PathBuf,
}

impl ResultsStore {
    /// Use `root` (e.g. `results/`) as the store; it is created when missing.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| StoreError::io(&root, e))?;
        Ok(Self { root })
    }

    /// Use `root` without creating anything (for reading a shipped, possibly read-only, directory).
    pub fn open_read_only(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/<gpu_slug>/<op>.json`; both names are checked to be plain file names.
    pub fn path_for(&self, gpu_slug: &str, op: &str) -> Result<PathBuf, StoreError> {
        check_name("GPU slug", gpu_slug)?;
        check_name("op name", op)?;
        Ok(self.root.join(gpu_slug).join(format!("{op}.json")))
    }

    /// The results of `op` on the GPU `gpu_slug`, or `None` when nothing was tuned yet.
    pub fn load(&self, gpu_slug: &str, op: &str) -> Result<Option<ResultsFile>, StoreError> {
        let path = self.path_for(gpu_slug, op)?;
        match read_path(&path)? {
            None => Ok(None),
            Some(Ok(file)) => Ok(Some(file)),
            Some(Err(Unreadable::Newer(found))) => Err(unsupported(&path, found)),
            Some(Err(Unreadable::Corrupt(_))) => {
                // Re-read under the lock: a writer may have replaced the file since.
                let _lock = FileLock::acquire(&path)?;
                load_locked(&path).map(Some)
            }
        }
    }

    /// Replace the stored file of `file.op` on `file.gpu` with `file` (normalized). Refuses to replace
    /// the results of a different GPU that happens to share the slug.
    pub fn save(&self, file: &ResultsFile) -> Result<PathBuf, StoreError> {
        let new = file.clone();
        self.update(&file.gpu, &file.op, move |f| {
            *f = new;
            Ok(())
        })
        .map(|(p, _)| p)
    }

    /// Read-modify-write of one file under its lock. `f` gets the current file (a new empty one when
    /// none exists); what it leaves is normalized, validated and written atomically.
    pub fn update<R>(
        &self,
        gpu: &GpuKey,
        op: &str,
        f: impl FnOnce(&mut ResultsFile) -> Result<R, StoreError>,
    ) -> Result<(PathBuf, R), StoreError> {
        let path = self.path_for(&gpu.slug(), op)?;
        let _lock = FileLock::acquire(&path)?;
        let mut file = match path.exists() {
            true => load_locked(&path)?,
            false => ResultsFile::new(op, gpu.clone()),
        };
        if file.gpu != *gpu {
            return Err(StoreError::GpuMismatch { expected: file.gpu, found: gpu.clone() });
        }
        let out = f(&mut file)?;
        if file.op != op {
            return Err(StoreError::OpMismatch { expected: op.to_string(), found: file.op });
        }
        if file.gpu != *gpu {
            return Err(StoreError::GpuMismatch { expected: gpu.clone(), found: file.gpu });
        }
        write_results_file(&path, &file)?;
        Ok((path, out))
    }

    /// Insert or replace one candidate's result for `key` and persist it before returning.
    pub fn record_candidate(&self, key: &TuneKey, result: CandidateResult) -> Result<(), StoreError> {
        self.update(&key.gpu(), &key.op, |f| {
            let e = f.entry_mut(key);
            e.upsert_candidate(result);
            e.date = utc_date_today();
            Ok(())
        })
        .map(|_| ())
    }

    /// Record the reference check of candidate `id`; returns the entry's winner afterwards.
    pub fn record_check(&self, key: &TuneKey, id: &str, check: CheckRecord) -> Result<Option<String>, StoreError> {
        self.update(&key.gpu(), &key.op, |f| {
            let e = f.entry_mut(key);
            if !e.set_check(id, check) {
                return Err(StoreError::UnknownCandidate { key: key.to_string(), id: id.to_string() });
            }
            e.date = utc_date_today();
            Ok(e.winner.clone())
        })
        .map(|(_, w)| w)
    }

    /// Record the median time of the operator's default knobs for `key`.
    pub fn record_default_ms(&self, key: &TuneKey, ms: f64) -> Result<(), StoreError> {
        self.update(&key.gpu(), &key.op, |f| {
            f.entry_mut(key).default_ms = Some(ms);
            Ok(())
        })
        .map(|_| ())
    }

    /// The winner's knobs for `key`, exact bucket first, else the nearest bucket (see
    /// [`ResultsFile::lookup`]); `None` means: use the operator's default knobs.
    pub fn lookup(&self, key: &TuneKey) -> Result<Option<LookupHit>, StoreError> {
        Ok(self.load(&key.gpu().slug(), &key.op)?.and_then(|f| f.lookup(key)))
    }

    /// Merge `file` (e.g. a shard tuned on another host) into the stored file of the same GPU and op.
    pub fn merge_into(&self, file: &ResultsFile) -> Result<PathBuf, StoreError> {
        self.update(&file.gpu, &file.op, |existing| {
            *existing = merge(&[existing.clone(), file.clone()])?;
            Ok(())
        })
        .map(|(p, _)| p)
    }

    /// Every `(gpu_slug, op)` with a results file, sorted.
    pub fn list(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut out = Vec::new();
        let dirs = match fs::read_dir(&self.root) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(StoreError::io(&self.root, e)),
        };
        for dir in dirs {
            let dir = dir.map_err(|e| StoreError::io(&self.root, e))?;
            let slug = dir.file_name().to_string_lossy().into_owned();
            if !dir.path().is_dir() || check_name("GPU slug", &slug).is_err() {
                continue;
            }
            for f in fs::read_dir(dir.path()).map_err(|e| StoreError::io(dir.path(), e))? {
                let f = f.map_err(|e| StoreError::io(dir.path(), e))?;
                let name = f.file_name().to_string_lossy().into_owned();
                if let Some(op) = name.strip_suffix(".json")
                    && check_name("op name", op).is_ok()
                {
                    out.push((slug.clone(), op.to_string()));
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

/// Read a results file at any path (e.g. a shard copied from another host). A corrupt file is
/// reported but not moved.
pub fn read_results_file(path: &Path) -> Result<ResultsFile, StoreError> {
    match read_path(path)? {
        None => Err(StoreError::io(path, std::io::Error::new(std::io::ErrorKind::NotFound, "no such results file"))),
        Some(Ok(f)) => Ok(f),
        Some(Err(Unreadable::Newer(found))) => Err(unsupported(path, found)),
        Some(Err(Unreadable::Corrupt(reason))) => {
            Err(StoreError::Corrupt { path: path.to_path_buf(), reason, moved_to: None })
        }
    }
}

/// Write `file` (normalized and validated) to `path` atomically: temp file in the same directory,
/// fsync, rename, fsync of the directory. Does not lock; [`ResultsStore`] does.
pub fn write_results_file(path: &Path, file: &ResultsFile) -> Result<(), StoreError> {
    let mut file = file.clone();
    file.normalize();
    file.validate().map_err(|problems| StoreError::Invalid { problems })?;
    let mut bytes =
        serde_json::to_vec_pretty(&file).map_err(|e| StoreError::Invalid { problems: vec![e.to_string()] })?;
    bytes.push(b'\n');
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
    // The new file keeps the old one's permissions (0644 for a new file, not the temporary file's 0600), and a
    // read-only file is not replaced.
    let mode = match fs::metadata(path) {
        Ok(m) => {
            use std::os::unix::fs::PermissionsExt;
            let mode = m.permissions().mode() & 0o7777;
            if mode & 0o200 == 0 {
                return Err(StoreError::ReadOnly { path: path.to_path_buf() });
            }
            mode
        }
        Err(_) => 0o644,
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| StoreError::io(&dir, e))?;
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file().set_permissions(fs::Permissions::from_mode(mode)).map_err(|e| StoreError::io(tmp.path(), e))?;
    }
    tmp.write_all(&bytes).and_then(|_| tmp.as_file().sync_all()).map_err(|e| StoreError::io(tmp.path(), e))?;
    tmp.persist(path).map_err(|e| StoreError::io(path, e.error))?;
    sync_dir(&dir);
    Ok(())
}

/// Make the rename itself durable. Best effort: not every platform can open a directory.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

enum Unreadable {
    Corrupt(String),
    Newer(u64),
}

/// `None` when the file does not exist.
fn read_path(path: &Path) -> Result<Option<Result<ResultsFile, Unreadable>>, StoreError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(parse(&bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

fn parse(bytes: &[u8]) -> Result<ResultsFile, Unreadable> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Unreadable::Corrupt(format!("not valid JSON ({e})")))?;
    let schema = value
        .get("schema")
        .ok_or_else(|| Unreadable::Corrupt("no `schema` field".into()))?
        .as_u64()
        .ok_or_else(|| Unreadable::Corrupt("`schema` is not a whole number".into()))?;
    if schema > u64::from(SCHEMA_VERSION) {
        return Err(Unreadable::Newer(schema));
    }
    if schema != u64::from(SCHEMA_VERSION) {
        return Err(Unreadable::Corrupt(format!(
            "unknown schema version {schema} (this build reads {SCHEMA_VERSION})"
        )));
    }
    let file: ResultsFile = serde_json::from_value(value)
        .map_err(|e| Unreadable::Corrupt(format!("does not match schema {SCHEMA_VERSION} ({e})")))?;
    file.validate().map_err(|p| Unreadable::Corrupt(p.join("; ")))?;
    Ok(file)
}

fn unsupported(path: &Path, found: u64) -> StoreError {
    StoreError::UnsupportedSchema { path: path.to_path_buf(), found, supported: SCHEMA_VERSION }
}

/// Load an existing file while holding its lock; a corrupt one is moved aside.
fn load_locked(path: &Path) -> Result<ResultsFile, StoreError> {
    match read_path(path)? {
        None => Err(StoreError::io(path, std::io::Error::new(std::io::ErrorKind::NotFound, "results file vanished"))),
        Some(Ok(f)) => Ok(f),
        Some(Err(Unreadable::Newer(found))) => Err(unsupported(path, found)),
        Some(Err(Unreadable::Corrupt(reason))) => {
            let moved_to = move_aside(path)?;
            // Never silent, whatever the caller makes of the error (a lookup falls back to default knobs, a
            // tuning run starts a fresh file).
            eprintln!(
                "warning: results file {} is corrupt ({reason}); moved aside to {}",
                path.display(),
                moved_to.display()
            );
            Err(StoreError::Corrupt { path: path.to_path_buf(), reason, moved_to: Some(moved_to) })
        }
    }
}

/// Rename `path` to `<path>.corrupt-<unix-ts>[-n]`, never replacing an existing file.
fn move_aside(path: &Path) -> Result<PathBuf, StoreError> {
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let base = format!("{}.corrupt-{ts}", path.display());
    for n in 0u32.. {
        let target = PathBuf::from(match n {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        if fs::symlink_metadata(&target).is_ok() {
            continue;
        }
        fs::rename(path, &target).map_err(|e| StoreError::io(path, e))?;
        return Ok(target);
    }
    unreachable!("u32 suffixes exhausted")
}

fn check_name(what: &'static str, value: &str) -> Result<(), StoreError> {
    let ok = !value.is_empty()
        && !value.starts_with('.')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok { Ok(()) } else { Err(StoreError::InvalidName { what, value: value.to_string() }) }
}

/// An exclusive `flock` on `<path>.lock`, released on drop (or when the process dies). The lock file
/// is never deleted: deleting it would let two processes lock two different files.
struct FileLock {
    _file: File,
}

impl FileLock {
    fn acquire(path: &Path) -> Result<Self, StoreError> {
        let lock_path = PathBuf::from(format!("{}.lock", path.display()));
        if let Some(dir) = lock_path.parent() {
            fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::io(&lock_path, e))?;
        file.lock().map_err(|e| StoreError::io(&lock_path, e))?;
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::{h200, key};
    use crate::record::{FailStage, KnobMap, Outcome};
    use crate::stats::tests::stats;

    fn timed(id: &str, median: f64) -> CandidateResult {
        let mut knobs = KnobMap::new();
        knobs.insert("bm".into(), serde_json::json!(64));
        CandidateResult::new(id, knobs, Outcome::Timed(stats(median)))
    }

    fn pass() -> CheckRecord {
        CheckRecord { max_rel_err: 1e-4, passed: true }
    }

    #[test]
    fn record_persists_each_candidate_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        let k = key("kda", &[("t", 1000)]);
        assert!(store.load("nvidia-h200", "kda").unwrap().is_none());
        store.record_candidate(&k, timed("b", 2.0)).unwrap();
        store
            .record_candidate(&k, CandidateResult::new("c", KnobMap::new(), Outcome::failed(FailStage::Timeout, "5 s")))
            .unwrap();
        store.record_candidate(&k, timed("a", 1.0)).unwrap();
        let path = dir.path().join("nvidia-h200/kda.json");
        assert!(path.exists());
        let f = store.load("nvidia-h200", "kda").unwrap().unwrap();
        let e = f.entry(&k).unwrap();
        assert_eq!(e.candidates.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(e.winner, None);
        assert_eq!(store.record_check(&k, "a", pass()).unwrap().as_deref(), Some("a"));
        assert!(matches!(store.record_check(&k, "zz", pass()), Err(StoreError::UnknownCandidate { .. })));
        // pretty, stable, newline-terminated, no temp files left behind
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("{\n  \"schema\": 1,"), "{text}");
        assert!(text.ends_with("}\n"));
        let names: Vec<String> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        let before = fs::read(&path).unwrap();
        store.save(&store.load("nvidia-h200", "kda").unwrap().unwrap()).unwrap();
        assert_eq!(fs::read(&path).unwrap(), before, "saving what was read changes nothing");
        assert_eq!(store.list().unwrap(), vec![("nvidia-h200".to_string(), "kda".to_string())]);
    }

    /// A store in a fresh folder (gone with the `TempDir`) where candidate `a` of a `kda` key (t=64) took 1 ms.
    fn store_with_one_candidate() -> (tempfile::TempDir, ResultsStore, TuneKey) {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        let k = key("kda", &[("t", 64)]);
        store.record_candidate(&k, timed("a", 1.0)).unwrap();
        (dir, store, k)
    }

    /// A store in a fresh folder whose `nvidia-h200/kda.json` holds `bytes` (the folder goes with the `TempDir`).
    fn store_with_kda_file(bytes: &[u8]) -> (tempfile::TempDir, ResultsStore, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        let path = store.path_for("nvidia-h200", "kda").unwrap();
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
        (dir, store, path)
    }

    #[test]
    fn corrupt_file_is_moved_aside_with_a_clear_error_and_never_overwritten() {
        let (_dir, store, path) = store_with_kda_file(b"{\"schema\": 1, \"op\": \"kda\", \"entr");
        let err = store.load("nvidia-h200", "kda").unwrap_err();
        let StoreError::Corrupt { moved_to, reason, .. } = &err else { panic!("{err}") };
        let moved_to = moved_to.clone().unwrap();
        assert!(reason.contains("not valid JSON"), "{reason}");
        assert!(err.to_string().contains("moved aside"), "{err}");
        assert!(moved_to.file_name().unwrap().to_string_lossy().starts_with("kda.json.corrupt-"));
        assert_eq!(fs::read(&moved_to).unwrap(), b"{\"schema\": 1, \"op\": \"kda\", \"entr");
        assert!(!path.exists());

        // the same happens inside a write: the bad file is kept, the write is refused
        fs::write(&path, b"[1,2,3]").unwrap();
        let k = key("kda", &[("t", 64)]);
        let err = store.record_candidate(&k, timed("a", 1.0)).unwrap_err();
        let StoreError::Corrupt { moved_to: second, .. } = err else { panic!() };
        let second = second.unwrap();
        assert_ne!(second, moved_to, "an earlier corrupt copy is not replaced");
        assert_eq!(fs::read(&second).unwrap(), b"[1,2,3]");
        assert_eq!(fs::read(&moved_to).unwrap().len(), 32);
        // and the next write starts afresh
        store.record_candidate(&k, timed("a", 1.0)).unwrap();
        assert_eq!(store.load("nvidia-h200", "kda").unwrap().unwrap().entries.len(), 1);
        // files that parse but break invariants are corrupt too
        let mut f = store.load("nvidia-h200", "kda").unwrap().unwrap();
        f.entries[0].winner = Some("ghost".into());
        fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
        assert!(matches!(store.load("nvidia-h200", "kda"), Err(StoreError::Corrupt { moved_to: Some(_), .. })));
    }

    #[test]
    fn newer_schema_is_left_in_place() {
        let (_dir, store, path) = store_with_kda_file(br#"{"schema": 7, "whatever": true}"#);
        let err = store.load("nvidia-h200", "kda").unwrap_err();
        assert!(matches!(err, StoreError::UnsupportedSchema { found: 7, .. }), "{err}");
        assert!(err.to_string().contains("newer k3k"));
        let err = store.record_candidate(&key("kda", &[("t", 64)]), timed("a", 1.0)).unwrap_err();
        assert!(matches!(err, StoreError::UnsupportedSchema { .. }));
        assert_eq!(fs::read(&path).unwrap(), br#"{"schema": 7, "whatever": true}"#);
        // schema 0 (or a missing schema) is corrupt, not newer
        fs::write(&path, br#"{"schema": 0}"#).unwrap();
        assert!(matches!(store.load("nvidia-h200", "kda"), Err(StoreError::Corrupt { .. })));
    }

    #[test]
    fn a_gpu_sharing_the_slug_is_refused() {
        let (_dir, store, k) = store_with_one_candidate();
        let other = GpuKey { sm_count: 114, ..h200() };
        let err = store.record_candidate(&k.clone().with_gpu(&other), timed("a", 1.0)).unwrap_err();
        assert!(matches!(err, StoreError::GpuMismatch { .. }), "{err}");
        assert!(matches!(store.path_for("../x", "kda"), Err(StoreError::InvalidName { .. })));
        assert!(store.path_for("nvidia-h200", "a/b").is_err());
    }

    #[test]
    fn invalid_timings_are_refused_before_writing() {
        let (_dir, store, k) = store_with_one_candidate();
        let err = store.record_candidate(&k, timed("b", f64::NAN)).unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
        let f = store.load("nvidia-h200", "kda").unwrap().unwrap();
        assert_eq!(f.entries[0].candidates.len(), 1, "the file on disk is unchanged");
    }

    #[test]
    fn concurrent_writers_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let k = key("kda", &[("t", 64)]);
        std::thread::scope(|s| {
            for t in 0..4 {
                let root = dir.path().to_path_buf();
                let k = k.clone();
                s.spawn(move || {
                    // a separate store handle per writer, like a separate process
                    let store = ResultsStore::open(root).unwrap();
                    for i in 0..10 {
                        store.record_candidate(&k, timed(&format!("t{t}-c{i}"), 1.0 + i as f64)).unwrap();
                    }
                });
            }
        });
        let store = ResultsStore::open(dir.path()).unwrap();
        let f = store.load("nvidia-h200", "kda").unwrap().unwrap();
        assert_eq!(f.entries[0].candidates.len(), 40);
    }

    #[test]
    fn read_only_lookup_needs_no_write_access() {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open_read_only(dir.path().join("missing"));
        assert!(store.lookup(&key("kda", &[("t", 64)])).unwrap().is_none());
        assert!(!dir.path().join("missing").exists());
    }
}
