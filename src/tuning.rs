//! Tuning glue between the operators and the backend-agnostic `k3k-tuner`: tuning keys, candidate planning
//! (prune, then compile every survivor in parallel), and looking tuned knobs up for a problem.

use k3k_codegen::{BuildOptions, CODEGEN_VERSION, build, toolchain};
use k3k_ir::Knobs;
use k3k_ops::op::{Operator, Preset};
use k3k_tuner::{BucketPolicy, CandidateSpec, GpuKey, ResultsStore, ShapeBucket, TuneKey};
use rayon::prelude::*;

/// The tuning key of an operator's preset on a GPU. The `ir_hash` is the stable hash of the kernels the
/// operator builds for this problem at its default knobs, so results go stale when the program changes.
pub fn tune_key(op: &dyn Operator, preset: &Preset, gpu: &GpuKey) -> anyhow::Result<TuneKey> {
    let kernels = op.kernels(preset, &op.default_knobs())?;
    let joined: String = kernels.iter().map(k3k_ir::stable_hash).collect::<Vec<_>>().join(",");
    let dims = op.bucket_dims(preset);
    let dims_ref: Vec<(&str, u64)> = dims.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    Ok(TuneKey {
        op: op.name().into(),
        ir_hash: k3k_ir::hash::hash_str(&joined),
        codegen_version: CODEGEN_VERSION,
        nvrtc_version: toolchain::nvrtc_version().unwrap_or_else(|_| "none".into()),
        gpu_name: gpu.name.clone(),
        compute_capability: gpu.compute_capability,
        sm_count: gpu.sm_count,
        dtype: "bf16".into(),
        shape_bucket: ShapeBucket::bucket(&dims_ref, BucketPolicy::default()),
        alignment: kernels.first().map(|k| alignment_class(&k.name)).unwrap_or_default(),
    })
}

/// The alignment class a kernel name carries (`in8_out8`), or `any`.
fn alignment_class(name: &str) -> String {
    name.split('_')
        .find(|p| p.starts_with("in") && p.contains("out"))
        .map(str::to_string)
        .unwrap_or_else(|| "any".into())
}

/// Knobs as the results store keeps them.
pub fn knob_map(k: &Knobs) -> k3k_tuner::record::KnobMap {
    match serde_json::to_value(k) {
        Ok(serde_json::Value::Object(m)) => m.into_iter().collect(),
        _ => Default::default(),
    }
}

/// Knobs back from the store.
pub fn knobs_of(m: &k3k_tuner::record::KnobMap) -> anyhow::Result<Knobs> {
    Ok(serde_json::from_value(serde_json::Value::Object(m.clone().into_iter().collect()))?)
}

/// The candidates dropped before timing: how many, and how many for each reason (the first
/// [`PRUNE_REASONS`] distinct reasons; later ones count under `other`). Counted, not stored: a space of millions of
/// points pruned for one shape costs no memory.
#[derive(Debug, Clone, Default)]
pub struct Pruned {
    count: usize,
    reasons: std::collections::BTreeMap<String, usize>,
}

/// Distinct prune reasons [`Pruned`] keeps.
pub const PRUNE_REASONS: usize = 32;

impl Pruned {
    fn add(&mut self, why: String) {
        self.count += 1;
        let key =
            if self.reasons.len() < PRUNE_REASONS || self.reasons.contains_key(&why) { why } else { "other".into() };
        *self.reasons.entry(key).or_default() += 1;
    }
    /// Candidates pruned.
    pub fn len(&self) -> usize {
        self.count
    }
    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// (reason, count), by reason.
    pub fn reasons(&self) -> impl Iterator<Item = (&str, usize)> {
        self.reasons.iter().map(|(r, n)| (r.as_str(), *n))
    }
}

