//! The knobs of the three kernels, declared once ([`HqKnobs`]): each knob's meaning, the tuning space, the
//! default record and what a record written before a knob existed means (`absent`); [`Cfg`] is what the kernel
//! builders read, derived from it and checked ([`cfg`]).

use super::*;
use crate::typed_knobs::{knob_enum, knob_set};

knob_enum! {
    /// `ASEL`: how the alpha kernel selects.
    pub enum AlphaSelect: str {
        /// Ranking in shared memory with block barriers.
        Rank = "rank",
        /// Warp shuffles (k < 32).
        Warp = "warp",
        /// Warp shuffles fed by a cp.async ring of token rows (k < 32).
        Ring = "ring",
        /// Warp shuffles with shared-atomic candidate slots (k < 32: one sort, no scan).
        Lean = "lean",
    }
}

knob_enum! {
    /// `MERGE`: how the histogram blocks flush.
    pub enum Merge: str {
        /// Plain stores of per-block partials.
        Partials = "partials",
        /// Global atomics.
        Atomic = "atomic",
    }
}

knob_enum! {
    /// `HLAYOUT`: the histograms' shared layout.
    pub enum HistLayout: str {
        /// Expert rows (bank conflicts).
        Rows = "rows",
        /// Word-major, the expert as the bank (conflict-free atomics, packed u16 partials).
        Banks = "banks",
    }
}

knob_enum! {
    /// `HBIN`: the banked histogram's bin rule.
    pub enum BinRule: str {
        /// Nested selects as written.
        Branch = "branch",
        /// The arithmetic computed unconditionally and two float selects.
        Select = "select",
    }
}

knob_enum! {
    /// `PPACK`: the banked partials' layout.
    pub enum PartialsPack: str {
        /// One u32 per slot.
        Wide = "wide",
        /// The packed u16 pairs.
        Packed = "packed",
    }
}

knob_set! {
    /// The knobs of `hist_quantile.qb` and `hist_quantile.column`, read from a record by [`HqKnobs::from_knobs`].
    ///
    /// The defaults are the H200's (132 SMs; lean alpha at 40 registers: 6 blocks of 8 warps per SM; 3 histogram
    /// blocks of 66 KiB per SM). `HFX` is left out: it then follows the bin count ([`auto_hfx`]); partials are
    /// written wide (`PPACK=wide`: the locate's u32 read measured 53 us at T262144 E896 B1024, the packed read
    /// 134 us, both with one dependent load per partial in flight per thread).
    pub struct HqKnobs for "hist_quantile" {
        /// `AW`: alpha warps per block.
        aw: u32 = "AW" => { axis: "alpha: warps per block (one token per warp)" [4, 8, 16], default: 8, },
        /// `ABPS`: alpha blocks per SM. 6 with ASEL=lean (40 registers), from the H200 (2026-12-01, same run, 200 ms
        /// windows): T262144 E896 B1024 step 0.5665 ms (alpha 0.239) against 0.5723 (alpha 0.316) for the warp
        /// select at ABPS=4; T65536 B4096 0.4871 against 0.5558.
        abps: u32 = "ABPS" => {
            axis: "alpha: resident blocks per SM of the persistent grid" [2, 3, 4, 5, 6, 8],
            default: 6,
        },
        /// `ASEL` (absent: `rank`): the alpha kernel's selection.
        asel: AlphaSelect = "ASEL" => {
            axis: "alpha: selection by ranking in shared memory with block barriers, warp shuffles (k < 32), warp \
             shuffles fed by a cp.async ring of token rows (k < 32), or warp shuffles with shared-atomic candidate \
             slots (k < 32: one sort, no scan)"
                [AlphaSelect::Rank, AlphaSelect::Warp, AlphaSelect::Ring, AlphaSelect::Lean],
            default: AlphaSelect::Lean,
            absent: AlphaSelect::Rank,
        },
        /// `ASTAGES` (absent: 3): row blocks in the ring alpha kernel's cp.async ring.
        astages: u32 = "ASTAGES" => {
            axis: "ring alpha: row blocks in the cp.async ring (ASTAGES - 1 in flight)" [2, 3, 4],
            absent: 3,
        },
        /// `LU` (absent: 1): partials per batch of independent loads in the locate merge. 1 from the H200
        /// (2026-12-01, same run, T262144 E896 B1024, step times with K3K_BENCH_STEPS=1): the batched partial
        /// loads (LU=8) made the locate slower, 0.069 ms against 0.053 at LU=1.
        lu: u32 = "LU" => {
            axis: "locate: partial histograms summed per batch of independent loads (1: one load per iteration)"
                [1, 4, 8],
            default: 1,
            absent: 1,
        },
        /// `HT`: histogram threads per block.
        ht: u32 = "HT" => { axis: "histogram: threads per block" [256, 512, 1024], default: 512, },
        /// `HU`: token rows each histogram thread loads ahead of its atomics.
        hu: u32 = "HU" => { axis: "histogram: token rows each thread loads ahead of its atomics" [4, 8], default: 8, },
        /// `HKB`: the histogram block's shared-memory budget in KiB.
        hkb: u32 = "HKB" => {
            axis: "histogram: shared-memory budget per block in KiB (sets experts per block)" [33, 66, 100, 132],
            default: 66,
        },
        /// `HBLOCKS`: blocks the token chunks are spread over.
        hblocks: u32 = "HBLOCKS" => {
            axis: "histogram: blocks to spread the token chunks over (~ SMs x resident blocks)" [264, 396, 528, 792],
            default: 396,
        },
        /// `MERGE`: partials stay the default: atomic won by 1.5% at B1024 (0.729 vs 0.740 ms, within the spread)
        /// but ran 0.705 ms at T65536 B4096 against 0.467 for partials (2026-12-01); the tuner picks atomic per
        /// bucket where it wins.
        merge: Merge = "MERGE" => {
            axis: "histogram flush: plain stores of per-block partials, or global atomics" [Merge::Partials, Merge::Atomic],
            default: Merge::Partials,
        },
        /// `HLAYOUT` (absent: `rows`): the histograms' shared layout.
        layout: HistLayout = "HLAYOUT" => {
            axis: "histogram shared layout: expert rows (bank conflicts), or word-major with the expert as the bank \
             (conflict-free atomics, packed u16 partials)"
                [HistLayout::Rows, HistLayout::Banks],
            default: HistLayout::Banks,
            absent: HistLayout::Rows,
        },
        /// `HFX` (absent: [`auto_hfx`] of the bin count): experts per warp store in the banked flush.
        hfx: Option<u32> = "HFX" => {
            axis: "banked histogram flush: experts per warp store (32: conflict-free shared reads, scattered 4-byte \
             stores; fewer: runs of 32/HFX consecutive words per expert, (32/HFX)-way bank conflicts)"
                [Some(4), Some(8), Some(32)],
            absent: None,
        },
        /// `HBIN` (absent: `branch`): the banked histogram's bin rule.
        hbin: BinRule = "HBIN" => {
            axis: "banked histogram bin rule: nested selects as written (ptxas branches around the bin arithmetic), or \
             the arithmetic computed unconditionally and two float selects (no branch per element)"
                [BinRule::Branch, BinRule::Select],
            absent: BinRule::Branch,
        },
        /// `ATPW` (absent: 1): tokens per warp and step of the warp alpha kernel.
        atpw: u32 = "ATPW" => {
            axis: "warp alpha: tokens per warp and step (their loads and shuffle chains overlap)" [1, 2],
            absent: 1,
        },
        /// `PPACK` (absent: `packed`): the banked partials' layout.
        ppack: PartialsPack = "PPACK" => {
            axis: "banked partials: u32 per slot as the expert-row layout writes them (the locate read measured fastest), \
             or the packed u16 pairs (half the bytes)"
                [PartialsPack::Wide, PartialsPack::Packed],
            default: PartialsPack::Wide,
            absent: PartialsPack::Packed,
        },
    }
}

