//! Timing launches with CUDA events: warm-up, L2 flush between repetitions, median of many samples.

use crate::{Gpu, RuntimeError, cuda};
use cudarc::driver::sys::CUevent_flags;

/// How to time.
#[derive(Debug, Clone, Copy)]
pub struct TimingOptions {
    /// Untimed launches first (at least this many, and at least `min_window_ms / 8` of GPU time).
    pub warmup: usize,
    /// At least this many timed repetitions.
    pub reps: usize,
    /// Overwrite a buffer larger than L2 before each timed repetition, so inputs are read from HBM.
    pub flush_l2: bool,
    /// Keep timing (in batches of `reps`, at most [`MAX_REPS`]) until this much wall time has passed, flushes
    /// included: the sample window of the peers' `triton.testing.do_bench(rep=200)`, so that a short kernel is
    /// timed under the same sustained load as its peer (a 20-sample burst on a GPU that was idle a moment ago
    /// reads 6-12% faster: lab/NOTES.md, 2026-12-01). 0: exactly `reps`.
    pub min_window_ms: f64,
}

/// The most repetitions one timing takes, whatever the window.
pub const MAX_REPS: usize = 4096;

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions { warmup: 5, reps: 30, flush_l2: true, min_window_ms: 0.0 }
    }
}

/// The median of samples (NaN for none).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { 0.5 * (s[n / 2 - 1] + s[n / 2]) }
}

/// Repetitions of the next batch: `reps` (at least one), capped so the total stays within [`MAX_REPS`].
fn next_batch(done: usize, o: &TimingOptions) -> usize {
    o.reps.max(1).min(MAX_REPS.saturating_sub(done))
}

/// Whether timing is complete after `done` samples and `elapsed_ms` of wall time.
fn window_done(done: usize, elapsed_ms: f64, o: &TimingOptions) -> bool {
    done >= MAX_REPS || (done >= o.reps && elapsed_ms >= o.min_window_ms)
}

