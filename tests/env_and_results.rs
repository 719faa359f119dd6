//! Issue 43, the environment and the results files: bad `K3K_*` variables are typed errors naming the variable, a
//! ptxas that never returns is killed, an NVRTC compile past its limit is cancelled, `K3K_EXPERIMENT` is refused
//! where it cannot be honoured, a corrupt results file is never moved aside silently, results files keep their mode
//! (and a read-only one is not replaced), the default folders are found from the checkout, `list` prints the
//! presets' dims and `report` names what it cannot read. Each run ends by itself within a few seconds, with no
//! panic.

mod common;

use common::{Run, k3k_command, run};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// Run `k3k args...` in `cwd` with `env` (no GPU; a private, empty module cache), killing it after 60 s.
fn k3k_in(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let cache = tempfile::tempdir().unwrap();
    let mut c = k3k_command();
    c.current_dir(cwd)
        .args(args)
        .env("K3K_CACHE_DIR", cache.path())
        .env_remove("K3K_EXPERIMENT")
        .env_remove("K3K_HOME");
    for (k, v) in env {
        c.env(k, v);
    }
    let r = run(c, &format!("{args:?}"), Duration::from_secs(60));
    assert!(!r.all().contains("panicked"), "k3k {args:?} panicked:\n{}", r.all());
    r
}

fn k3k(args: &[&str], env: &[(&str, &str)]) -> Run {
    k3k_in(Path::new(env!("CARGO_MANIFEST_DIR")), args, env)
}

fn nvrtc_present() -> bool {
    k3k::codegen::toolchain::load_nvrtc().is_ok()
}

#[test]
fn tool_variables_naming_nothing_are_errors_naming_the_variable() {
    let emit = ["emit", "--op", "latent_moe_gemm", "--emit", "ptx"];
    for (var, value) in
        [("K3K_NVRTC", "/nonexistent/libnvrtc.so.13"), ("K3K_CUDA_TOOLS", ""), ("K3K_CUDA_TOOLS", "/nonexistent")]
    {
        let r = k3k(&emit, &[(var, value)]);
        assert_eq!(r.code, Some(2), "{var}={value:?}:\n{}", r.all());
        assert!(r.stderr.contains(var), "{var}={value:?}:\n{}", r.all());
    }
    let r = k3k(&["emit", "--op", "latent_moe_gemm", "--emit", "resources"], &[("K3K_PTXAS", "/nonexistent/ptxas")]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("K3K_PTXAS") && r.stderr.contains("/nonexistent/ptxas"), "{}", r.all());
    // doctor reports them (exit 1: tools missing), and prints the K3K_* variables set.
    let r = k3k(&["doctor"], &[("K3K_NVRTC", "/nonexistent/libnvrtc.so.13")]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.stdout.contains("K3K_NVRTC=\"/nonexistent/libnvrtc.so.13\": no such file"), "{}", r.all());
    assert!(r.stdout.contains("K3K_NVRTC=/nonexistent/libnvrtc.so.13"), "the variables set are listed:\n{}", r.all());
}

#[test]
fn a_library_that_is_not_nvrtc_is_an_error_not_a_panic() {
    let Some(lib) = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
    else {
        eprintln!("no libm found: skipped");
        return;
    };
    let r = k3k(&["doctor"], &[("K3K_NVRTC", lib)]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.stdout.contains("is not NVRTC"), "{}", r.all());
    let r = k3k(&["emit", "--op", "latent_moe_gemm", "--emit", "ptx"], &[("K3K_NVRTC", lib)]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains(lib) && r.stderr.contains("is not NVRTC"), "{}", r.all());
}