/// The first round of a tune: a sample of the knob space. Every candidate's kernels must build for the preset
/// and, with `compile` (and when ptxas is available), assemble without spills, compiled in parallel so the
/// worker finds them in the module cache (`compile: false` is for the CPU interpreter backend and for
/// `k3k tune --plan`). The default knobs come first, then `seeds` (see [`stale_winners`]); at most `max`
/// candidates are kept (the rest of the space in a stable hash order, i.e. a fixed pseudo-random sample).
pub fn plan_candidates(
    op: &dyn Operator,
    preset: &Preset,
    max: usize,
    compile: bool,
    seeds: &[Knobs],
) -> (Vec<CandidateSpec>, Pruned) {
    let default = op.default_knobs();
    let space = op.knob_space();
    let rest: Box<dyn Iterator<Item = Knobs>> = if space.size() <= SMALL_SPACE {
        let mut points = space.points();
        points.sort_by_cached_key(|k| k3k_ir::hash::hash_str(&k.to_string()));
        Box::new(points.into_iter())
    } else {
        // The MXFP4 space has ~1.9 M points: materializing and sorting them cost gigabytes and minutes per preset.
        Box::new(space.shuffled(u64::from_str_radix(&k3k_ir::hash::hash_str(op.name()), 16).unwrap_or(0x006b_336b)))
    };
    let mut first = vec![default];
    for s in seeds {
        if !first.contains(s) {
            first.push(s.clone());
        }
    }
    let taken = first.clone();
    plan_points(op, preset, first.into_iter().chain(rest.filter(move |k| !taken.contains(k))), max, compile)
}

/// The winners stored for the same problem under keys that no longer apply (an older codegen version or
/// operator program, another alignment class: same operator, GPU, dtype and shape bucket), newest first, at most
/// `max`, each once. A tune after a codegen bump times them right after the defaults, so a winner its sample would
/// rarely draw again is measured at once (the short v9 tune of 2026-12-04 missed mxfp4's 28 x 4 gemv point that
/// the tunes of 2026-12-01 to 2026-12-02 had found, 0.139 against 0.190 ms). Points that no longer build are pruned like any other.
pub fn stale_winners(store: &ResultsStore, op: &dyn Operator, preset: &Preset, gpu: &GpuKey, max: usize) -> Vec<Knobs> {
    let Ok(key) = tune_key(op, preset, gpu) else { return vec![] };
    let Ok(Some(file)) = store.load(&gpu.slug(), op.name()) else { return vec![] };
    let mut stale: Vec<_> = file.entries.iter().filter(|e| e.key != key && e.key.same_problem(&key)).collect();
    stale.sort_by(|a, b| b.date.cmp(&a.date));
    let mut out: Vec<Knobs> = vec![];
    for e in stale {
        let Some(w) = e.winner.as_deref().and_then(|id| e.candidate(id)) else { continue };
        if let Ok(k) = knobs_of(&w.knobs)
            && !out.contains(&k)
        {
            out.push(k);
        }
        if out.len() >= max {
            break;
        }
    }
    out
}

/// Spaces up to this many points are enumerated and ordered by the hash of each point; larger ones are walked
/// lazily in a seeded pseudo-random order ([`k3k_ir::KnobSpace::shuffled`]).
const SMALL_SPACE: usize = 1 << 16;

/// The second round of a tune: the points one knob away from `leader` (each axis of the space set to each of
/// its other values), minus those in `done`, in a stable hash order, planned like [`plan_candidates`]. A
/// sampled space rarely holds the best point; its neighbourhood often does (a coordinate step of a local
/// search, as Ansor / TVM's evolutionary search and Triton's "prune then refine" users do by hand).
///
/// When the leader stands for other knobs (an operator's defaults that resolve per shape, e.g.
/// `gated_mla.decode`'s, which build the wgmma kernel's knobs from 64 rows: [`crate::bench::kernel_knobs`]), the
/// neighbourhood is taken around the knobs the kernels are built with: one knob away from the literal defaults
/// would be the 16-row mma.sync family, not the kernel that won.
pub fn plan_neighbours(
    op: &dyn Operator,
    preset: &Preset,
    leader: &Knobs,
    done: &std::collections::HashSet<String>,
    max: usize,
    compile: bool,
) -> (Vec<CandidateSpec>, Pruned) {
    let centre = crate::bench::kernel_knobs(op, preset, leader).unwrap_or_else(|| leader.clone());
    let mut points = neighbours(&op.knob_space(), &centre);
    points.retain(|k| !done.contains(&CandidateSpec::from_knobs(knob_map(k)).id));
    points.sort_by_cached_key(|k| k3k_ir::hash::hash_str(&k.to_string()));
    plan_points(op, preset, points.into_iter(), max, compile)
}

