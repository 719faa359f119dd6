//! `mxfp4_matmul` with MXFP8 activations on FP8 tensor cores (knob `MMA=fp8`): the MXFP4 weights converted
//! exactly to E4M3 on the way into shared memory, the activations' E4M3 codes fed to `wgmma ... .e4m3.e4m3` as
//! they lie in memory, and the per-32 E8M0 scales of both operands applied exactly to an f32 accumulator per
//! 32-wide K block ([`kernel`]); F8V=4 and 5 convert the weights by a first launch instead and run a plain FP8
//! GEMM with a producer warpgroup ([`first`], lab/2026-12-07/mx-fp8-3.md), dense or grouped; F8V=6 is 5 with
//! the consumer warpgroups taking turns (lab/2026-12-07/mx-fp8-pp.md). F8V >= 4 also take packed weights (read
//! by the first launch) and the GLU and routing-weight epilogues (lab/2026-12-07/mx-fp8-epilogues.md); F8V 1-3
//! natural-layout weights and no epilogue; other variants are refused with a typed error naming what is missing
//! (lab/2026-12-06/mx-fp8.md: the plan).

use super::BLOCK;
pub use super::matmul::Turn;
use super::matmul::{Act, Fp4Weights, MatInputs, MatKnobs, MatSpec, ShapeFacts, WeightBytes};
use crate::OpError;
use crate::plan::Plan;
use k3k_ir::{DType, HostTensor, Kernel, Knobs};

pub mod first;
pub mod kernel;

const OP: &str = "mxfp4_matmul";

/// The resolved configuration of the FP8 kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8Cfg {
    /// Token rows per CTA: 64 or 128 (one warpgroup per 64).
    pub bm: u32,
    /// Weight rows per CTA: a multiple of 8 up to 256.
    pub bn: u32,
    /// cp.async ring depth (>= 3).
    pub stages: u32,
    /// Temporary accumulators (2: the next block's product in flight during a promotion).
    pub tmps: u32,
    /// F8V >= 2: the code tiles by TMA on per-slot mbarriers (F8V=1: every thread's cp.async with per-row
    /// bounds, the first kernel of 2026-12-06).
    pub tma: bool,
    /// F8V >= 2: the activation scale factors of a thread's rows in registers (row vectors; F8V=1: a shared
    /// f32 vector read per element).
    pub fa_reg: bool,
    /// F8V=3: the weight scales folded into the E4M3 codes (rows whose scale bytes span <= 12, no NaN; the plan
    /// falls back to F8V=2 otherwise), the promotion one FFMA per element.
    pub fold: bool,
    /// F8V=4: the (folded) weights converted to E4M3 by a first launch into a scratch `[N, K/4]` words, the main
    /// kernel a plain FP8 x FP8 GEMM with a producer warpgroup ([`first`]; the same fold condition and fallback
    /// to F8V=2 as F8V=3).
    pub first: bool,
    /// F8V=4 with CPS=1: a persistent grid (one block per SM walks every grid-th tile, its producer running on
    /// into the next tile during the epilogue); CPS=0: one block per tile.
    pub persist: bool,
    /// F8V=5: as 4, with the next slice's first product issued before a slice's last promotion (two
    /// temporaries, BN <= 128).
    pub cross: bool,
    /// F8V=6: as 5, with the two consumer warpgroups (BM=128) taking turns ([`k3k_ir::Stmt::InTurn`], the
    /// ping-pong schedule) on what [`Turn`] names ([`first`]).
    pub turn: Option<Turn>,
}

/// The newest kernel generation (knob `F8V`).
pub const LATEST: u32 = 6;
/// The generation `F8V=0` means: the first one run on a GPU (the H100, 2026-12-06: correct, 1.049 ms at M4096
/// N6144 K3584; 2 and 3 ran there at 23:54 UTC: 0.909 and 0.774 ms; 4 and 5 on 2026-12-07 ~04:20 UTC: 0.2893 ms
/// at best, F8V=5 CPS=1, lab/2026-12-07/0420-h100-fp8-kda-old/); 6 passes the CPU checks and assembles without
/// spills but has not run on a GPU yet (lab/2026-12-07/mx-fp8-pp/run.sh).
pub const DEFAULT: u32 = 1;

