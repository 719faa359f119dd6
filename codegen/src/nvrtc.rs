//! CUDA C -> PTX through NVRTC (and optionally -> CUBIN through ptxas, see [`crate::ptxas`]).
//!
//! # The compile timeout
//!
//! One compile may take at most `K3K_NVRTC_TIMEOUT_S` seconds ([`nvrtc_timeout`]); past it, [`compile_ptx`]
//! returns [`CompileError::Timeout`] naming the kernel and the limit, so a compile that hangs costs one kernel (one
//! candidate of a tune), never the command. `nvrtcCompileProgram` is an in-process call that cannot be
//! interrupted, so the compile runs on a thread of its own while the caller waits for it at most that long:
//!
//! 1. At the limit the caller asks NVRTC to stop through `nvrtcSetFlowCallback` (NVRTC 12.8 and later: a callback
//!    NVRTC polls during the compile; once it answers 1 the compile returns `NVRTC_ERROR_CANCELLED`), and waits
//!    [`CANCEL_GRACE`] more for the thread to end, so in the usual case nothing is left behind: the thread ends
//!    and NVRTC frees the program's memory.
//! 2. A compile that does not reach a cancellation point within the grace is left running on its thread (a
//!    thread cannot be killed safely) and the caller gets its error at once. At most [`MAX_LEFT_RUNNING`] such
//!    compiles may run on in one process; while that many do, a new compile is refused with
//!    [`CompileError::Stuck`] instead of starting (each would hold a core and its memory until the process ends).
//!
//! Why not compile in a child process, as `k3k tune` isolates its GPU measurements (`k3k_tuner::isolate`), where
//! a hung compile could be killed and its memory reclaimed: the compiles do not only run in `k3k tune`. `emit`,
//! `check`, `fuzz`, `bench`, `run`, the tuner's planner (parallel waves on every core) and k3k-build (in a
//! `build.rs`, and at run time inside a user's program with run-time NVRTC) all call this function, and most
//! of them have no worker binary to start. A process per compile would also pay a process start and NVRTC's
//! load each time and lose the in-process module cache ([`crate::cache`]), for a hang that NVRTC's own
//! cancellation already ends. The worker processes of `k3k tune` stay what they are: the place where code that
//! can fault or hang *on the GPU* runs.

use crate::toolchain::{NVRTC_LIB, ToolchainError, load_nvrtc};
use cudarc::nvrtc::result as nv;
use std::ffi::{CStr, CString, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The GPU architecture we compile for: Hopper with its arch-specific features (wgmma, setmaxnreg).
pub const ARCH: &str = "sm_90a";

/// The environment variable that bounds one NVRTC compile, in seconds (default [`NVRTC_TIMEOUT_DEFAULT_S`]).
pub const NVRTC_TIMEOUT_ENV: &str = "K3K_NVRTC_TIMEOUT_S";
/// The default bound of one NVRTC compile: the largest kernels compile in a few seconds.
pub const NVRTC_TIMEOUT_DEFAULT_S: f64 = 120.0;
/// How long a compile past its limit is given to stop once cancelled before it is left running.
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// The most compiles that ran over their limit, did not stop when cancelled and still run in this process.
pub const MAX_LEFT_RUNNING: usize = 4;
/// The stack of a compile thread: NVRTC's front end recurses deeply on templates, and the main thread that
/// compiled before had 8 MiB (reserved address space, not memory).
const COMPILE_STACK_BYTES: usize = 16 << 20;

/// How a compile that ran over its limit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutEnd {
    /// NVRTC stopped when asked (`NVRTC_ERROR_CANCELLED`).
    Cancelled,
    /// NVRTC finished after the limit, before it reached a point where it could be cancelled.
    FinishedLate,
    /// NVRTC neither stopped nor finished within [`CANCEL_GRACE`]: its thread runs on until it does or the process ends.
    LeftRunning,
}