/// The points of a space that differ from `k` in exactly one axis.
pub fn neighbours(space: &k3k_ir::KnobSpace, k: &Knobs) -> Vec<Knobs> {
    let mut out = vec![];
    for axis in &space.axes {
        for v in &axis.values {
            if k.0.get(&axis.name) != Some(v) {
                let mut n = k.clone();
                n.0.insert(axis.name.clone(), v.clone());
                out.push(n);
            }
        }
    }
    out
}

/// Compile one candidate's kernels for a preset (NVRTC, and ptxas when found); `Err` when one fails or spills more
/// than the operator's measured allowance (`Operator::known_spill_bytes`), or when ptxas serialized its `wgmma`
/// products (each waits for the previous: the pipeline the program asks for is gone, and timing it is wasted). The
/// operator's default knobs are never refused: they are the baseline every tuned time is compared with and what
/// runs without a record, so they are measured as they are (the tune of 2026-12-04 dropped kda's spilling default and
/// stored slower winners).
pub fn compile_candidate(op: &dyn Operator, preset: &Preset, k: &Knobs) -> Result<CompileStats, String> {
    let allow_spills = *k == op.default_knobs();
    let assemble = toolchain::find_ptxas().is_ok();
    let ks = op.kernels(preset, k).map_err(|e| e.to_string())?;
    let mut stats = CompileStats::default();
    for kern in &ks {
        let m = build(kern, BuildOptions { assemble }).map_err(|e| e.to_string())?;
        let known = op.known_spill_bytes(kern);
        if let Some(r) = &m.resources
            && !allow_spills
        {
            if r.spills_over(known) {
                return Err(format!("{} spills ({:?})", kern.name, r));
            }
            if r.wgmma_serialized {
                return Err(format!("{}: ptxas serialized its wgmma products", kern.name));
            }
        }
        stats.kernels += 1;
        stats.cached += usize::from(m.cached);
    }
    Ok(stats)
}

/// What [`compile_candidate`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileStats {
    pub kernels: usize,
    /// Of which came out of the module cache.
    pub cached: usize,
}

/// The most points of a space [`plan_points`] looks at for one preset: past them, a space where almost nothing
/// builds for the shape is not walked to its end (the MXFP4 space has ~1.9 M points).
const MAX_LOOKED: usize = 1 << 18;

/// Keep the points (in order) whose kernels build for the preset and (with `compile`) assemble without spills (the
/// defaults also with them, see [`compile_candidate`]), at most `max`. The structural check (the operator's own validation, no compile) runs lazily in order, so a
/// large space costs only the points looked at; each wave compiles just the survivors still missing, in
/// parallel.
fn plan_points(
    op: &dyn Operator,
    preset: &Preset,
    points: impl Iterator<Item = Knobs>,
    max: usize,
    compile: bool,
) -> (Vec<CandidateSpec>, Pruned) {
    let mut keep = vec![];
    let mut pruned = Pruned::default();
    // A shape the operator refuses builds no point: one reason, not one per point of the space.
    if let Err(e) = op.check_dims(preset) {
        pruned.add(e.to_string());
        return (keep, pruned);
    }
    let mut rest = points.take(MAX_LOOKED);
    while keep.len() < max {
        let need = max - keep.len();
        let mut group = vec![];
        for k in rest.by_ref() {
            match op.kernels(preset, &k) {
                Ok(_) => group.push(k),
                Err(e) => pruned.add(e.to_string()),
            }
            if group.len() >= need {
                break;
            }
        }
        if group.is_empty() {
            break;
        }
        let results: Vec<(Knobs, Result<(), String>)> = if compile {
            group
                .into_par_iter()
                .map(|k| {
                    let r = compile_candidate(op, preset, &k).map(|_| ());
                    (k, r)
                })
                .collect()
        } else {
            group.into_iter().map(|k| (k, Ok(()))).collect()
        };
        for (k, r) in results {
            match r {
                Ok(()) => keep.push(CandidateSpec::from_knobs(knob_map(&k))),
                Err(why) => pruned.add(why),
            }
        }
    }
    (keep, pruned)
}

