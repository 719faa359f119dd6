//! Every bad input gets a typed error (issue 43): each reproduction runs the binary under a timeout of a few
//! seconds and must end by itself, with exit code 1 or 2, no panic, no signal, and a message naming the
//! offending dim, knob or flag. A proptest feeds random `--dims` / `--knobs` strings of every operator to the
//! library functions the commands use and asserts an `Ok` or an `Err`, never a panic.

mod common;

use common::{Run, k3k_command, run};
use proptest::prelude::*;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run `k3k args...` without a GPU (the CPU paths), killing it after `limit`.
fn k3k(args: &[&str], limit: Duration) -> Run {
    let mut c = k3k_command();
    c.args(args);
    run(c, &format!("{args:?}"), limit)
}

const LIMIT: Duration = Duration::from_secs(10);

/// `k3k args` ends within the limit with exit 1 or 2, no panic, and every one of `names` in its message.
fn refused(args: &[&str], names: &[&str]) -> Run {
    let r = k3k(args, LIMIT);
    let msg = format!("{}\n{}", r.stdout, r.stderr);
    assert!(matches!(r.code, Some(1 | 2)), "k3k {args:?}: exit {:?}\n{msg}", r.code);
    assert!(!r.stderr.contains("panicked"), "k3k {args:?} panicked\n{msg}");
    for n in names {
        assert!(msg.contains(n), "k3k {args:?}: the message does not name {n}\n{msg}");
    }
    r
}

const GEMM: &str = "G=2,mean=64,K=256,N=512";