impl std::fmt::Display for TimeoutEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutEnd::Cancelled => "was cancelled",
            TimeoutEnd::FinishedLate => "finished only after it",
            TimeoutEnd::LeftRunning => {
                "did not stop when cancelled: its thread is left running until this process exits"
            }
        })
    }
}

/// Why a compile failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    #[error("NVRTC rejected kernel `{kernel}` ({status}):\n{log}")]
    Rejected { kernel: String, status: String, log: String },
    #[error("NVRTC failed for kernel `{kernel}`: {reason}")]
    Internal { kernel: String, reason: String },
    /// The compile ran over its limit ([`nvrtc_timeout`]).
    #[error("NVRTC ran over {secs} s for kernel `{kernel}` and {end} (set {NVRTC_TIMEOUT_ENV} to allow longer)")]
    Timeout { kernel: String, secs: f64, end: TimeoutEnd },
    /// Too many earlier compiles ran over their limit and still run: this one was not started.
    #[error(
        "NVRTC was not started for kernel `{kernel}`: {running} earlier compiles ran over {NVRTC_TIMEOUT_ENV}, did \
         not stop when cancelled and still run in this process (at most {MAX_LEFT_RUNNING} may)"
    )]
    Stuck { kernel: String, running: usize },
}

/// NVRTC's output for one source.
#[derive(Debug, Clone)]
pub struct NvrtcOutput {
    pub ptx: String,
    pub log: String,
    pub millis: f64,
}

/// `K3K_NVRTC_LINEINFO=1`: compile with `-lineinfo`, so a profiler (ncu's source page) maps SASS back to the
/// generated CUDA C. Off by default; it does not change the code, only the PTX's debug sections (and the cache key).
pub const LINEINFO_ENV: &str = "K3K_NVRTC_LINEINFO";

/// Whether [`LINEINFO_ENV`] asks for line information.
pub fn lineinfo() -> bool {
    std::env::var(LINEINFO_ENV).is_ok_and(|v| v == "1")
}

/// The options every k3k kernel is compiled with.
pub fn options(arch: &str) -> Vec<String> {
    let mut o =
        vec![format!("--gpu-architecture={arch}"), "-std=c++17".into(), "--device-as-default-execution-space".into()];
    if lineinfo() {
        o.push("-lineinfo".into());
    }
    o
}

/// The bound of one NVRTC compile: `K3K_NVRTC_TIMEOUT_S` (a positive number of seconds, at most a day) or 120 s.
pub fn nvrtc_timeout() -> Result<Duration, ToolchainError> {
    crate::toolchain::seconds_from_env(NVRTC_TIMEOUT_ENV, NVRTC_TIMEOUT_DEFAULT_S)
}

/// Compile `src` (whose kernel is named `kernel`) to PTX for `arch`, within [`nvrtc_timeout`] (see the module
/// docs).
pub fn compile_ptx(kernel: &str, src: &str, arch: &str) -> Result<NvrtcOutput, CompileError> {
    load_nvrtc()?;
    compile_ptx_within(kernel, src, arch, nvrtc_timeout()?)
}

/// [`compile_ptx`] with an explicit limit instead of `K3K_NVRTC_TIMEOUT_S`.
pub fn compile_ptx_within(kernel: &str, src: &str, arch: &str, limit: Duration) -> Result<NvrtcOutput, CompileError> {
    load_nvrtc()?;
    let (k, s, a) = (kernel.to_string(), src.to_string(), arch.to_string());
    Watchdog::new(limit).run(kernel, move |cancel| compile_blocking(&k, &s, &a, cancel))?
}

/// What the work given to [`Watchdog::run`] came to.
enum Ran<T> {
    Done(T),
    /// It saw the cancel flag and stopped.
    Cancelled,
}