/// The tuning knobs and their meaning.
pub fn knob_space() -> KnobSpace {
    HqKnobs::space()
}

/// The knobs used when no tuning record exists (see [`HqKnobs`]).
pub fn default_knobs() -> Knobs {
    HqKnobs::defaults()
}

/// The banked flush's `HFX` when the knob is absent (H200, 2026-11-30): 8 at B1024 (histogram pass 0.365 ms
/// vs 0.455 with 32), 32 at B4096 (QB step 0.413 ms vs 0.656 with 8).
pub fn auto_hfx(bins: usize) -> u32 {
    if bins >= 2048 { 32 } else { 8 }
}

/// Knob values read and checked.
#[derive(Clone, Debug)]
pub struct Cfg {
    pub aw: u32,
    pub abps: u32,
    pub ht: u32,
    pub hu: u32,
    pub hkb: u32,
    pub hblocks: u32,
    pub atomic: bool,
    /// `HLAYOUT=banks`: word-major shared histograms (expert = bank) and packed partials.
    pub banked: bool,
    /// `ASEL=warp`: the warp-shuffle alpha kernel where `k < 32`.
    pub warp_alpha: bool,
    /// `HFX`: experts per warp store in the banked flush (`None`: [`auto_hfx`] of the bin count).
    pub hfx: Option<u32>,
    /// `PPACK=packed`: banked partials as packed u16 pairs (else one u32 per slot).
    pub ppack: bool,
    /// `ATPW`: tokens per warp and step of the warp alpha kernel.
    pub atpw: u32,
    /// `ASEL=ring`: the ring-fed warp alpha kernel where `k < 32`.
    pub ring_alpha: bool,
    /// `ASEL=lean`: the warp alpha kernel with shared-atomic candidate slots where `k < 32`.
    pub lean_alpha: bool,
    /// `ASTAGES`: row blocks in the ring alpha kernel's cp.async ring.
    pub astages: u32,
    /// `LU`: partials per batch of independent loads in the locate merge.
    pub lu: u32,
    /// `HBIN=select`: the banked histogram's branch-free bin rule (`slot_select`).
    pub bin_select: bool,
}

