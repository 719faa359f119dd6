//! `k3k fuzz` end to end on the CPU interpreter: the per-operator table, a replayed case seed, and the
//! regression file of a failing run replayed by the next one.

use std::process::Command;

fn k3k() -> Command {
    Command::new(env!("CARGO_BIN_EXE_k3k"))
}

#[test]
fn fuzz_prints_a_table_and_replays_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let out = k3k()
        .args(["fuzz", "--backend", "cpu", "--op", "mx", "--cases", "12", "--time", "60s", "--seed", "4"])
        .args(["--regressions", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for op in ["mx.quantize", "mx.dequantize"] {
        let row = stdout.lines().find(|l| l.starts_with(op)).unwrap_or_else(|| panic!("no row for {op}: {stdout}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((cols[1], cols[2], cols[5]), ("cpu-interp", "12", "0"), "{row}");
    }
    let out = k3k().args(["fuzz", "--op", "mx.dequantize", "--replay", "99", "--no-persist"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("case seed 99: mx.dequantize") && stdout.contains("passed"));
    let out = k3k().args(["fuzz", "--op", "mx", "--replay", "99"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a case seed belongs to one operator");
}