/// Compiles left running past their limit in this process (see the module docs).
static LEFT_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Runs one piece of uninterruptible work on its own thread and waits for it at most `limit` (then asks it to stop
/// and waits `grace` more); see the module docs.
struct Watchdog {
    limit: Duration,
    grace: Duration,
    cap: usize,
    left_running: &'static AtomicUsize,
}

const RUNNING: u8 = 0;
const ENDED: u8 = 1;
const ABANDONED: u8 = 2;

impl Watchdog {
    fn new(limit: Duration) -> Self {
        Watchdog { limit, grace: CANCEL_GRACE, cap: MAX_LEFT_RUNNING, left_running: &LEFT_RUNNING }
    }

    /// Run `work` (which should stop soon after the flag it is given turns true) for `kernel`.
    fn run<T: Send + 'static>(
        &self,
        kernel: &str,
        work: impl FnOnce(&AtomicBool) -> Ran<T> + Send + 'static,
    ) -> Result<T, CompileError> {
        let running = self.left_running.load(Ordering::SeqCst);
        if running >= self.cap {
            return Err(CompileError::Stuck { kernel: kernel.into(), running });
        }
        let cancel = Arc::new(AtomicBool::new(false));
        let state = Arc::new(AtomicU8::new(RUNNING));
        let (tx, rx) = mpsc::sync_channel(1);
        let (c, st, left) = (cancel.clone(), state.clone(), self.left_running);
        std::thread::Builder::new()
            .name(format!("nvrtc {kernel}"))
            .stack_size(COMPILE_STACK_BYTES)
            .spawn(move || {
                let r = work(&c);
                // Counted as left running: no longer (the caller has gone; nobody reads the result).
                if st.swap(ENDED, Ordering::SeqCst) == ABANDONED {
                    left.fetch_sub(1, Ordering::SeqCst);
                }
                let _ = tx.send(r);
            })
            .map_err(|e| CompileError::Internal {
                kernel: kernel.into(),
                reason: format!("could not start the compile thread: {e}"),
            })?;
        let timeout = |end| CompileError::Timeout { kernel: kernel.into(), secs: self.limit.as_secs_f64(), end };
        let panicked =
            || CompileError::Internal { kernel: kernel.into(), reason: "the compile thread panicked".into() };
        match rx.recv_timeout(self.limit) {
            Ok(Ran::Done(t)) => return Ok(t),
            Ok(Ran::Cancelled) => return Err(timeout(TimeoutEnd::Cancelled)),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(panicked()),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        cancel.store(true, Ordering::SeqCst);
        match rx.recv_timeout(self.grace) {
            Ok(Ran::Done(_)) => Err(timeout(TimeoutEnd::FinishedLate)),
            Ok(Ran::Cancelled) => Err(timeout(TimeoutEnd::Cancelled)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(panicked()),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Counted before the thread can see ABANDONED, so its decrement never comes first.
                self.left_running.fetch_add(1, Ordering::SeqCst);
                if state.compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst).is_err() {
                    // It ended in between: not left running after all.
                    self.left_running.fetch_sub(1, Ordering::SeqCst);
                    return Err(timeout(TimeoutEnd::FinishedLate));
                }
                Err(timeout(TimeoutEnd::LeftRunning))
            }
        }
    }
}

/// `nvrtcSetFlowCallback(prog, callback, payload)` (NVRTC 12.8 and later; cudarc does not bind it).
type SetFlowCallback = unsafe extern "C" fn(
    cudarc::nvrtc::sys::nvrtcProgram,
    Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int>,
    *mut c_void,
) -> c_int;