/// The knobs to use for a preset: the tuned winner for this GPU when the store has one (exact bucket, else
/// the nearest bucket of the same program), else the operator's defaults.
pub fn tuned_knobs(store: &ResultsStore, op: &dyn Operator, preset: &Preset, gpu: &GpuKey) -> (Knobs, String) {
    tuned_record(store, op, preset, gpu).unwrap_or_else(|| (op.default_knobs(), "default knobs".to_string()))
}

/// The tuned winner's knobs for a preset and how they were found (exact bucket, else the nearest bucket of the
/// same program), or `None` when the store holds no record that applies.
pub fn tuned_record(store: &ResultsStore, op: &dyn Operator, preset: &Preset, gpu: &GpuKey) -> Option<(Knobs, String)> {
    let key = tune_key(op, preset, gpu).ok()?;
    let hit = match store.lookup(&key) {
        Ok(h) => h?,
        // A corrupt file was moved aside and warned about by the store; anything else is said here, never dropped.
        Err(k3k_tuner::StoreError::Corrupt { moved_to: Some(_), .. }) => return None,
        Err(e) => {
            eprintln!("warning: {e}; using default knobs");
            return None;
        }
    };
    let k = knobs_of(&hit.knobs).ok()?;
    Some((k, format!("tuned ({}{})", hit.candidate_id, if hit.exact { "" } else { ", nearest bucket" })))
}

#[cfg(test)]
mod neighbour_tests {
    use super::neighbours;
    use k3k_ir::{KnobSpace, Knobs};

    #[test]
    fn neighbours_differ_from_the_leader_in_exactly_one_axis() {
        let space = KnobSpace::default().axis("A", "", [1i64, 2, 3]).axis("B", "", ["x", "y"]);
        let leader = Knobs::new().with("A", 1i64).with("B", "x");
        let n = neighbours(&space, &leader);
        let ids: Vec<String> = n.iter().map(|k| k.to_string()).collect();
        assert_eq!(ids, ["A=2,B=x", "A=3,B=x", "A=1,B=y"]);
        for k in &n {
            let differing = k.0.iter().filter(|(name, v)| leader.0.get(*name) != Some(*v)).count();
            assert_eq!(differing, 1, "{k}");
        }
    }
}

#[cfg(test)]
mod centre_tests {
    use super::plan_neighbours;
    use k3k_ops::gated_mla::decode_knobs_for_rows;
    use k3k_ops::gated_mla::ops::GatedMlaDecode;
    use k3k_ops::op::Operator;

    /// The decode's defaults resolve to the wgmma knobs from 64 rows: round 2 explores around those (e.g. the other
    /// score and ring forms, one knob away), not around the 16-row mma.sync defaults.
    #[test]
    fn neighbours_of_resolving_defaults_are_taken_around_the_built_knobs() {
        let op = GatedMlaDecode;
        let h96 = op.bench_presets().into_iter().find(|p| p.name.contains("H96")).unwrap();
        let (near, _) = plan_neighbours(&op, &h96, &op.default_knobs(), &Default::default(), 200, false);
        let auto = decode_knobs_for_rows(96);
        assert!(!near.is_empty());
        for c in &near {
            let k = super::knobs_of(&c.knobs).unwrap();
            let differing = auto.0.iter().filter(|(name, v)| k.0.get(*name) != Some(*v)).count()
                + k.0.keys().filter(|name| !auto.0.contains_key(*name)).count();
            assert_eq!(differing, 1, "{k} is one knob away from {auto}");
        }
        let has = |name: &str, v: &str| {
            near.iter().any(|c| super::knobs_of(&c.knobs).unwrap().0.get(name).is_some_and(|x| x.to_string() == v))
        };
        // The built knobs' own alternatives one knob away (the automatic knobs share the scores and fill the ring
        // by TMA since 2026-12-05): replicated scores and the cp.async ring.
        assert!(auto.0.get("SCORES").is_some_and(|v| v.to_string() == "shared"));
        assert!(has("SCORES", "replicated") && has("LOAD", "cp_async"), "the other score and ring forms are explored");
    }
}

