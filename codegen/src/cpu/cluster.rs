//! How the CPU backends run the CTAs of one thread-block cluster ([`k3k_ir::cluster`]): concurrently, one OS
//! thread per CTA, but one at a time. A CTA runs until a barrier wait (an mbarrier phase, the cluster barrier)
//! cannot return; it then hands the run to the next CTA (in rank order after its own) whose wait can return
//! now (or which has not blocked), and sleeps until a CTA hands the run back to it. A peer's arrivals and
//! multicast copies happen while their owner sleeps, so every shared-memory and barrier access of a cluster is
//! made by the one running CTA: the order is deterministic (the same for the interpreter and the JIT, so their
//! results agree bit for bit) and no data race exists. When no CTA can go on while some are still blocked, the
//! cluster is deadlocked (the GPU would hang): the run ends with [`super::interp::InterpError::Deadlock`]
//! naming every blocked CTA and what it waits for.
//!
//! This is faithful to the protocol, not to timing: a CTA runs ahead as far as its barriers let it, which is
//! one of the interleavings the GPU may take. A missing release shows up as a deadlock (its producer's wait
//! can never return); a refill without a release (a producer not waiting) overwrites what a sleeping peer has
//! not read yet, which the checked barriers (bytes beyond the expected transaction count) or the results
//! expose.

use super::interp::{InterpError, MbarState};
use k3k_ir::Kernel;
use std::sync::{Condvar, Mutex};

/// What a blocked CTA waits for.
#[derive(Clone, Debug)]
pub(crate) enum Cond {
    /// The phase of parity `parity` of the barrier whose state is at `st` (in the waiting CTA's own memory)
    /// completes.
    Mbar { st: *const MbarState, parity: i64, what: String },
    /// The cluster barrier's generation passes `generation`.
    Cluster { generation: u64 },
}

struct State {
    /// The CTA that may run.
    turn: usize,
    waiting: Vec<Option<Cond>>,
    done: Vec<bool>,
    arrived: usize,
    generation: u64,
    /// Set on a deadlock or a CTA's error: every CTA stops.
    failed: bool,
}

// SAFETY: the barrier states `Cond::Mbar` points to are only read while the lock is held by the one running
// CTA (their owner sleeps), and they outlive the cluster's run.
unsafe impl Send for State {}

/// The scheduler of one cluster's CTAs.
pub(crate) struct Sched {
    m: Mutex<State>,
    cv: Condvar,
    n: usize,
}

/// Why a CTA stopped: the cluster deadlocked (the description), or another CTA failed first.
#[derive(Debug)]
pub(crate) enum Stop {
    Deadlock(String),
    Aborted,
}

impl Sched {
    pub(crate) fn new(n: usize) -> Sched {
        Sched {
            m: Mutex::new(State {
                turn: 0,
                waiting: vec![None; n],
                done: vec![false; n],
                arrived: 0,
                generation: 0,
                failed: false,
            }),
            cv: Condvar::new(),
            n,
        }
    }

    fn satisfied(s: &State, c: &Cond) -> bool {
        match c {
            // SAFETY: see `State`.
            Cond::Mbar { st, parity, .. } => unsafe { (**st)[3] & 1 != *parity },
            Cond::Cluster { generation } => s.generation > *generation,
        }
    }

    /// The next CTA after `from` (in rank order, `from` itself last) that can run, if any.
    fn next(&self, s: &State, from: usize) -> Option<usize> {
        (1..=self.n)
            .map(|d| (from + d) % self.n)
            .find(|&r| !s.done[r] && s.waiting[r].as_ref().is_none_or(|c| Self::satisfied(s, c)))
    }

    fn deadlock(&self, s: &State) -> String {
        let mut parts = vec![];
        for (r, w) in s.waiting.iter().enumerate() {
            match w {
                _ if s.done[r] => parts.push(format!("CTA {r} exited")),
                Some(Cond::Mbar { what, parity, .. }) => {
                    parts.push(format!("CTA {r} waits for parity {parity} of {what}"))
                }
                Some(Cond::Cluster { .. }) => parts.push(format!("CTA {r} waits at the cluster barrier")),
                None => parts.push(format!("CTA {r} runs")),
            }
        }
        format!("cluster deadlock (the GPU would hang): {}", parts.join("; "))
    }

    /// Wait for CTA `rank`'s first turn.
    pub(crate) fn start(&self, rank: usize) -> Result<(), Stop> {
        let mut s = self.m.lock().unwrap();
        while s.turn != rank && !s.failed {
            s = self.cv.wait(s).unwrap();
        }
        if s.failed { Err(Stop::Aborted) } else { Ok(()) }
    }

    fn block_on(&self, rank: usize, c: Cond, mut s: std::sync::MutexGuard<'_, State>) -> Result<(), Stop> {
        if Self::satisfied(&s, &c) {
            return Ok(());
        }
        s.waiting[rank] = Some(c);
        match self.next(&s, rank) {
            None => {
                let why = self.deadlock(&s);
                s.failed = true;
                self.cv.notify_all();
                return Err(Stop::Deadlock(why));
            }
            Some(r) => {
                s.turn = r;
                self.cv.notify_all();
            }
        }
        while s.turn != rank && !s.failed {
            s = self.cv.wait(s).unwrap();
        }
        s.waiting[rank] = None;
        if s.failed { Err(Stop::Aborted) } else { Ok(()) }
    }

