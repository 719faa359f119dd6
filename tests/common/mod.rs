//! Running the `k3k` binary in integration tests: captured output, a time limit, no death by signal.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a run of the binary ended.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// (Read by some of the test binaries that include this module.)
    #[allow(dead_code)]
    pub took: Duration,
}

impl Run {
    /// Standard output, then standard error.
    #[allow(dead_code)]
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// `k3k` with no GPU visible and no standard input (add arguments, folders and variables to it).
pub fn k3k_command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_k3k"));
    c.env("CUDA_VISIBLE_DEVICES", "").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Run `c` (made by [`k3k_command`]; `what` names it in messages), killing it and failing past `limit`, and
/// failing if a signal ended it.
pub fn run(mut c: Command, what: &str, limit: Duration) -> Run {
    let t = Instant::now();
    let mut child = c.spawn().expect("spawn k3k");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("k3k {what} ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t.elapsed();
    let (stdout, stderr) = (o.join().unwrap(), e.join().unwrap());
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), None, "k3k {what} killed by a signal\n{stderr}");
    }
    Run { code: status.code(), stdout, stderr, took }
}