#[test]
fn negative_huge_unknown_and_duplicated_dims() {
    for (op, dims, name) in [
        ("latent_moe_gemm", "G=-1,mean=64,K=256,N=512", "`G`"),
        ("latent_moe_gemm", "G=2147483648,mean=64,K=256,N=512", "`G`"),
        ("latent_moe_gemm", "G=2,mean=64,K=256,N=512,FOO=7", "`FOO`"),
        ("latent_moe_gemm", "G=2,G=3,mean=64,K=256,N=512", "`G`"),
        ("latent_moe_gemm", "G=2,mean=x,K=256,N=512", "`mean=x`"),
        ("latent_moe_gemm", "G=4096,mean=1048576,K=4096,N=4096", "elements"),
        ("mxfp4_matmul", "M=4,N=-1,K=64", "`N`"),
        ("mxfp4_matmul", "M=4,N=64,K=64,pakced=1", "`pakced`"),
        ("gated_mla.prefill", "T=64,S=-1,H=2", "`S`"),
        ("gated_mla.decode", "B=2147483648,H=2,S=64", "`B`"),
        ("gated_mla.decode", "B=2,H=0,S=64", "`H`"),
        ("kda.decode", "N=0,H=2,K=64", "`N`"),
        ("hist_quantile.qb", "T=256,E=16,k=2,B=-1", "`B`"),
        ("mx.quantize", "R=-1,K=64", "`R`"),
    ] {
        let r = refused(&["emit", "--op", op, "--dims", dims], &[name]);
        assert!(!r.stderr.contains("18446744073709551615"), "{}", r.stderr);
        assert!(r.took < Duration::from_secs(5), "{op} {dims}: {:?}", r.took);
    }
    // The unknown dim's message lists the accepted ones.
    refused(&["emit", "--op", "mxfp4_matmul", "--dims", "M=4,N=64,K=64,pakced=1"], &["`packed`"]);
    // Spaces around names and values are trimmed.
    let r = k3k(&["emit", "--op", "latent_moe_gemm", "--dims", " G = 2 , mean=64, K=256 ,N=512 "], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // The CPU check refuses them too, before drawing data.
    refused(
        &["check", "--backend", "cpu", "--op", "mxfp4_matmul", "--cases", "1", "--dims", "M=1,K=32,N=-1"],
        &["`N`"],
    );
}

#[test]
fn knobs_outside_the_space() {
    let emit = |knobs: &str, names: &[&str]| {
        refused(&["emit", "--op", "latent_moe_gemm", "--dims", GEMM, "--knobs", knobs], names);
    };
    emit("bm=64", &["`bm`", "`BM`"]);
    emit("MMA=tensor", &["`MMA`", "sync"]);
    emit("RASTER=diagonal", &["`RASTER`"]);
    emit("BM=64,BM=128", &["`BM`", "twice"]);
    refused(
        &["check", "--backend", "cpu", "--op", "latent_moe_gemm", "--knobs", "MMA=tensor,RASTER=diagonal,FOO=1"],
        &["`FOO`"],
    );
    refused(&["check", "--backend", "cpu", "--op", "latent_moe_gemm", "--knobs", "RASTER=diagonal"], &["`RASTER`"]);
    refused(&["fuzz", "--op", "latent_moe_gemm", "--knobs", "bm=64", "--cases", "1", "--no-persist"], &["`bm`"]);
    // bench checks its knobs before it looks for a GPU.
    refused(&["bench", "--op", "latent_moe_gemm", "--knobs", "bm=64"], &["`bm`"]);
    // A knob in the space, given as a word, is read in its axis's type.
    let r = k3k(&["emit", "--op", "gated_mla.prefill", "--knobs", "OVERLAP=true"], LIMIT);
    assert!(!r.stderr.contains("expected a string") && !r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn an_exact_operator_name_selects_that_operator() {
    let r =
        k3k(&["check", "--backend", "cpu", "--op", "kda", "--dims", "B=1,H=2,K=128,T=64", "--cases", "1"], LIMIT * 3);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.lines().any(|l| l.starts_with("kda ")), "{}", r.stdout);
    assert!(!r.stdout.contains("kda.decode") && !r.stderr.contains("kda.decode"), "{}\n{}", r.stdout, r.stderr);
    let r = k3k(&["emit", "--op", "kda", "--preset", "B1 T8192 H96 K128 safe"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    refused(&["emit", "--op", "nope"], &["`--op nope`"]);
}

#[test]
fn durations_are_bounded() {
    refused(
        &["tune", "--plan", "--op", "mx.quantize", "--budget", "99999999999999999999999h", "--compile-s", "1"],
        &["--budget"],
    );
    refused(
        &["tune", "--plan", "--op", "mx.quantize", "--budget", "18000000000000000000", "--compile-s", "1"],
        &["--budget"],
    );
    refused(&["tune", "--plan", "--op", "mx.quantize", "--compile-s", "inf"], &["--compile-s"]);
    refused(&["fuzz", "--op", "mx.quantize", "--time", "99999999999999999999999h", "--no-persist"], &["--time"]);
    refused(&["tune", "--backend", "cpu", "--op", "mx.quantize", "--timeout-s", "0"], &["--timeout-s"]);
    refused(
        &["tune", "--plan", "--op", "mx.quantize", "--compile-s", "1", "--gpus", "18446744073709551615"],
        &["--gpus"],
    );
    refused(&["check", "--backend", "cpu", "--op", "mx.quantize", "--cases", "18446744073709551615"], &["--cases"]);
    // `--only` ends the draw at its case, however many `--cases` says.
    let r = k3k(&["check", "--backend", "cpu", "--op", "mx.quantize", "--cases", "1000000", "--only", "2"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn the_planner_refuses_a_shape_nothing_builds_for() {
    for (op, dims, name) in [
        ("mxfp4_matmul", "M=4,N=64,K=33", "K"),
        ("hist_quantile.qb", "B=0,E=16,T=256,k=2", "`B`"),
        ("gated_mla.decode", "B=0,H=2,S=64,SQ=1", "`B`"),
    ] {
        let r = refused(&["tune", "--plan", "--op", op, "--dims", dims, "--compile-s", "1"], &[name]);
        assert!(r.took < Duration::from_secs(5), "{op} {dims}: {:?}", r.took);
        let r = refused(&["tune", "--backend", "cpu", "--op", op, "--dims", dims, "--budget", "20s"], &[name]);
        assert!(r.took < Duration::from_secs(5), "{op} {dims}: {:?}", r.took);
    }
}

#[test]
fn usage_errors_and_exit_codes() {
    let a = refused(&["check", "--backend", "cpu", "--op", "mx.quantize", "--cases", "0"], &["--cases"]);
    let b = refused(&["fuzz", "--op", "mx.quantize", "--cases", "0", "--no-persist"], &["--cases"]);
    assert_eq!((a.code, b.code), (Some(2), Some(2)));
    refused(&["tune", "--backend", "foo", "--op", "mx.quantize"], &["unknown backend `foo`"]);
    refused(&["bench", "--op", "mx.quantize", "--preset", "nope"], &["nope"]);
    refused(&["bench", "--op", "mx.quantize", "--window-ms", "inf"], &["--window-ms"]);
    refused(&["bench", "--merge-peers", "/nonexistent/peers.json"], &["/nonexistent/peers.json"]);
}

#[test]
fn tune_exits_non_zero_when_a_preset_fails() {
    // Every measurement outlasts the 1 s timeout: the one candidate fails, the preset is not tuned.
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_k3k"));
    c.args(["tune", "--backend", "cpu", "--op", "latent_moe_gemm", "--dims", "G=2,c0=17,c1=5,K=32,N=48"])
        .args(["--max-candidates", "1", "--min-candidates", "1", "--timeout-s", "1", "--budget", "30s"])
        .arg("--results")
        .arg(dir.path())
        .env("K3K_TEST_MEASURE_MS", "3000");
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("not tuned because of an error") && stdout.contains("failed"), "{stdout}");
}

#[test]
fn a_broken_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_k3k"))
        .args(["emit", "--op", "all", "--emit", "cuda"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < LIMIT, "k3k emit did not end after its reader went away");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Pieces of `NAME=VALUE` lists: an operator's own names and values, misspellings, junk.
fn piece(names: Vec<String>, values: Vec<String>) -> impl Strategy<Value = String> {
    let junk_names = ["FOO", "", " ", "c0", "c99", "L0", "l1", "q0", "k0", "pakced", "bm"].map(String::from);
    let junk_values = [
        "-1",
        "0",
        "1",
        "7",
        "64",
        "2147483648",
        "-9223372036854775808",
        "99999999999999999999",
        "x",
        "",
        "1e3",
        "true",
    ]
    .map(String::from);
    let name = prop_oneof![3 => prop::sample::select(names), 1 => prop::sample::select(junk_names.to_vec())];
    let value = prop_oneof![2 => prop::sample::select(values), 1 => prop::sample::select(junk_values.to_vec())];
    (name, value, 0..8u8).prop_map(|(n, v, form)| match form {
        0 => n,
        1 => format!(" {n} = {v} "),
        _ => format!("{n}={v}"),
    })
}

/// An operator's first random case as a `--dims` list, with random pieces added or replacing its own.
fn dims_case() -> impl Strategy<Value = (usize, String, String)> {
    let ops = k3k::ops::registry::all();
    (0..ops.len()).prop_flat_map(|i| {
        use rand::SeedableRng;
        let op = &k3k::ops::registry::all()[i];
        let base = op.random_case(&mut rand::rngs::StdRng::seed_from_u64(i as u64));
        let names: Vec<String> = base.dims.keys().cloned().collect();
        let values: Vec<String> = base.dims.values().map(|v| v.to_string()).collect();
        let base_list: Vec<String> = base.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let space = op.knob_space();
        let knob_names: Vec<String> = space.axes.iter().map(|a| a.name.clone()).chain(["FOO".into()]).collect();
        let knob_values: Vec<String> =
            space.axes.iter().flat_map(|a| a.values.iter().map(|v| v.to_string())).chain(["-1".into()]).collect();
        (
            Just(i),
            prop::collection::vec(piece(names, values), 0..4),
            prop::collection::vec(piece(knob_names, knob_values), 0..3),
            any::<bool>(),
        )
            .prop_map(move |(i, extra, knobs, keep)| {
                let mut dims = if keep { base_list.clone() } else { vec![] };
                dims.extend(extra);
                (i, dims.join(","), knobs.join(","))
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    /// What `emit` and `check --backend cpu` do with `--dims` and `--knobs` strings, short of running a kernel:
    /// `Ok` or `Err`, never a panic.
    #[test]
    fn random_dims_and_knobs_never_panic((i, dims, knobs) in dims_case()) {
        let op = &k3k::ops::registry::all()[i];
        let Ok(p) = k3k::input::parse_dims(op.as_ref(), &dims) else { return Ok(()) };
        let Ok(k) = k3k::input::parse_knobs(op.as_ref(), Some(&knobs)) else { return Ok(()) };
        let _ = op.kernels(&p, &k);
        // Inputs are drawn only for small problems (a valid preset may be gigabytes).
        let small = p.dims.iter().filter(|(d, _)| !d.ends_with("_milli") && !d.starts_with("frac")).all(|(_, v)| *v <= 130)
            && p.dims.values().map(|v| (*v).max(1) as f64).product::<f64>() <= 1e8;
        if small
            && let Ok(inst) = op.instance(&p, 7)
        {
            let _ = inst.plan(&k);
        }
    }
}