impl Gpu {
    /// Time `f` (which enqueues work on this GPU's stream); returns one sample in ms per repetition.
    pub fn time(
        &self,
        mut f: impl FnMut() -> Result<(), RuntimeError>,
        o: TimingOptions,
    ) -> Result<Vec<f64>, RuntimeError> {
        let t0 = std::time::Instant::now();
        let mut n = 0;
        while n < o.warmup || t0.elapsed().as_secs_f64() * 1e3 < o.min_window_ms / 8.0 {
            f()?;
            n += 1;
            if n % 8 == 0 {
                self.sync()?;
            }
        }
        self.sync()?;
        let flush = if o.flush_l2 {
            let bytes = (self.info.l2_bytes * 4).max(64 << 20);
            Some(cuda("alloc L2 flush buffer", self.stream.alloc_zeros::<u8>(bytes))?)
        } else {
            None
        };
        // Events are created before the loop: creating one between the launch and the end record would add host
        // time to the measured interval of short kernels. A batch is enqueued as a whole (flush, start, launch,
        // end per repetition) and synchronized once, so the GPU runs the repetitions back to back as the peers'
        // do_bench does; the flush is enqueued before each start event.
        let pairs = o.reps.clamp(1, MAX_REPS);
        let mut events = Vec::with_capacity(pairs);
        for _ in 0..pairs {
            events.push((
                cuda("event", self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))?,
                cuda("event", self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))?,
            ));
        }
        // The flush's own GPU time, for the host-bound check below.
        let flush_ms = match &flush {
            Some(buf) => {
                let (start, end) = &events[0];
                cuda("event record", start.record(&self.stream))?;
                self.flush(buf)?;
                cuda("event record", end.record(&self.stream))?;
                cuda("event sync", end.synchronize())?;
                cuda("elapsed", start.elapsed_ms(end))? as f64
            }
            None => 0.0,
        };
        let mut samples = Vec::with_capacity(pairs);
        let mut host_ms = 0.0;
        let t1 = std::time::Instant::now();
        loop {
            let batch = next_batch(samples.len(), &o).min(pairs);
            let h = std::time::Instant::now();
            for (start, end) in &events[..batch] {
                if let Some(buf) = &flush {
                    self.flush(buf)?;
                }
                cuda("event record", start.record(&self.stream))?;
                f()?;
                cuda("event record", end.record(&self.stream))?;
            }
            host_ms += h.elapsed().as_secs_f64() * 1e3;
            cuda("event sync", events[batch - 1].1.synchronize())?;
            for (start, end) in &events[..batch] {
                samples.push(cuda("elapsed", start.elapsed_ms(end))? as f64);
            }
            if window_done(samples.len(), t1.elapsed().as_secs_f64() * 1e3, &o) {
                break;
            }
        }
        self.sync()?;
        let host_per_rep = host_ms / samples.len().max(1) as f64;
        tracing::debug!(
            "timing: host {host_per_rep:.4} ms per repetition, flush {flush_ms:.4} ms, {} samples",
            samples.len()
        );
        if host_bound(host_per_rep, flush_ms, median(&samples)) {
            tracing::warn!(
                "host-bound timing: enqueueing one repetition took {host_per_rep:.4} ms of host time, more than \
                 the GPU's {flush_ms:.4} ms flush + {:.4} ms sample, so the GPU waited for the host inside the \
                 timed interval and the samples overstate the kernel",
                median(&samples)
            );
        }
        Ok(samples)
    }

    /// Overwrite the L2 flush buffer (enqueued on our stream).
    fn flush(&self, buf: &cudarc::driver::CudaSlice<u8>) -> Result<(), RuntimeError> {
        // SAFETY: the whole buffer, on our stream.
        let (ptr, _g) = cudarc::driver::DevicePtr::device_ptr(buf, &self.stream);
        cuda("L2 flush", unsafe {
            cudarc::driver::result::memset_d8_async(ptr, 0x5a, buf.len(), self.stream.cu_stream())
        })
    }
}

/// Whether a timing was host-bound: the host took longer to enqueue a repetition (flush, events, launches) than
/// the GPU took to run it, so each start event was recorded before the launch arrived. The 10% margin keeps a
/// host that the GPU paced (a full launch queue) from reading as host-bound.
fn host_bound(host_ms_per_rep: f64, flush_ms: f64, sample_ms: f64) -> bool {
    host_ms_per_rep > 1.1 * (flush_ms + sample_ms)
}

#[cfg(test)]
mod tests {
    use super::{MAX_REPS, TimingOptions, host_bound, median, next_batch, window_done};

    #[test]
    fn a_host_slower_than_flush_plus_kernel_is_host_bound() {
        // kda.decode before the hash was hoisted: ~0.35 ms of host time per launch, a 0.06 ms flush, 0.3 ms kernel.
        assert!(host_bound(0.45, 0.06, 0.3));
        assert!(!host_bound(0.03, 0.06, 0.012), "a short kernel whose flush hides the host is not host-bound");
        assert!(!host_bound(0.36, 0.06, 0.3), "a host paced by the GPU reads about flush + sample");
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn the_window_extends_a_short_timing_and_the_cap_ends_it() {
        let o = TimingOptions { reps: 20, min_window_ms: 200.0, ..Default::default() };
        assert!(!window_done(19, 500.0, &o), "fewer than reps");
        assert!(!window_done(20, 150.0, &o), "window not reached");
        assert!(window_done(40, 201.0, &o));
        assert!(window_done(MAX_REPS, 1.0, &o), "the cap ends a timing whatever the window");
        assert_eq!(next_batch(0, &o), 20);
        assert_eq!(next_batch(MAX_REPS - 7, &o), 7);
        let exact = TimingOptions { reps: 30, ..Default::default() };
        assert!(window_done(30, 0.0, &exact) && !window_done(29, 1e9, &exact));
    }
}