impl Fp8Cfg {
    /// The generation these flags make (knob `F8V`).
    pub fn version(&self) -> u32 {
        if self.turn.is_some() {
            6
        } else if self.cross {
            5
        } else if self.first {
            4
        } else if self.fold {
            3
        } else if self.tma {
            2
        } else {
            1
        }
    }

    /// As knobs (recorded in the kernel; re-resolving them gives the same kernel).
    pub fn knobs(&self) -> Knobs {
        let k = Knobs::new()
            .with("MMA", "fp8")
            .with("BM", self.bm)
            .with("BN", self.bn)
            .with("BK", 128i64)
            .with("STAGES", self.stages)
            .with("F8V", self.version());
        // (CPS and TURN only where they mean something, so the other generations' recorded knobs stay as they
        // were.)
        let k = if self.persist { k.with("CPS", 1i64) } else { k };
        match self.turn {
            Some(t) => k.with("TURN", t.name()),
            None => k,
        }
    }
}

/// True when the knobs ask for the FP8 path (`MMA=fp8`).
pub fn selected(k: &MatKnobs) -> bool {
    k.mma == Some(super::matmul::Mma::Fp8)
}

fn invalid(knobs: &Knobs, why: String) -> OpError {
    OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why }
}

/// Resolve the knobs (BM, BN, STAGES; 0 = auto: 128, 128, 4; absent: 0) and check the problem is one the kernel
/// covers. `k` is record `knobs` read (the record is named in errors).
pub fn resolve(spec: &MatSpec, k: &MatKnobs, knobs: &Knobs) -> Result<Fp8Cfg, OpError> {
    let get = |v: Option<u32>, auto: u32| match v.unwrap_or(0) {
        0 => auto,
        v => v,
    };
    // F8V: the kernel generation (0 = DEFAULT; see the `Fp8Cfg` flags).
    let ver = get(Some(k.f8v), DEFAULT);
    if !(1..=LATEST).contains(&ver) {
        return Err(invalid(knobs, format!("MMA=fp8 takes F8V 0 (= {DEFAULT}) or 1..={LATEST} (got F8V={ver})")));
    }
    let (bm, bn) = (get(k.bm, 128), get(k.bn, 128));
    // F8V=4: the deepest ring up to 6 that fits the shared memory (less the paired GLU's accumulator tile).
    let ring_smem = FIRST_SMEM.saturating_sub(first::extra_smem(spec, bm, bn));
    let st_auto = if ver >= 4 { (ring_smem / first::stage_bytes(bm, bn)).clamp(3, 6) } else { 4 };
    let stages = get(k.stages, st_auto);
    let bk = get(k.bk, 128);
    if !matches!(bm, 64 | 128)
        || bn == 0
        || !bn.is_multiple_of(8)
        || bn > 256
        || bk != 128
        || !(3..=8).contains(&stages)
    {
        return Err(invalid(
            knobs,
            format!(
                "MMA=fp8 needs BM 64 or 128, BN a multiple of 8 up to 256, BK=128, STAGES 3..=8 (got BM={bm}, BN={bn}, BK={bk}, STAGES={stages})"
            ),
        ));
    }
    let (tma, fa_reg, fold, first) = (ver >= 2, ver >= 2, ver >= 3, ver >= 4);
    // CPS (F8V=4): 0 one block per tile, 1 the persistent walk; ignored by the other generations.
    let cps = get(k.cps, 0);
    if first && cps > 1 {
        return Err(invalid(
            knobs,
            format!("MMA=fp8,F8V={ver} takes CPS 0 (a block per tile) or 1 (persistent), got {cps}"),
        ));
    }
    let persist = first && cps == 1;
    if first && stages * first::stage_bytes(bm, bn) > ring_smem {
        return Err(invalid(
            knobs,
            format!(
                "MMA=fp8,F8V={ver}: STAGES={stages} x {} bytes per stage at BM={bm} BN={bn} is over the {ring_smem} bytes of shared memory a block may take for its ring",
                first::stage_bytes(bm, bn)
            ),
        ));
    }
    let mut missing = vec![];
    if !spec.act8 {
        missing.push("MXFP8 activations");
    }
    if spec.grouped && !first {
        missing.push("dense problems only (grouped: F8V=4)");
    }
    if (spec.epilogue.is_glu() || spec.row_scale) && !first {
        missing.push("no epilogue or routing weight (GLU and p: F8V >= 4)");
    }
    if spec.tiled || (spec.packed && !first) {
        missing.push("natural-layout weights (packed: F8V >= 4; tile-major: not yet)");
    }
    if !missing.is_empty() {
        return Err(invalid(knobs, format!("MMA=fp8 covers {}", missing.join(", "))));
    }
    if spec.epilogue.is_glu() && !bn.is_multiple_of(16) {
        return Err(invalid(
            knobs,
            format!(
                "MMA=fp8 with a GLU epilogue needs BN a multiple of 16 (gate and up halves of 8k rows; got BN={bn})"
            ),
        ));
    }
    // Registers per thread: the accumulator and the temporaries, BN/2 each per 64 rows.
    let tmps = if bn <= 128 { 2 } else { 1 };
    let cross = ver >= 5;
    if cross && tmps != 2 {
        return Err(invalid(knobs, format!("MMA=fp8,F8V={ver} needs two temporaries: BN <= 128 (got BN={bn})")));
    }
    // F8V=6: the two consumer warpgroups take turns (TURN: mma, the default, or ffma).
    let turn = if ver == 6 {
        if bm != 128 {
            return Err(invalid(
                knobs,
                format!("MMA=fp8,F8V=6 takes turns of two consumer warpgroups: BM=128 (got BM={bm})"),
            ));
        }
        Some(k.turn)
    } else {
        None
    };
    Ok(Fp8Cfg { bm, bn, stages, tmps, tma, fa_reg, fold, first, persist, cross, turn })
}

