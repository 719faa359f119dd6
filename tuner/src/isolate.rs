//! Running measurements in child processes, so a faulting or hanging candidate costs one candidate,
//! not the run.
//!
//! An illegal memory access is sticky: it poisons the whole CUDA context, and every later call in that
//! process fails. A kernel that never terminates blocks its stream forever. So the GPU work of tuning
//! runs in a *worker* process: when a candidate faults the worker dies (and its context with it), when
//! it hangs the worker is killed after a timeout, and the next candidate gets a fresh worker.
//!
//! **Protocol**: JSON lines. The parent writes one request per line to the worker's stdin; the worker
//! answers each with one JSON line on stdout (see [`crate::protocol::serve`]). Workers log to stderr;
//! its last few KiB are kept and reported when a worker fails. Stdout lines that are not JSON at all
//! are taken as stray library output and skipped (they show up in a later failure's reason); a JSON
//! line that is not the expected response is a protocol error.
//!
//! Two ways to use it: [`run_isolated`] spawns one child per request (simplest, pays the process and
//! CUDA-context start-up every time), and [`Worker`] / [`WorkerPool`] keep a child alive across
//! requests and respawn it transparently after a crash or a timeout.

use crate::record::{FailStage, Outcome};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How much of a worker's stderr is kept for failure reports.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// How long to wait for an exiting worker to finish before it is killed, and for its stderr to drain.
const GRACE: Duration = Duration::from_millis(500);

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IsolationFailure {
    /// The worker program could not be started: a setup problem, not the candidate's fault.
    #[error("cannot start worker {}: {reason}", program.display())]
    Spawn { program: PathBuf, reason: String },
    /// The worker exited with a non-zero code or was killed by a signal (e.g. SIGSEGV, SIGABRT).
    #[error("worker crashed ({}){}", describe_exit(*code, *signal), tail_suffix(stderr_tail))]
    Crashed { code: Option<i32>, signal: Option<i32>, stderr_tail: String },
    /// No response within the timeout; the worker was killed and reaped.
    #[error("worker timed out after {after:?} and was killed{}", tail_suffix(stderr_tail))]
    Timeout { after: Duration, stderr_tail: String },
    /// The worker answered something that is not a response, or exited cleanly without answering.
    #[error("worker protocol error: {reason}{}", tail_suffix(stderr_tail))]
    Protocol { reason: String, stderr_tail: String },
}

impl IsolationFailure {
    /// The stage a candidate failed at, when this failure is scored as the candidate's outcome.
    pub fn stage(&self) -> FailStage {
        match self {
            IsolationFailure::Timeout { .. } => FailStage::Timeout,
            _ => FailStage::Crash,
        }
    }

    /// The failure as a candidate outcome (`Failed`, scored +inf).
    pub fn to_outcome(&self) -> Outcome {
        Outcome::failed(self.stage(), self.to_string())
    }

    /// True for failures that say nothing about the candidate (the worker could not even start):
    /// these should stop a tuning run rather than be recorded against every candidate.
    pub fn is_setup_error(&self) -> bool {
        matches!(self, IsolationFailure::Spawn { .. })
    }
}

fn describe_exit(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (_, Some(s)) => format!("killed by signal {s}{}", signal_name(s)),
        (Some(c), None) => format!("exit code {c}"),
        (None, None) => "unknown exit status".into(),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        4 => " SIGILL",
        6 => " SIGABRT",
        7 => " SIGBUS",
        8 => " SIGFPE",
        9 => " SIGKILL",
        11 => " SIGSEGV",
        15 => " SIGTERM",
        _ => "",
    }
}

fn tail_suffix(tail: &str) -> String {
    let t = tail.trim();
    if t.is_empty() { String::new() } else { format!("; stderr: {t}") }
}

/// How to start a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra environment, e.g. `CUDA_VISIBLE_DEVICES=1` to pin a worker to one GPU.
    pub env: Vec<(String, String)>,
}