    /// The running CTA `rank` waits for `c` (returns at once when it holds).
    pub(crate) fn wait(&self, rank: usize, c: Cond) -> Result<(), Stop> {
        let s = self.m.lock().unwrap();
        self.block_on(rank, c, s)
    }

    /// The running CTA `rank` arrives at the cluster barrier and waits for every CTA of the cluster.
    pub(crate) fn cluster_sync(&self, rank: usize) -> Result<(), Stop> {
        let mut s = self.m.lock().unwrap();
        let generation = s.generation;
        s.arrived += 1;
        if s.arrived == self.n {
            s.arrived = 0;
            s.generation += 1;
            return Ok(());
        }
        self.block_on(rank, Cond::Cluster { generation }, s)
    }

    /// CTA `rank` ends (`ok` false: with an error): the run goes to the next CTA that can go on. A deadlock of
    /// the others (all blocked for good) is returned as a description.
    pub(crate) fn finish(&self, rank: usize, ok: bool) -> Option<String> {
        let mut s = self.m.lock().unwrap();
        s.done[rank] = true;
        if !ok {
            s.failed = true;
            self.cv.notify_all();
            return None;
        }
        if s.failed || s.done.iter().all(|d| *d) {
            return None;
        }
        match self.next(&s, rank) {
            Some(r) => {
                s.turn = r;
                self.cv.notify_all();
                None
            }
            None => {
                let why = self.deadlock(&s);
                s.failed = true;
                self.cv.notify_all();
                Some(why)
            }
        }
    }
}

/// Raw pointers handed to a cluster's CTA threads (one CTA runs at a time, see [`Sched`]); the interpreter's and
/// the JIT's cluster runs share it.
pub(crate) struct Shared<T>(pub(crate) T);
// SAFETY: the pointees are used by one thread at a time, handed over through the scheduler's lock.
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}
impl<T> Shared<T> {
    /// The pointers (a method, so that closures capture the whole wrapper).
    pub(crate) fn get(&self) -> &T {
        &self.0
    }
}

/// The clusters of a launch of `k` over `grid`, in launch order (x fastest): each cluster's id and the block
/// indices of its CTAs by cluster rank (x fastest inside the cluster). A grid the cluster shape does not tile is
/// an error. Both CPU backends walk a cluster launch with it.
pub(crate) fn clusters(
    k: &Kernel,
    grid: [u32; 3],
) -> Result<impl Iterator<Item = ([u32; 3], Vec<[u32; 3]>)>, InterpError> {
    let c = k.cluster;
    if (0..3).any(|i| !grid[i].is_multiple_of(c[i])) {
        return Err(InterpError::Arith {
            kernel: k.name.clone(),
            what: format!("grid {grid:?} is not a multiple of the cluster shape {c:?}"),
        });
    }
    let n = k.cluster_size();
    let ids = (0..grid[2] / c[2])
        .flat_map(move |cz| (0..grid[1] / c[1]).flat_map(move |cy| (0..grid[0] / c[0]).map(move |cx| [cx, cy, cz])));
    Ok(ids.map(move |id| {
        let blocks = (0..n)
            .map(|r| {
                let (x, y, z) = (r % c[0], (r / c[0]) % c[1], r / (c[0] * c[1]));
                [id[0] * c[0] + x, id[1] * c[1] + y, id[2] * c[2] + z]
            })
            .collect();
        (id, blocks)
    }))
}

/// Run the `n` CTAs of a cluster, `body(rank)` on its own thread each, and return the first real error (a
/// CTA's own error, else a deadlock, rather than the aborts they cause in the others). `cluster` names the
/// cluster in a deadlock error.
pub(crate) fn run_cluster(
    k: &Kernel,
    cluster: [u32; 3],
    sched: &Sched,
    body: impl Fn(usize) -> Result<(), InterpError> + Sync,
) -> Result<(), InterpError> {
    let results: Vec<Result<(), InterpError>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..sched.n)
            .map(|r| {
                let body = &body;
                sc.spawn(move || {
                    let res = match sched.start(r) {
                        Ok(()) => body(r),
                        Err(s) => Err(stop_error(k, cluster, s)),
                    };
                    let ok = res.is_ok() || matches!(res, Err(InterpError::Deadlock { .. }));
                    if let Some(why) = sched.finish(r, ok) {
                        return Err(stop_error(k, cluster, Stop::Deadlock(why)));
                    }
                    res
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a cluster CTA thread panicked")).collect()
    });
    let mut first = None;
    for r in results {
        match r {
            Ok(()) | Err(InterpError::ClusterAborted) => {}
            Err(e @ InterpError::Deadlock { .. }) => {
                first.get_or_insert(e);
            }
            Err(e) => {
                // A CTA's own error comes before the deadlock it may have caused.
                first = Some(e);
                break;
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The error of a stop.
pub(crate) fn stop_error(k: &Kernel, cluster: [u32; 3], s: Stop) -> InterpError {
    match s {
        Stop::Deadlock(what) => InterpError::Deadlock { kernel: k.name.clone(), cluster, what },
        Stop::Aborted => InterpError::ClusterAborted,
    }
}
