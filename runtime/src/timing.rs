//! Timing launches with CUDA events: warm-up, L2 flush between repetitions, median of many samples.

use crate::{Gpu, RuntimeError, cuda};
use cudarc::driver::sys::CUevent_flags;

/// How to time.
#[derive(Debug, Clone, Copy)]
pub struct TimingOptions {
    pub warmup: usize,
    pub reps: usize,
    /// Overwrite a buffer larger than L2 before each timed repetition, so inputs are read from HBM.
    pub flush_l2: bool,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions { warmup: 5, reps: 30, flush_l2: true }
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

impl Gpu {
    /// Time `f` (which enqueues work on this GPU's stream); returns one sample in ms per repetition.
    pub fn time(
        &self,
        mut f: impl FnMut() -> Result<(), RuntimeError>,
        o: TimingOptions,
    ) -> Result<Vec<f64>, RuntimeError> {
        for _ in 0..o.warmup {
            f()?;
        }
        self.sync()?;
        let flush = if o.flush_l2 {
            let bytes = (self.info.l2_bytes * 4).max(64 << 20);
            Some(cuda("alloc L2 flush buffer", self.stream.alloc_zeros::<u8>(bytes))?)
        } else {
            None
        };
        // Events are created once: creating one between the launch and the end record would add host time to
        // the measured interval of short kernels. The L2 flush is enqueued before the start event, giving the
        // host time to enqueue the launch before the GPU reaches it.
        let start = cuda("event", self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))?;
        let end = cuda("event", self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))?;
        let mut samples = Vec::with_capacity(o.reps);
        for _ in 0..o.reps {
            if let Some(buf) = &flush {
                // SAFETY: the whole buffer, on our stream.
                let (ptr, _g) = cudarc::driver::DevicePtr::device_ptr(buf, &self.stream);
                cuda("L2 flush", unsafe {
                    cudarc::driver::result::memset_d8_async(ptr, 0x5a, buf.len(), self.stream.cu_stream())
                })?;
            }
            cuda("event record", start.record(&self.stream))?;
            f()?;
            cuda("event record", end.record(&self.stream))?;
            cuda("event sync", end.synchronize())?;
            samples.push(cuda("elapsed", start.elapsed_ms(&end))? as f64);
        }
        self.sync()?;
        Ok(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