impl WorkerSpec {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self { program: program.into(), args: Vec::new(), env: Vec::new() }
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

/// Send one request to a fresh child process and read its one-line response; the child is killed
/// and reaped when it exceeds `timeout` (which covers start-up, the request, and the exit).
///
/// The child must read one JSON line from stdin, write one JSON line to stdout and exit 0. A non-zero
/// exit or a signal is [`IsolationFailure::Crashed`] even when a response was written.
pub fn run_isolated<Req, Resp>(
    program: &Path,
    args: &[String],
    request: &Req,
    timeout: Duration,
) -> Result<Resp, IsolationFailure>
where
    Req: Serialize + ?Sized,
    Resp: DeserializeOwned,
{
    let line = encode(request)?;
    let spec = WorkerSpec::new(program).args(args.iter().cloned());
    let deadline = Instant::now() + timeout;
    let mut p = Proc::spawn(&spec)?;
    // A child that dies before reading is reported through its exit status below.
    let _ = p.send(&line);
    p.stdin = None;
    let response = match p.recv_json(deadline) {
        Recv::Line(l) => Some(l),
        Recv::Eof => None,
        Recv::Timeout => return Err(p.kill_for_timeout(timeout)),
    };
    let Some(status) = p.wait_exit(deadline) else {
        return Err(p.kill_for_timeout(timeout));
    };
    if !status.success() {
        return Err(p.crashed(status));
    }
    match response {
        Some(l) => decode(&l).map_err(|reason| p.protocol(reason)),
        None => Err(p.protocol("the worker exited without writing a response".into())),
    }
}

/// A long-lived worker process that answers many requests, respawned after a crash or timeout.
///
/// The child is started on the first request. When it crashes or hangs, that request fails with the
/// [`IsolationFailure`] and the next request starts a new child, so a faulting candidate costs one
/// candidate. A worker found dead *between* requests is replaced silently.
pub struct Worker {
    spec: WorkerSpec,
    timeout: Duration,
    proc: Option<Proc>,
    spawns: usize,
}

impl Worker {
    pub fn new(spec: WorkerSpec, timeout: Duration) -> Self {
        Self { spec, timeout, proc: None, spawns: 0 }
    }

    pub fn spec(&self) -> &WorkerSpec {
        &self.spec
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How many child processes this worker has started so far.
    pub fn spawn_count(&self) -> usize {
        self.spawns
    }

    /// The pid of the live child, if one is running.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.child.id())
    }

    /// Send `request` and wait up to the worker's timeout for the response.
    pub fn call<Req, Resp>(&mut self, request: &Req) -> Result<Resp, IsolationFailure>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        self.call_with_timeout(request, self.timeout)
    }

    /// Like [`Worker::call`] with an explicit timeout (e.g. a longer one for a first request that
    /// creates the CUDA context).
    pub fn call_with_timeout<Req, Resp>(&mut self, request: &Req, timeout: Duration) -> Result<Resp, IsolationFailure>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let line = encode(request)?;
        if self.proc.as_mut().is_some_and(|p| p.has_exited()) {
            self.proc = None; // died between requests (e.g. while tearing down): not this request's fault
        }
        if self.proc.is_none() {
            self.proc = Some(Proc::spawn(&self.spec)?);
            self.spawns += 1;
        }
        let p = self.proc.as_mut().expect("spawned above");
        let deadline = Instant::now() + timeout;
        if p.send(&line).is_err() {
            // The pipe is closed: the child is dead or dying.
            let mut p = self.proc.take().expect("present");
            return Err(match p.wait_exit(Instant::now() + GRACE) {
                Some(status) if !status.success() => p.crashed(status),
                Some(_) => p.protocol("the worker exited before reading the request".into()),
                None => p.kill_for_timeout(timeout),
            });
        }
        match p.recv_json(deadline) {
            Recv::Line(l) => match decode(&l) {
                Ok(r) => Ok(r),
                Err(reason) => {
                    // Out of step with the worker: start over with a fresh one.
                    let mut p = self.proc.take().expect("present");
                    p.kill();
                    Err(p.protocol(reason))
                }
            },
            Recv::Eof => {
                let mut p = self.proc.take().expect("present");
                match p.wait_exit(Instant::now() + GRACE) {
                    Some(status) if !status.success() => Err(p.crashed(status)),
                    Some(_) => Err(p.protocol("the worker exited without writing a response".into())),
                    None => Err(p.kill_for_timeout(timeout)),
                }
            }
            Recv::Timeout => {
                let mut p = self.proc.take().expect("present");
                Err(p.kill_for_timeout(timeout))
            }
        }
    }

    /// Close the worker's stdin, give it a moment to exit, then kill it. Also done on drop.
    pub fn shutdown(&mut self) {
        self.proc = None;
    }
}

/// Several [`Worker`]s (typically one per GPU, each with its own `CUDA_VISIBLE_DEVICES`) sharing a
/// batch of requests.
pub struct WorkerPool {
    workers: Vec<Worker>,
}

