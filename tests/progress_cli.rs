//! Progress of the long commands (issue 43): `check` and `fuzz` draw a bar on stderr when it is a terminal, never on
//! stdout (the tables stay clean when stdout is a file), and nothing at all when stderr is a pipe (logs, CI).

mod common;

use common::{k3k_command, run};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHECK: &[&str] = &["check", "--backend", "cpu", "--op", "latent_moe_gemm", "--cases", "7", "--seed", "3"];
const FUZZ: &[&str] = &["fuzz", "--backend", "cpu", "--op", "mx.dequantize", "--cases", "20", "--no-persist"];

/// A terminal's traces in captured output: a carriage return (a bar redrawn in place) or an escape sequence.
fn drawn(s: &str) -> bool {
    s.contains('\r') || s.contains('\u{1b}')
}

#[test]
fn piped_output_carries_no_bar() {
    for a in [CHECK, FUZZ] {
        let mut c = k3k_command();
        c.args(a);
        let r = run(c, &format!("{a:?}"), Duration::from_secs(120));
        assert_eq!(r.code, Some(0), "{a:?}:\n{}", r.all());
        assert!(!drawn(&r.stdout) && !drawn(&r.stderr), "{a:?} drew on a pipe:\n{:?}", r.all());
        assert!(!r.stderr.contains("/7 ") && !r.stderr.contains("/20 "), "{a:?}:\n{}", r.all());
    }
}

/// Run `k3k args` with stderr on a terminal (through `script`, which gives the command a pseudo-terminal) and stdout
/// to a file; returns (exit code, what the terminal showed, the file). `None` when `script` is not installed.
fn on_a_terminal(a: &[&str], dir: &Path) -> Option<(Option<i32>, String, String)> {
    if Command::new("script").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return None;
    }
    let out = dir.join("stdout.txt");
    let line = format!("'{}' {} > '{}'", env!("CARGO_BIN_EXE_k3k"), a.join(" "), out.display());
    let mut c = Command::new("script");
    c.args(["-qec", &line, "/dev/null"])
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("TERM", "xterm")
        .env("K3K_CACHE_DIR", dir.join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let r = run(c, &format!("{a:?} on a terminal"), Duration::from_secs(120));
    Some((r.code, r.stdout, std::fs::read_to_string(&out).unwrap_or_default()))
}

#[test]
fn a_terminal_shows_the_bar_on_stderr_and_the_table_stays_clean() {
    for (a, count, row) in [(CHECK, "/7 ", "latent_moe_gemm"), (FUZZ, "/20 ", "mx.dequantize")] {
        let dir = tempfile::tempdir().unwrap();
        let Some((code, terminal, stdout)) = on_a_terminal(a, dir.path()) else {
            eprintln!("no `script` to give the command a terminal: skipped");
            return;
        };
        assert_eq!(code, Some(0), "{a:?}:\n{terminal}\n{stdout}");
        assert!(terminal.contains(count), "{a:?}: no bar on the terminal:\n{terminal:?}");
        assert!(stdout.lines().any(|l| l.starts_with(row)), "{a:?}: no table row:\n{stdout}");
        assert!(!drawn(&stdout) && !stdout.contains(count), "{a:?}: the bar reached stdout:\n{stdout:?}");
    }
}