/// `nvrtcSetFlowCallback` of the loaded NVRTC, when it has one.
fn set_flow_callback() -> Option<SetFlowCallback> {
    static F: OnceLock<Option<SetFlowCallback>> = OnceLock::new();
    *F.get_or_init(|| {
        use libloading::os::unix::{Library, RTLD_NOW};
        // SAFETY: NVRTC is already loaded (`load_nvrtc`, under its soname): this finds that copy again and runs no
        // initialiser. The handle is leaked on purpose: the function pointer is used for the rest of the process.
        let lib = unsafe { Library::open(Some(NVRTC_LIB), RTLD_NOW) }.ok()?;
        // SAFETY: the symbol's C signature is the one of `SetFlowCallback` (nvrtc.h).
        let f = unsafe { lib.get::<SetFlowCallback>(b"nvrtcSetFlowCallback") }.ok().map(|s| *s);
        std::mem::forget(lib);
        f
    })
}

/// NVRTC's flow callback: 1 (cancel) once the compile's flag is set, and from then on.
unsafe extern "C" fn cancel_when_flagged(payload: *mut c_void, _reserved: *mut c_void) -> c_int {
    // SAFETY: `payload` is the `AtomicBool` of the compile that registered this callback, which outlives its
    // `nvrtcCompileProgram` call (see `compile_blocking`).
    let flag = unsafe { &*(payload as *const AtomicBool) };
    c_int::from(flag.load(Ordering::SeqCst))
}

