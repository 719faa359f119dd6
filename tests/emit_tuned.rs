//! `k3k emit --tuned` (issue 43): the kernels a GPU's tuning records select, found by the lookup k3k-build does,
//! with a comment line naming the record and its knobs; the default knobs only where no record applies, said on
//! stdout and stderr; bad `--gpu` values and a missing GPU are typed errors naming the argument.

mod common;

use common::{Run, k3k_command, run};
use k3k::tuner::{CandidateResult, CheckRecord, GpuKey, Outcome, ResultsFile, ResultsStore, TimingStats};
use std::path::Path;
use std::time::Duration;

const OP: &str = "latent_moe_gemm";
const DIMS: &str = "G=4,mean=64,K=256,N=512";
/// A tuned winner unlike the defaults (mma.sync, smaller tiles).
const WINNER: &str = "BM=64,BN=128,BK=32,STAGES=3,WM=2,WN=2,RASTER=n,MMA=sync";

fn k3k(args: &[&str]) -> Run {
    let mut c = k3k_command();
    c.args(args).env_remove("K3K_HOME").env_remove("K3K_EXPERIMENT");
    let r = run(c, &format!("{args:?}"), Duration::from_secs(60));
    assert!(!r.all().contains("panicked"), "k3k {args:?} panicked:\n{}", r.all());
    r
}

/// A results folder holding one record for `OP` at `DIMS` on the H200, won by [`WINNER`], keyed as `k3k tune`
/// keys it on this machine (its NVRTC version, or none).
fn results_with_record(dir: &Path) {
    let op = k3k::input::select_ops(OP).unwrap().remove(0);
    let preset = k3k::input::parse_dims(op.as_ref(), DIMS).unwrap();
    let gpu = GpuKey::new("NVIDIA H200", (9, 0), 132);
    let nvrtc = k3k::codegen::toolchain::nvrtc_version().ok();
    let key = k3k_build::lookup::tune_key(op.as_ref(), &preset, &gpu, nvrtc.as_deref()).unwrap();
    let mut f = ResultsFile::new(OP, gpu);
    let e = f.entry_mut(&key);
    let winner = k3k::input::parse_knobs(op.as_ref(), Some(WINNER)).unwrap();
    let stats = TimingStats::from_samples(&[1.0, 1.1, 0.9]).unwrap();
    e.upsert_candidate(CandidateResult::new("w", k3k::tuning::knob_map(&winner), Outcome::Timed(stats)));
    e.set_check("w", CheckRecord { max_rel_err: 1e-3, passed: true });
    ResultsStore::open(dir).unwrap().save(&f).unwrap();
}

/// The output after the `--tuned` comment line.
fn body(stdout: &str) -> &str {
    stdout.split_once('\n').map_or("", |(_, rest)| rest)
}

#[test]
fn the_tuned_record_selects_the_kernels_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    results_with_record(dir.path());
    let results = dir.path().to_str().unwrap();
    let tuned = ["emit", "--op", OP, "--dims", DIMS, "--tuned", "--gpu", "nvidia-h200", "--results", results];
    let r = k3k(&tuned);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let first = r.stdout.lines().next().unwrap_or_default();
    assert!(first.starts_with(&format!("// k3k emit --tuned: {OP} ")) && first.contains("on nvidia-h200"), "{first}");
    assert!(first.contains("tuned: ") && first.contains(&format!("{OP}.json")), "names the record: {first}");
    assert!(first.contains("MMA=sync") && first.contains("BM=64"), "names the knobs: {first}");
    assert!(!r.stderr.contains("warning"), "{}", r.all());
    // The kernels are those of the winner's knobs, not the defaults'.
    let with_knobs = k3k(&["emit", "--op", OP, "--dims", DIMS, "--knobs", WINNER]);
    assert_eq!(with_knobs.code, Some(0), "{}", with_knobs.all());
    assert_eq!(body(&r.stdout), with_knobs.stdout);
    let defaults = k3k(&["emit", "--op", OP, "--dims", DIMS]);
    assert_ne!(body(&r.stdout), defaults.stdout, "the winner's kernels differ from the defaults'");
    // A shape of another bucket finds the same record as the nearest bucket.
    let big = ["emit", "--op", OP, "--dims", "G=4,mean=256,K=256,N=512", "--tuned", "--gpu", "nvidia-h200"];
    let r = k3k(&[&big[..], &["--results", results]].concat());
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.lines().next().unwrap_or_default().contains("(nearest bucket)"), "{}", r.all());
}

#[test]
fn without_a_record_the_defaults_are_emitted_and_said() {
    let dir = tempfile::tempdir().unwrap();
    results_with_record(dir.path());
    let results = dir.path().to_str().unwrap();
    // No record of this operator on that GPU.
    let op = "mx.quantize";
    let r = k3k(&["emit", "--op", op, "--tuned", "--gpu", "nvidia-h200", "--results", results]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let first = r.stdout.lines().next().unwrap_or_default();
    assert!(first.contains("default knobs (no tuning record:") && first.contains("does not exist"), "{first}");
    assert!(r.stderr.contains("warning: mx.quantize") && r.stderr.contains("no tuning record applies"), "{}", r.all());
    let defaults = k3k(&["emit", "--op", op]);
    assert_eq!(body(&r.stdout), defaults.stdout);
}

#[test]
fn bad_gpu_arguments_are_errors_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    results_with_record(dir.path());
    let results = dir.path().to_str().unwrap();
    let emit = |extra: &[&str]| k3k(&[&["emit", "--op", OP, "--dims", DIMS, "--results", results], extra].concat());
    // A folder that is not there: the tuned GPUs are listed.
    let r = emit(&["--tuned", "--gpu", "nvidia-h999"]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("--gpu nvidia-h999") && r.stderr.contains("tuned GPUs there: nvidia-h200"),
        "{}",
        r.all()
    );
    // A GPU's name, not its slug.
    let r = emit(&["--tuned", "--gpu", "NVIDIA H200"]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("--gpu `NVIDIA H200`") && r.stderr.contains("use `nvidia-h200`"), "{}", r.all());
    // No GPU here (the tests hide it) and none named.
    let r = emit(&["--tuned"]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("--gpu <slug>") && r.stderr.contains("nvidia-h200"), "{}", r.all());
    assert!(r.stdout.is_empty(), "{}", r.all());
    // `--tuned` with `--knobs`, or `--gpu` without `--tuned`: usage errors.
    let r = emit(&["--tuned", "--gpu", "nvidia-h200", "--knobs", "BM=64"]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("--knobs") && r.stderr.contains("--tuned"), "{}", r.all());
    let r = emit(&["--gpu", "nvidia-h200"]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("--tuned"), "{}", r.all());
}
