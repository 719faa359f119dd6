//! A cost model that orders candidates before any is timed, from what the compiler says about their kernels.
//!
//! **What it models.** For each kernel of a candidate: how many of its blocks fit on one SM at once (the
//! registers per thread from the ptxas report, allocated per warp in units of 256; the shared memory of the
//! program plus ptxas's static shared memory, plus the 1 KiB the driver reserves per block; the thread and block
//! limits of the SM), from that the waves its grid takes over the GPU's SMs and the fraction of the last wave left
//! idle (the tail), the occupancy in warps per SM, and the bytes ptxas spilled to local memory. A kernel whose
//! block does not fit at all scores infinite.
//!
//! **What it does not model.** Memory traffic, instruction mix, pipelining depth, tensor-core use, L2 reuse: the
//! things that decide most of a kernel's time. The score is therefore used only to *order* candidates that are
//! otherwise unranked (the sample of a knob space after the defaults and the known winners), so that those with a
//! full last wave, enough warps to hide latency and no spills are timed first when the budget cuts a list. It is
//! never used to drop a candidate that fits, nor compared across presets.

use serde::{Deserialize, Serialize};

/// The per-SM limits of a GPU (defaults: compute capability 9.0, H100 / H200).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SmLimits {
    pub sms: u32,
    pub regs_per_sm: u32,
    pub shared_per_sm: u32,
    /// The most shared memory one block may use.
    pub shared_per_block: u32,
    pub threads_per_sm: u32,
    pub blocks_per_sm: u32,
    /// Shared memory the driver reserves per block.
    pub reserved_shared_per_block: u32,
}

impl SmLimits {
    /// Compute capability 9.0 with `sms` SMs.
    pub fn sm90(sms: u32) -> Self {
        Self {
            sms: sms.max(1),
            regs_per_sm: 65536,
            shared_per_sm: 228 * 1024,
            shared_per_block: 227 * 1024,
            threads_per_sm: 2048,
            blocks_per_sm: 32,
            reserved_shared_per_block: 1024,
        }
    }
}

/// What the model reads of one kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelShape {
    /// Threads per block as launched.
    pub threads: u32,
    /// Registers per thread (ptxas); `None` when not assembled (then registers do not limit the model).
    pub registers: Option<u32>,
    /// Shared memory per block: the program's plus ptxas's static shared memory.
    pub shared_bytes: u32,
    /// Blocks of the grid, when known before launch (a grid over run-time symbols is not).
    pub grid_blocks: Option<u64>,
    /// Bytes spilled to local memory (stores + loads, ptxas).
    pub spill_bytes: u32,
}

/// Blocks of `k` resident on one SM at once (0: does not fit).
pub fn blocks_per_sm(k: &KernelShape, l: &SmLimits) -> u32 {
    if k.threads == 0 || k.threads > 1024 || k.shared_bytes > l.shared_per_block {
        return 0;
    }
    let by_threads = l.threads_per_sm / k.threads;
    let by_shared = l.shared_per_sm / (k.shared_bytes + l.reserved_shared_per_block).max(1);
    let by_regs = match k.registers {
        Some(r) if r > 0 => {
            // Registers are allocated per warp in units of 256.
            let per_warp = (r * 32).div_ceil(256) * 256;
            let warps = k.threads.div_ceil(32);
            l.regs_per_sm / (per_warp * warps).max(1)
        }
        _ => u32::MAX,
    };
    by_threads.min(by_shared).min(by_regs).min(l.blocks_per_sm)
}

/// The modelled relative cost of one kernel (lower is better; `f64::INFINITY`: it does not fit): the tail of the
/// last wave (1 / its fill, when the grid is known), times a latency-hiding factor (below 16 resident warps per
/// SM, up to 2x), times a spill factor (1 + 1% per 16 spilled bytes).
pub fn kernel_cost(k: &KernelShape, l: &SmLimits) -> f64 {
    let bps = blocks_per_sm(k, l);
    if bps == 0 {
        return f64::INFINITY;
    }
    let tail = match k.grid_blocks {
        Some(g) if g > 0 => {
            let per_wave = u64::from(bps) * u64::from(l.sms);
            let waves = g as f64 / per_wave as f64;
            waves.ceil() / waves
        }
        _ => 1.0,
    };
    let warps = f64::from(bps * k.threads.div_ceil(32));
    let latency = (16.0 / warps).clamp(1.0, 2.0);
    let spills = 1.0 + f64::from(k.spill_bytes) / 16.0 * 0.01;
    tail * latency * spills
}

/// The modelled cost of a candidate: the largest of its kernels' ([`kernel_cost`]); 1.0 for none.
pub fn candidate_cost(kernels: &[KernelShape], l: &SmLimits) -> f64 {
    kernels.iter().map(|k| kernel_cost(k, l)).fold(1.0f64, f64::max)
}

/// Stable order of `items` by modelled cost (lowest first); equal costs keep their order.
pub fn order_by_cost<T>(items: &mut [(T, f64)]) {
    items.sort_by(|a, b| a.1.total_cmp(&b.1));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(threads: u32, regs: u32, shared: u32, grid: Option<u64>) -> KernelShape {
        KernelShape { threads, registers: Some(regs), shared_bytes: shared, grid_blocks: grid, spill_bytes: 0 }
    }

    #[test]
    fn blocks_per_sm_takes_the_tightest_limit() {
        let l = SmLimits::sm90(132);
        assert_eq!(blocks_per_sm(&k(128, 32, 0, None), &l), 16, "threads: 2048 / 128");
        assert_eq!(blocks_per_sm(&k(256, 128, 0, None), &l), 2, "registers: 65536 / (128 * 256)");
        assert_eq!(blocks_per_sm(&k(128, 32, 100 * 1024, None), &l), 2, "shared: 228 KiB / 101 KiB");
        assert_eq!(blocks_per_sm(&k(128, 32, 228 * 1024, None), &l), 0, "over the per-block limit");
        assert_eq!(blocks_per_sm(&k(384, 168, 200 * 1024, None), &l), 1);
        // 255 registers round up to 8192 per warp: 8 warps per SM, 2 blocks of 128 threads
        assert_eq!(blocks_per_sm(&k(128, 255, 0, None), &l), 2);
    }

    #[test]
    fn a_full_last_wave_and_more_warps_cost_less() {
        let l = SmLimits::sm90(132);
        // 132 blocks of one per SM: one full wave; 133: two waves, the second almost empty
        let full = kernel_cost(&k(256, 255, 0, Some(132)), &l);
        let tail = kernel_cost(&k(256, 255, 0, Some(133)), &l);
        assert!(tail > 1.9 * full, "{full} {tail}");
        // 4 warps resident vs 16: the latency factor
        let few = kernel_cost(&k(128, 32, 200 * 1024, Some(132)), &l);
        let many = kernel_cost(&k(128, 32, 40 * 1024, Some(132 * 4)), &l);
        assert!(few > many, "{few} {many}");
        let mut spilling = k(128, 32, 40 * 1024, Some(132 * 4));
        spilling.spill_bytes = 160;
        assert!(kernel_cost(&spilling, &l) > many);
        assert!(candidate_cost(&[k(128, 32, 228 * 1024, None)], &l).is_infinite());
        assert_eq!(candidate_cost(&[], &l), 1.0);
        let mut v = vec![("b", 2.0), ("a", 1.0), ("c", 2.0)];
        order_by_cost(&mut v);
        assert_eq!(v.iter().map(|x| x.0).collect::<String>(), "abc");
    }
}