impl WorkerPool {
    /// One worker per spec. Panics when `specs` is empty.
    pub fn new(specs: Vec<WorkerSpec>, timeout: Duration) -> Self {
        assert!(!specs.is_empty(), "a worker pool needs at least one worker");
        Self { workers: specs.into_iter().map(|s| Worker::new(s, timeout)).collect() }
    }

    pub fn workers(&self) -> &[Worker] {
        &self.workers
    }

    /// Send one request to the first worker.
    pub fn call<Req, Resp>(&mut self, request: &Req) -> Result<Resp, IsolationFailure>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        self.workers[0].call(request)
    }

    /// Answer every request, each worker taking the next unanswered one. `on_result(index, result)`
    /// runs on the calling thread as soon as each answer arrives (e.g. to persist it); the returned
    /// results are in request order. A failed request does not stop the batch.
    pub fn run_batch<Req, Resp>(
        &mut self,
        requests: &[Req],
        mut on_result: impl FnMut(usize, &Result<Resp, IsolationFailure>),
    ) -> Vec<Result<Resp, IsolationFailure>>
    where
        Req: Serialize + Sync,
        Resp: DeserializeOwned + Send,
    {
        let mut out: Vec<Option<Result<Resp, IsolationFailure>>> = requests.iter().map(|_| None).collect();
        if self.workers.len() == 1 {
            for (i, r) in requests.iter().enumerate() {
                let res = self.workers[0].call(r);
                on_result(i, &res);
                out[i] = Some(res);
            }
        } else {
            let next = AtomicUsize::new(0);
            let (tx, rx) = mpsc::channel();
            thread::scope(|s| {
                for w in self.workers.iter_mut() {
                    let tx = tx.clone();
                    let next = &next;
                    s.spawn(move || {
                        loop {
                            let i = next.fetch_add(1, Ordering::SeqCst);
                            if i >= requests.len() {
                                break;
                            }
                            let res = w.call(&requests[i]);
                            if tx.send((i, res)).is_err() {
                                break;
                            }
                        }
                    });
                }
                drop(tx);
                for (i, res) in rx {
                    on_result(i, &res);
                    out[i] = Some(res);
                }
            });
        }
        out.into_iter().map(|r| r.expect("every request answered")).collect()
    }
}

fn encode<Req: Serialize + ?Sized>(request: &Req) -> Result<String, IsolationFailure> {
    serde_json::to_string(request).map_err(|e| IsolationFailure::Protocol {
        reason: format!("cannot encode the request: {e}"),
        stderr_tail: String::new(),
    })
}

fn decode<Resp: DeserializeOwned>(line: &str) -> Result<Resp, String> {
    serde_json::from_str(line).map_err(|e| format!("unexpected response `{}`: {e}", clip(line, 200)))
}

fn clip(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

enum Recv {
    Line(String),
    Eof,
    Timeout,
}

/// Keeps the last [`STDERR_TAIL_BYTES`] bytes written to it.
#[derive(Default)]
struct Tail(VecDeque<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend(bytes);
        let excess = self.0.len().saturating_sub(STDERR_TAIL_BYTES);
        self.0.drain(..excess);
    }

    fn text(&self) -> String {
        let (a, b) = self.0.as_slices();
        let mut v = a.to_vec();
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    }
}

/// One child process with reader threads on its stdout (lines) and stderr (tail).
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Tail>>,
    stderr_done: Receiver<()>,
}

impl Proc {
    fn spawn(spec: &WorkerSpec) -> Result<Self, IsolationFailure> {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| IsolationFailure::Spawn { program: spec.program.clone(), reason: e.to_string() })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");