impl Cfg {
    /// The banked flush's experts per warp store for `bins` bins.
    pub fn fx(&self, bins: usize) -> u32 {
        self.hfx.unwrap_or_else(|| auto_hfx(bins))
    }
    /// Whether the histogram partials are packed u16 pairs (banked layout, partials merge, `PPACK=packed`).
    pub fn packed_partials(&self) -> bool {
        self.banked && !self.atomic && self.ppack
    }
}

/// Read and check the knobs.
pub fn cfg(k: &Knobs) -> Result<Cfg, OpError> {
    let t = HqKnobs::from_knobs(k)?;
    let c = Cfg {
        aw: t.aw,
        abps: t.abps,
        ht: t.ht,
        hu: t.hu,
        hkb: t.hkb,
        hblocks: t.hblocks,
        atomic: t.merge == Merge::Atomic,
        banked: t.layout == HistLayout::Banks,
        warp_alpha: t.asel == AlphaSelect::Warp,
        hfx: t.hfx,
        ppack: t.ppack == PartialsPack::Packed,
        atpw: t.atpw,
        ring_alpha: t.asel == AlphaSelect::Ring,
        lean_alpha: t.asel == AlphaSelect::Lean,
        astages: t.astages,
        lu: t.lu,
        bin_select: t.hbin == BinRule::Select,
    };
    let invalid = |why: String| Err(OpError::InvalidKnobs { op: "hist_quantile", knobs: k.to_string(), why });
    if let Some(fx) = c.hfx
        && !(fx.is_power_of_two() && fx <= 32)
    {
        return invalid(format!("HFX={fx} must be a power of two in 1..=32"));
    }
    if !(1..=4).contains(&c.atpw) {
        return invalid(format!("ATPW={} must be in 1..=4", c.atpw));
    }
    if !(2..=8).contains(&c.astages) {
        return invalid(format!("ASTAGES={} must be in 2..=8", c.astages));
    }
    if !(1..=16).contains(&c.lu) {
        return invalid(format!("LU={} must be in 1..=16", c.lu));
    }
    if c.aw == 0 || c.aw > 32 {
        return invalid(format!("AW={} must be in 1..=32", c.aw));
    }
    if c.ht < 64 || c.ht > 1024 || !c.ht.is_power_of_two() {
        return invalid(format!("HT={} must be a power of two in 64..=1024", c.ht));
    }
    if c.hu == 0 || c.hu > 16 || c.abps == 0 || c.hblocks == 0 {
        return invalid("HU in 1..=16, ABPS >= 1 and HBLOCKS >= 1 are required".into());
    }
    if c.ht * c.hu > 4096 {
        return invalid(format!(
            "HT x HU = {} > 4096: the unrolled slots of 1024 threads must fit 64 registers",
            c.ht * c.hu
        ));
    }
    if c.hkb == 0 || c.hkb as usize * 1024 > MAX_SHARED_BYTES {
        return invalid(format!("HKB={} KiB exceeds the shared memory of a block", c.hkb));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_from_before_the_optional_knobs_reads_with_their_legacy_meanings() {
        let old = Knobs::new()
            .with("AW", 8i64)
            .with("ABPS", 4i64)
            .with("HT", 256i64)
            .with("HU", 4i64)
            .with("HKB", 33i64)
            .with("HBLOCKS", 264i64)
            .with("MERGE", "atomic");
        let c = cfg(&old).unwrap();
        assert!(c.atomic && !c.banked && !c.warp_alpha && !c.ring_alpha && !c.lean_alpha && !c.bin_select);
        assert!(c.ppack && c.hfx.is_none());
        assert_eq!((c.atpw, c.astages, c.lu, c.fx(1024), c.fx(4096)), (1, 3, 1, 8, 32));
        assert!(matches!(cfg(&old.clone().with("MERGE", "none")), Err(OpError::InvalidKnobs { .. })));
        let mut no_merge = old;
        no_merge.0.remove("MERGE");
        assert!(matches!(cfg(&no_merge), Err(OpError::Knob(KnobError::Missing { .. }))));
    }

    #[test]
    fn the_defaults_are_in_the_space_and_words_outside_it_are_named() {
        let c = cfg(&default_knobs()).unwrap();
        assert!(c.lean_alpha && c.banked && !c.atomic && !c.ppack && !c.bin_select && c.hfx.is_none());
        assert_eq!((c.aw, c.abps, c.ht, c.hu, c.hkb, c.hblocks, c.lu), (8, 6, 512, 8, 66, 396, 1));
        let space = knob_space();
        let names: Vec<&str> = space.axes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, HqKnobs::NAMES);
        let e = cfg(&default_knobs().with("ASEL", "fast")).unwrap_err().to_string();
        assert!(e.ends_with("ASEL must be rank, warp, ring or lean, got fast"), "{e}");
        let e = cfg(&default_knobs().with("HFX", 12i64)).unwrap_err().to_string();
        assert!(e.ends_with("HFX=12 must be a power of two in 1..=32"), "{e}");
    }
}