/// The compile itself, on the calling thread; it stops at NVRTC's next flow callback once `cancel` is set.
fn compile_blocking(
    kernel: &str,
    src: &str,
    arch: &str,
    cancel: &AtomicBool,
) -> Ran<Result<NvrtcOutput, CompileError>> {
    let t0 = Instant::now();
    let internal = |reason: String| CompileError::Internal { kernel: kernel.into(), reason };
    let Ok(csrc) = CString::new(src) else { return Ran::Done(Err(internal("source contains a NUL byte".into()))) };
    let Ok(cname) = CString::new(format!("{kernel}.cu")) else {
        return Ran::Done(Err(internal("name contains a NUL byte".into())));
    };
    let prog = match nv::create_program(&csrc, Some(&cname)) {
        Ok(p) => p,
        Err(e) => return Ran::Done(Err(internal(format!("create: {e:?}")))),
    };
    if let Some(set) = set_flow_callback() {
        // SAFETY: `prog` is live; `cancel` outlives the compile below (it is borrowed for this whole function).
        unsafe { set(prog, Some(cancel_when_flagged), cancel as *const AtomicBool as *mut c_void) };
    }
    let opts = options(arch);
    // SAFETY: `prog` is a live program; options are valid C strings.
    let compiled = unsafe { nv::compile_program(prog, &opts) };
    let result = if cancel.load(Ordering::SeqCst)
        && matches!(&compiled, Err(e) if e.0 == cudarc::nvrtc::sys::nvrtcResult::NVRTC_ERROR_CANCELLED)
    {
        Ran::Cancelled
    } else {
        // SAFETY: as above.
        let log = unsafe { nv::get_program_log(prog) }
            .map(|raw| unsafe { CStr::from_ptr(raw.as_ptr()) }.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ran::Done(match compiled {
            Err(e) => Err(CompileError::Rejected { kernel: kernel.into(), status: format!("{e:?}"), log }),
            Ok(()) => {
                // SAFETY: compiled successfully.
                match unsafe { nv::get_ptx(prog) } {
                    Ok(raw) => {
                        let ptx = unsafe { CStr::from_ptr(raw.as_ptr()) }.to_string_lossy().into_owned();
                        Ok(NvrtcOutput { ptx, log, millis: t0.elapsed().as_secs_f64() * 1e3 })
                    }
                    Err(e) => Err(internal(format!("get_ptx: {e:?}"))),
                }
            }
        })
    };
    // SAFETY: destroying the program we created.
    let _ = unsafe { nv::destroy_program(prog) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watchdog with its own count of compiles left running (the process-wide one is not touched).
    fn watchdog(limit_ms: u64, grace_ms: u64, cap: usize) -> (Watchdog, &'static AtomicUsize) {
        let left: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        let w = Watchdog {
            limit: Duration::from_millis(limit_ms),
            grace: Duration::from_millis(grace_ms),
            cap,
            left_running: left,
        };
        (w, left)
    }

    #[test]
    fn work_within_the_limit_returns_its_result() {
        let (w, left) = watchdog(5_000, 100, 1);
        assert_eq!(w.run("quick", |_| Ran::Done(7)).unwrap(), 7);
        assert_eq!(left.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn work_that_stops_when_cancelled_is_a_timeout_naming_the_kernel_and_the_limit() {
        let (w, left) = watchdog(50, 5_000, 1);
        let t0 = Instant::now();
        let e = w
            .run("slow_kernel", |cancel| {
                while !cancel.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ran::<()>::Cancelled
            })
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(4), "waited {:?}", t0.elapsed());
        assert!(matches!(&e, CompileError::Timeout { end: TimeoutEnd::Cancelled, .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("`slow_kernel`") && msg.contains("0.05 s") && msg.contains(NVRTC_TIMEOUT_ENV), "{msg}");
        assert_eq!(left.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn work_that_ignores_the_cancel_is_left_running_and_counted_until_it_ends() {
        let (w, left) = watchdog(20, 20, 1);
        let (release, wait) = mpsc::channel::<()>();
        let t0 = Instant::now();
        let e = w
            .run("hung_kernel", move |_| {
                let _ = wait.recv();
                Ran::Done(())
            })
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2), "waited {:?}", t0.elapsed());
        assert!(matches!(&e, CompileError::Timeout { end: TimeoutEnd::LeftRunning, .. }), "{e:?}");
        assert!(e.to_string().contains("left running"), "{e}");
        assert_eq!(left.load(Ordering::SeqCst), 1);
        // At the cap a new compile is refused at once, without starting.
        let e = w.run("next_kernel", |_| Ran::Done(())).unwrap_err();
        assert!(matches!(&e, CompileError::Stuck { running: 1, .. }), "{e:?}");
        assert!(e.to_string().contains("`next_kernel`"), "{e}");
        // Once the hung work ends it is no longer counted, and compiles start again.
        release.send(()).unwrap();
        let t0 = Instant::now();
        while left.load(Ordering::SeqCst) != 0 {
            assert!(t0.elapsed() < Duration::from_secs(5), "the ended work is still counted");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(w.run("next_kernel", |_| Ran::Done(3)).unwrap(), 3);
    }

    /// Real NVRTC with a limit far below a compile's time: the flow callback cancels it (no result after the
    /// limit, no thread left behind).
    #[test]
    fn nvrtc_is_cancelled_at_its_limit() {
        if let Err(e) = load_nvrtc() {
            eprintln!("no NVRTC ({e}): skipped");
            return;
        }
        assert!(set_flow_callback().is_some(), "NVRTC 13 has nvrtcSetFlowCallback");
        // Enough template work that the compile takes far longer than the limit.
        let src = format!(
            "template <int N> struct F {{ static constexpr long v = F<N - 1>::v * 3 + N; }};\n\
             template <> struct F<0> {{ static constexpr long v = 1; }};\n\
             extern \"C\" __global__ void cancel_probe(long* y) {{\n{}}}\n",
            (0..400).map(|i| format!("  y[{i}] = F<{}>::v;\n", 200 + i)).collect::<String>()
        );
        let ok = compile_ptx_within("cancel_probe", &src, ARCH, Duration::from_secs(60));
        let full = ok.expect("the probe compiles without a limit").millis;
        let e = compile_ptx_within("cancel_probe", &src, ARCH, Duration::from_micros(100)).unwrap_err();
        assert!(
            matches!(&e, CompileError::Timeout { end: TimeoutEnd::Cancelled, .. }),
            "expected a cancelled compile (a full compile took {full:.0} ms): {e:?}"
        );
        assert!(e.to_string().contains("`cancel_probe`"), "{e}");
    }
}