#[test]
fn a_ptxas_that_never_returns_is_killed_after_its_timeout() {
    if !nvrtc_present() {
        eprintln!("no NVRTC: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ptxas = dir.path().join("ptxas");
    std::fs::write(&ptxas, "#!/bin/sh\nsleep 600\n").unwrap();
    std::fs::set_permissions(&ptxas, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = ptxas.to_str().unwrap();
    let emit = ["emit", "--op", "latent_moe_gemm", "--emit", "resources"];
    let r = k3k(&emit, &[("K3K_PTXAS", p), ("K3K_PTXAS_TIMEOUT_S", "1")]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("ran over 1 s") && r.stderr.contains("K3K_PTXAS_TIMEOUT_S"), "{}", r.all());
    assert!(r.took < Duration::from_secs(30), "took {:?}", r.took);
    let r = k3k(&emit, &[("K3K_PTXAS", p), ("K3K_PTXAS_TIMEOUT_S", "soon")]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("K3K_PTXAS_TIMEOUT_S=\"soon\""), "{}", r.all());
}

#[test]
fn an_nvrtc_compile_over_its_timeout_is_an_error_naming_the_kernel_and_the_limit() {
    if !nvrtc_present() {
        eprintln!("no NVRTC: skipped");
        return;
    }
    let emit = ["emit", "--op", "latent_moe_gemm", "--emit", "ptx"];
    // NVRTC cancels the compile at the limit: far sooner than the compile (seconds) would end.
    let r = k3k(&emit, &[("K3K_NVRTC_TIMEOUT_S", "0.001")]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("NVRTC ran over 0.001 s for kernel `k3k_gemm_"), "{}", r.all());
    assert!(r.stderr.contains("K3K_NVRTC_TIMEOUT_S"), "{}", r.all());
    assert!(r.stdout.is_empty(), "no PTX after a timeout:\n{}", r.all());
    assert!(r.took < Duration::from_secs(30), "took {:?}", r.took);
    // A bad value is refused, also where the module cache holds the kernel.
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    let r = k3k(&emit, &[("K3K_CACHE_DIR", c)]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    for bad in ["soon", "0", "-1", "86401"] {
        let r = k3k(&emit, &[("K3K_CACHE_DIR", c), ("K3K_NVRTC_TIMEOUT_S", bad)]);
        assert_eq!(r.code, Some(2), "{bad}: {}", r.all());
        assert!(r.stderr.contains(&format!("K3K_NVRTC_TIMEOUT_S={bad:?}")), "{}", r.all());
    }
    let r = k3k(&["doctor"], &[("K3K_NVRTC_TIMEOUT_S", "soon")]);
    assert!(r.stdout.contains("[error]   K3K_NVRTC_TIMEOUT_S=\"soon\""), "{}", r.all());
}

#[test]
fn experiments_are_refused_where_they_cannot_be_honoured() {
    let check = ["check", "--backend", "cpu", "--op", "latent_moe_gemm", "--cases", "1"];
    let r = k3k(&check, &[("K3K_EXPERIMENT", "BOGUS")]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("K3K_EXPERIMENT") && r.stderr.contains("BOGUS"), "{}", r.all());
    let r = k3k(&["list", "--op", "kda"], &[("K3K_EXPERIMENT", "BOGUS")]);
    assert_eq!(r.code, Some(2), "an unknown experiment is refused by every command:\n{}", r.all());
    let r = k3k(&check, &[("K3K_EXPERIMENT", "NODECODE")]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("K3K_EXPERIMENT=NODECODE") && r.stderr.contains("CPU"), "{}", r.all());
    for be in ["cpu", "cpu-jit", "jit-diff"] {
        let r = k3k(
            &["fuzz", "--backend", be, "--op", "latent_moe_gemm", "--cases", "1", "--no-persist"],
            &[("K3K_EXPERIMENT", "nomma")],
        );
        assert_eq!(r.code, Some(2), "{be}:\n{}", r.all());
        assert!(r.stderr.contains("K3K_EXPERIMENT=NOMMA"), "{be}:\n{}", r.all());
    }
}

const DIMS: &str = "G=2,c0=17,c1=5,K=32,N=48";

fn tune(results: &Path) -> Run {
    k3k(
        &[
            "tune",
            "--backend",
            "cpu",
            "--op",
            "latent_moe_gemm",
            "--dims",
            DIMS,
            "--budget",
            "10m",
            "--max-candidates",
            "2",
            "--min-candidates",
            "1",
            "--results",
            results.to_str().unwrap(),
        ],
        &[],
    )
}

/// A fresh results folder after one successful [`tune`], and the results file it wrote.
fn tuned_results() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let r = tune(dir.path());
    assert_eq!(r.code, Some(0), "{}", r.all());
    let file = dir.path().join("cpu-interp").join("latent_moe_gemm.json");
    (dir, file)
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_corrupt_results_file_is_warned_about_and_reported_by_doctor() {
    let (dir, file) = tuned_results();
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::write(&file, &std::fs::read(&file).unwrap()[..(len / 2) as usize]).unwrap();
    // doctor parses it, names it, exits 1 and moves nothing.
    let d = k3k(&["doctor", "--results", dir.path().to_str().unwrap()], &[]);
    assert_eq!(d.code, Some(1), "{}", d.all());
    assert!(d.stdout.contains("[corrupt]") && d.stdout.contains(file.to_str().unwrap()), "{}", d.all());
    assert!(file.is_file());
    // tune moves it aside and says so, naming both paths.
    let r = tune(dir.path());
    let moved: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".json.corrupt-"))
        .collect();
    assert_eq!(moved.len(), 1, "{}", r.all());
    assert!(
        r.stderr.contains("warning: results file")
            && r.stderr.contains(file.to_str().unwrap())
            && r.stderr.contains(&format!("moved aside to {}", moved[0].display())),
        "{}",
        r.all()
    );
    let d = k3k(&["doctor", "--results", dir.path().to_str().unwrap()], &[]);
    assert!(d.stdout.contains("[ok]      latent_moe_gemm"), "{}", d.all());
}

#[test]
fn results_files_keep_their_mode_and_a_read_only_one_is_not_replaced() {
    let (dir, file) = tuned_results();
    assert_eq!(mode(&file), 0o644, "a new results file is 0644");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let r = tune(dir.path());
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_eq!(mode(&file), 0o640, "a replaced file keeps its mode");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = std::fs::read(&file).unwrap();
    let r = tune(dir.path());
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.all().contains(&format!("results file {} is read-only", file.display())), "{}", r.all());
    assert_eq!(mode(&file), 0o444);
    assert_eq!(std::fs::read(&file).unwrap(), before, "the read-only file is left as it was");
}

#[test]
fn default_folders_are_found_from_the_checkout_and_said() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("results")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let h = home.path().to_str().unwrap();
    let r = k3k_in(elsewhere.path(), &["doctor"], &[("K3K_HOME", h)]);
    assert!(r.stderr.contains(&format!("using {}", home.path().join("results").display())), "{}", r.all());
    let r = k3k_in(elsewhere.path(), &["doctor"], &[("K3K_HOME", "/nonexistent/k3k")]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("K3K_HOME") && r.stderr.contains("/nonexistent/k3k"), "{}", r.all());
    // A folder that has its own results/ uses it, silently.
    std::fs::create_dir_all(elsewhere.path().join("results")).unwrap();
    let r = k3k_in(elsewhere.path(), &["doctor"], &[("K3K_HOME", h)]);
    assert!(!r.stderr.contains("using"), "{}", r.all());
}