        let (line_tx, lines) = mpsc::channel();
        thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                        if line_tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });

        let tail = Arc::new(Mutex::new(Tail::default()));
        let (done_tx, stderr_done) = mpsc::channel();
        let tail_w = Arc::clone(&tail);
        thread::spawn(move || {
            let mut r = stderr;
            let mut buf = [0u8; 4096];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => tail_w.lock().expect("stderr tail").push(&buf[..n]),
                }
            }
            let _ = done_tx.send(());
        });

        Ok(Self { child, stdin, lines, stderr: tail, stderr_done })
    }

    fn send(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        stdin.write_all(line.as_bytes())?;
        stdin.write_all(b"\n")?;
        stdin.flush()
    }

    /// The next stdout line that is JSON (anything else is stray output, kept with stderr).
    fn recv_json(&mut self, deadline: Instant) -> Recv {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let t = line.trim();
                    if t.is_empty() {
                        continue;
                    }
                    if serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok() {
                        return Recv::Line(line);
                    }
                    let noise = format!("[stdout] {}\n", clip(t, 500));
                    self.stderr.lock().expect("tail").push(noise.as_bytes());
                }
                Err(RecvTimeoutError::Timeout) => return Recv::Timeout,
                Err(RecvTimeoutError::Disconnected) => return Recv::Eof,
            }
        }
    }

    fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait for the child to exit, polling until `deadline`; `None` if it is still running.
    fn wait_exit(&mut self, deadline: Instant) -> Option<ExitStatus> {
        let mut pause = Duration::from_millis(1);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => {}
                Err(_) => return None,
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// SIGKILL and reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn stderr_tail(&self) -> String {
        // Let the reader drain what the child wrote before it died (bounded: a grandchild could hold
        // the pipe open).
        let _ = self.stderr_done.recv_timeout(GRACE);
        self.stderr.lock().expect("tail").text()
    }

    fn kill_for_timeout(&mut self, after: Duration) -> IsolationFailure {
        self.kill();
        IsolationFailure::Timeout { after, stderr_tail: self.stderr_tail() }
    }

    fn crashed(&self, status: ExitStatus) -> IsolationFailure {
        IsolationFailure::Crashed { code: status.code(), signal: exit_signal(&status), stderr_tail: self.stderr_tail() }
    }

    fn protocol(&self, reason: String) -> IsolationFailure {
        IsolationFailure::Protocol { reason, stderr_tail: self.stderr_tail() }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Closing stdin asks a well-behaved worker to exit (it lets the CUDA context tear down).
        self.stdin = None;
        if self.wait_exit(Instant::now() + GRACE).is_none() {
            self.kill();
        }
    }
}

#[cfg(unix)]
fn exit_signal(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn exit_signal(_: &ExitStatus) -> Option<i32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut t = Tail::default();
        t.push(&vec![b'a'; STDERR_TAIL_BYTES]);
        t.push(b"the end");
        let s = t.text();
        assert_eq!(s.len(), STDERR_TAIL_BYTES);
        assert!(s.ends_with("aaathe end"));
    }

    #[test]
    fn failures_map_to_stages_and_read_well() {
        let c = IsolationFailure::Crashed {
            code: None,
            signal: Some(11),
            stderr_tail: "CUDA_ERROR_ILLEGAL_ADDRESS\n".into(),
        };
        assert_eq!(c.stage(), FailStage::Crash);
        assert_eq!(c.to_string(), "worker crashed (killed by signal 11 SIGSEGV); stderr: CUDA_ERROR_ILLEGAL_ADDRESS");
        let t = IsolationFailure::Timeout { after: Duration::from_secs(2), stderr_tail: String::new() };
        assert_eq!(t.stage(), FailStage::Timeout);
        assert_eq!(t.to_string(), "worker timed out after 2s and was killed");
        assert!(matches!(t.to_outcome(), Outcome::Failed { stage: FailStage::Timeout, .. }));
    }

    #[test]
    fn missing_program_is_a_setup_error() {
        let err = run_isolated::<_, serde_json::Value>(
            Path::new("/nonexistent/k3k-worker"),
            &[],
            &serde_json::json!({}),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(err.is_setup_error(), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn run_isolated_with_a_shell_child() {
        let sh = Path::new("/bin/sh");
        let args = |script: &str| vec!["-c".to_string(), script.to_string()];
        let ok: serde_json::Value = run_isolated(
            sh,
            &args("read line; echo not json; echo \"{\\\"echo\\\": $line}\""),
            &serde_json::json!({"x": 1}),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(ok, serde_json::json!({"echo": {"x": 1}}));
        let err = run_isolated::<_, serde_json::Value>(sh, &args("echo boom >&2; exit 3"), &1, Duration::from_secs(5))
            .unwrap_err();
        assert_eq!(err, IsolationFailure::Crashed { code: Some(3), signal: None, stderr_tail: "boom\n".into() });
        let started = Instant::now();
        let err = run_isolated::<_, serde_json::Value>(sh, &args("exec sleep 30"), &1, Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(err, IsolationFailure::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let err = run_isolated::<_, serde_json::Value>(sh, &args("true"), &1, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(err, IsolationFailure::Protocol { .. }), "{err}");
    }
}
