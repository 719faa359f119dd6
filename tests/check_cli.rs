//! `k3k check` end to end on the CPU interpreter: knobs given on the command line that do not fit some drawn
//! shapes leave those cases out (counted), and knobs that fit none is an error, not an empty pass.

use std::process::Command;

fn check(knobs: &str) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_k3k"))
        .args(["check", "--backend", "cpu", "--op", "kda.decode", "--cases", "8", "--seed", "11", "--knobs", knobs])
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn knobs_that_fit_some_shapes_skip_the_others() {
    // A 64-column block (KL=4, VPL=2, DW=4): it fits V = 64 and 128, not V = 32.
    let (code, stdout, stderr) = check("KL=4,VPL=2,DW=4,SW=1");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let row = stdout.lines().find(|l| l.starts_with("kda.decode")).unwrap_or_else(|| panic!("no row: {stdout}"));
    let cols: Vec<usize> = row.split_whitespace().skip(2).take(3).map(|c| c.parse().unwrap()).collect();
    let (cases, failed, skipped) = (cols[0], cols[1], cols[2]);
    assert_eq!(cases + skipped, 8, "{row}");
    assert!(cases > 0 && skipped > 0 && failed == 0, "seed 11 draws both fitting and too-narrow shapes: {row}");
}

#[test]
fn knobs_that_fit_no_shape_are_an_error() {
    // 8 warps of 32 columns: a 256-column block, wider than any drawn V (at most 128).
    let (code, stdout, stderr) = check("KL=4,VPL=4,DW=8,SW=1");
    assert_ne!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("fit none of the 8 drawn cases"), "{stderr}");
}