#[test]
fn list_prints_each_presets_dims() {
    let r = k3k(&["list", "--op", "latent_moe_gemm"], &[]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let op = k3k::ops::registry::all().into_iter().find(|o| o.name() == "latent_moe_gemm").unwrap();
    for p in op.bench_presets() {
        let dims: Vec<String> = p.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert!(r.stdout.contains(&format!("--dims {}", dims.join(","))), "{}:\n{}", p.name, r.stdout);
    }
}

#[test]
fn report_draws_a_roof_per_gpu_and_names_an_unreadable_report() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/bench");
    let bench = dir.path().join("bench");
    let mut gpus = 0;
    for gpu in std::fs::read_dir(&src).unwrap() {
        let gpu = gpu.unwrap().path();
        if !gpu.is_dir() {
            continue;
        }
        let to = bench.join(gpu.file_name().unwrap());
        let mut any = false;
        for f in std::fs::read_dir(&gpu).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "json") {
                std::fs::create_dir_all(&to).unwrap();
                std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
                any = true;
            }
        }
        gpus += usize::from(any);
    }
    let out = dir.path().join("out");
    let args = ["report", "--bench", bench.to_str().unwrap(), "--out", out.to_str().unwrap()];
    let r = k3k(&args, &[]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let svg = std::fs::read_to_string(out.join("roofline.svg")).unwrap();
    let roofs = svg.lines().filter(|l| l.trim_start().starts_with("ceiling ")).count();
    assert_eq!(roofs, gpus, "one roof per GPU:\n{svg}");
    let broken = bench.join("nvidia-h200").join("broken.json");
    std::fs::create_dir_all(broken.parent().unwrap()).unwrap();
    std::fs::write(&broken, "{\"op\": ").unwrap();
    let r = k3k(&args, &[]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.stderr.contains(broken.to_str().unwrap()), "{}", r.all());
}

#[test]
fn report_files_keep_their_mode_and_a_read_only_one_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.md");
    k3k::bench::write_atomic(&f, b"one").unwrap();
    assert_eq!(mode(&f), 0o644);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    k3k::bench::write_atomic(&f, b"two").unwrap();
    assert_eq!((mode(&f), std::fs::read(&f).unwrap()), (0o600, b"two".to_vec()));
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444)).unwrap();
    let e = k3k::bench::write_atomic(&f, b"three").unwrap_err().to_string();
    assert!(e.contains(f.to_str().unwrap()) && e.contains("read-only"), "{e}");
    assert_eq!(std::fs::read(&f).unwrap(), b"two");
}

#[test]
fn the_tools_are_found_under_k3k_home() {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/cuda");
    if !tools.join("nvidia/cu13/bin/ptxas").is_file() {
        eprintln!("no .tools/cuda in the checkout: skipped");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("results")).unwrap();
    std::fs::create_dir_all(home.path().join(".tools")).unwrap();
    std::os::unix::fs::symlink(&tools, home.path().join(".tools/cuda")).unwrap();
    // (The tool variables name tools outright and win over K3K_HOME: a developer's own settings are dropped.)
    let cache = tempfile::tempdir().unwrap();
    let mut c = k3k_command();
    c.args(["doctor"]).env("K3K_HOME", home.path()).env("K3K_CACHE_DIR", cache.path());
    for var in ["K3K_PTXAS", "K3K_NVRTC", "K3K_CUDA_TOOLS", "K3K_EXPERIMENT"] {
        c.env_remove(var);
    }
    let r = run(c, "doctor", Duration::from_secs(60));
    let ptxas = home.path().join(".tools/cuda/nvidia/cu13/bin/ptxas");
    assert!(r.stdout.contains(&format!("ptxas          {}", ptxas.display())), "{}", r.all());
}