#[cfg(test)]
mod spill_tests {
    use super::compile_candidate;
    use k3k_ops::op::{Operator, Preset};

    /// kda's default intra kernel spills 16 bytes by design (its measured allowance): the tuner keeps it, both as
    /// the default (the baseline is never refused) and as a kernel within its operator's allowance; the same
    /// kernels at the other G~ swizzle spill nothing and compile too.
    #[test]
    fn a_default_within_its_spill_allowance_is_kept() {
        let op = k3k_ops::kda::Kda;
        let p = Preset::new("t", &[("B", 1), ("T", 256), ("H", 2), ("K", 128), ("V", 128), ("safe", 1)]);
        let d = op.default_knobs();
        let spills_somewhere = op.kernels(&p, &d).unwrap().iter().any(|k| op.known_spill_bytes(k) > 0);
        assert!(spills_somewhere, "the default plain intra kernel carries the measured allowance");
        compile_candidate(&op, &p, &d).expect("the default is compiled and kept");
        compile_candidate(&op, &p, &d.clone().with(k3k_ops::kda::GSWZ_KNOB, "rows")).expect("rows: no spills");
    }
}

#[cfg(test)]
mod seed_tests {
    use super::{knob_map, knobs_of, plan_candidates, stale_winners, tune_key};
    use k3k_ops::latent_moe_gemm::{LatentMoeGemm, sync_knobs};
    use k3k_ops::op::{Operator, Preset};
    use k3k_tuner::record::{CandidateResult, CheckRecord, Outcome, TuneEntry};
    use k3k_tuner::stats::TimingStats;
    use k3k_tuner::{GpuKey, ResultsStore};

    /// A winner recorded under an older codegen version for the same problem is timed right after the defaults
    /// of a new tune; the record of the current key itself is no seed, nor a problem of another shape bucket.
    #[test]
    fn stale_winners_are_tuned_right_after_the_defaults() {
        let op = LatentMoeGemm;
        let p = Preset::new("t", &[("G", 4), ("mean", 32), ("K", 256), ("N", 512)]);
        let other = Preset::new("t", &[("G", 4), ("mean", 2048), ("K", 256), ("N", 512)]);
        let gpu = GpuKey::new("cpu-interp", (0, 0), 1);
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        let entry = |preset: &Preset, codegen: u32, winner: &k3k_ir::Knobs| {
            let mut key = tune_key(&op, preset, &gpu).unwrap();
            key.codegen_version = codegen;
            let mut e = TuneEntry::new(key);
            let t = TimingStats { median_ms: 1.0, p20_ms: 1.0, p80_ms: 1.0, min_ms: 1.0, samples: 10 };
            let mut c = CandidateResult::new(winner.to_string(), knob_map(winner), Outcome::Timed(t));
            c.check = Some(CheckRecord { max_rel_err: 1e-3, passed: true });
            e.upsert_candidate(c);
            e
        };
        let old = sync_knobs();
        let current = op.default_knobs().with("STAGES", 3i64);
        let other_bucket = op.default_knobs().with("BM", 64i64);
        for e in [
            entry(&p, k3k_codegen::CODEGEN_VERSION - 1, &old),
            entry(&p, k3k_codegen::CODEGEN_VERSION, &current),
            entry(&other, k3k_codegen::CODEGEN_VERSION - 1, &other_bucket),
        ] {
            store.record_candidate(&e.key, e.candidates[0].clone()).unwrap();
            store.record_check(&e.key, &e.candidates[0].id, e.candidates[0].check.unwrap()).unwrap();
        }
        let seeds = stale_winners(&store, &op, &p, &gpu, 3);
        assert_eq!(seeds, vec![old.clone()]);
        let (cands, _) = plan_candidates(&op, &p, 3, false, &seeds);
        let first: Vec<_> = cands.iter().map(|c| knobs_of(&c.knobs).unwrap()).collect();
        assert_eq!(first[0], op.default_knobs());
        assert_eq!(first[1], old);
        assert_eq!(cands.len(), 3);
    }
}