/// Shared memory a block of the F8V=4 main kernel may take for its ring (227 KB less room for the barriers).
const FIRST_SMEM: u32 = 227 * 1024 - 1024;

/// The kernels of the FP8 path (one launch; F8V=4 and 5: the first launch and the GEMM).
pub fn kernels(spec: &MatSpec, k: &MatKnobs, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
    let c = resolve(spec, k, knobs)?;
    if c.first {
        return Ok(vec![first::build_convert(c.knobs(), spec.grouped, spec.packed)?, first::build_main(&c, spec)?]);
    }
    Ok(vec![kernel::build(&c, spec.kb_align, spec.out_vec)?])
}

/// The plan of one product on the FP8 path.
pub fn plan(
    w: &Fp4Weights,
    inp: &MatInputs<'_>,
    spec: &MatSpec,
    sh: &ShapeFacts,
    (k, knobs): (&MatKnobs, &Knobs),
) -> Result<Plan, OpError> {
    let mut c = resolve(spec, k, knobs)?;
    let (g, n, k) = (w.groups, w.n, w.k);
    // F8V=3: every row's scale bytes within 12 of its minimum and none NaN, else the F8V=2 kernel.
    let kb = k / BLOCK;
    let lo: Option<Vec<u8>> = if c.fold { fold_rows(&w.s, g * n, kb) } else { None };
    c.fold = lo.is_some();
    let epilogue = spec.epilogue.is_glu() || spec.row_scale;
    if c.first && !c.fold && (spec.grouped || epilogue || spec.packed) {
        return Err(invalid(
            knobs,
            format!(
                "MMA=fp8,F8V=4 on {} problems needs weight rows whose scale bytes span at most 12 and hold no NaN \
                 (the F8V=2 fallback is dense, natural-layout and without an epilogue only)",
                if spec.grouped {
                    "grouped"
                } else if epilogue {
                    "epilogue (GLU, p)"
                } else {
                    "packed-weight"
                }
            ),
        ));
    }
    if c.first && !c.fold {
        // F8V=4 falls back to the F8V=2 kernel at its ring depth (at most 4: its stages hold other tiles).
        c.first = false;
        c.persist = false;
        c.cross = false;
        c.turn = None;
        c.stages = c.stages.min(4);
    }
    let mut plan = Plan::default();
    let Act::Mxfp8(t) = inp.x else {
        return Err(OpError::Internal("MMA=fp8 resolved without MXFP8 activations".into()));
    };
    let m = t.rows;
    if m == 0 {
        plan.output("y", DType::Bf16, &[0, sh.n_out]);
        return Ok(plan);
    }
    // The weight words as bytes: natural, or (F8V >= 4) packed.
    let q = match &w.q {
        WeightBytes::Natural(q) => q.clone(),
        WeightBytes::Packed(p) if c.first => super::pack::words_to_bytes(p),
        _ => return Err(OpError::Internal("MMA=fp8 resolved with re-laid-out weights".into())),
    };
    let xq = plan.input("xq", HostTensor::from_bytes(DType::U32, &[m, k / 4], t.q.clone()));
    let xs = plan.input("xs", HostTensor::from_bytes(DType::U8, &[m, k / BLOCK], t.s.clone()));
    if let (true, Some(lo)) = (c.first, &lo) {
        // F8V=4: the first launch converts the weights (all groups' rows as one [G*N, K] matrix) and the
        // activation factors, then the GEMM.
        let rows = |last: usize| if spec.grouped { vec![g, n, last] } else { vec![n, last] };
        let wq = plan.input("wq", HostTensor::from_bytes(DType::U32, &rows(k / 8), q.clone()));
        let u: Vec<u8> = w.s.iter().enumerate().map(|(i, &s)| s - lo[i / kb]).collect();
        let ws = plan.input("ws", HostTensor::from_bytes(DType::U8, &rows(kb), u));
        let mp = m.next_multiple_of(4);
        let w8 = plan.scratch("w8", DType::U32, &rows(k / 4));
        let fa = plan.scratch("fa", DType::F32, &[kb, mp]);
        plan.step(first::build_convert(c.knobs(), spec.grouped, spec.packed)?, &[wq, ws, xs, w8, fa], &[]);
        let main = first::build_main(&c, spec)?;
        let mut args = vec![xq, fa, w8];
        if spec.grouped {
            let offs = inp.offs.ok_or_else(|| OpError::Internal("grouped MMA=fp8 without offs".into()))?;
            let offs: Vec<i64> = offs.iter().map(|&v| v as i64).collect();
            let offs = plan.input("offs", HostTensor::from_i64(DType::I32, &[g], &offs));
            args.push(plan.input("wl", HostTensor::from_bytes(DType::U8, &[g, n], lo.clone())));
            args.push(offs);
        } else {
            args.push(plan.input("wl", HostTensor::from_bytes(DType::U8, &[n], lo.clone())));
        }
        if spec.row_scale {
            let p = inp.p.ok_or_else(|| OpError::Internal("MMA=fp8 with a routing weight but no p".into()))?;
            args.push(plan.input("p", crate::data::tensor(DType::F32, &[m], p)));
        }
        args.push(plan.output("y", DType::Bf16, &[m, sh.n_out]));
        plan.step(main, &args, &[]);
        return Ok(plan);
    }
    let wq = plan.input("wq", HostTensor::from_bytes(DType::U32, &[n, k / 8], q.clone()));
    let main = kernel::build(&c, spec.kb_align, spec.out_vec)?;
    let y;
    if let Some(lo) = lo {
        let u: Vec<u8> = w.s.iter().enumerate().map(|(i, &s)| s - lo[i / kb]).collect();
        let ws = plan.input("ws", HostTensor::from_bytes(DType::U8, &[n, kb], u));
        y = plan.output("y", DType::Bf16, &[m, n]);
        let wl = plan.input("wl", HostTensor::from_bytes(DType::U8, &[n], lo));
        plan.step(main, &[xq, xs, wq, ws, y, wl], &[]);
    } else {
        let ws = plan.input("ws", HostTensor::from_bytes(DType::U8, &[n, kb], w.s.clone()));
        y = plan.output("y", DType::Bf16, &[m, n]);
        plan.step(main, &[xq, xs, wq, ws, y], &[]);
    }
    Ok(plan)
}

/// The rows' minimum scale bytes when every row of `s` (`[n, kb]`) spans at most 12 and holds no NaN (255).
fn fold_rows(s: &[u8], n: usize, kb: usize) -> Option<Vec<u8>> {
    (0..n)
        .map(|r| {
            let row = &s[r * kb..(r + 1) * kb];
            let (lo, hi) = (*row.iter().min()?, *row.iter().max()?);
            (hi != 255 && hi - lo <= 12).then_some(lo)
        })
        .collect()
}
