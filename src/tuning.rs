//! Tuning glue between the operators and the backend-agnostic `k3k-tuner`: tuning keys, candidate planning
//! (prune, then compile every survivor in parallel), and looking tuned knobs up for a problem.

use k3k_codegen::{BuildOptions, CODEGEN_VERSION, build, toolchain};
use k3k_ir::Knobs;
use k3k_ops::op::{Operator, Preset};
use k3k_tuner::cost::{KernelShape, SmLimits, candidate_cost};
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
    /// Add another's counts.
    pub fn merge(&mut self, other: Pruned) {
        self.count += other.count;
        for (why, n) in other.reasons {
            let key = if self.reasons.len() < PRUNE_REASONS || self.reasons.contains_key(&why) {
                why
            } else {
                "other".into()
            };
            *self.reasons.entry(key).or_default() += n;
        }
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
    let mut first = vec![op.default_knobs()];
    for s in seeds {
        if !first.contains(s) {
            first.push(s.clone());
        }
    }
    let taken = first.clone();
    let space = op.knob_space();
    plan_points(
        op,
        preset,
        first.into_iter().chain(space_sample(op, &space).filter(move |k| !taken.contains(k))),
        max,
        compile,
    )
}

/// The points of an operator's knob space in a fixed pseudo-random order: spaces up to [`SMALL_SPACE`] points
/// enumerated and ordered by the hash of each point, larger ones walked lazily in a seeded order.
fn space_sample<'s>(op: &dyn Operator, space: &'s k3k_ir::KnobSpace) -> Box<dyn Iterator<Item = Knobs> + 's> {
    if space.size() <= SMALL_SPACE {
        let mut points = space.points();
        points.sort_by_cached_key(|k| k3k_ir::hash::hash_str(&k.to_string()));
        Box::new(points.into_iter())
    } else {
        // The MXFP4 space has ~1.9 M points: materializing and sorting them cost gigabytes and minutes per preset.
        Box::new(space.shuffled(u64::from_str_radix(&k3k_ir::hash::hash_str(op.name()), 16).unwrap_or(0x006b_336b)))
    }
}

/// Round 1 of a tune over many presets (`k3k tune`, [`k3k_tuner::search`]): the defaults, then `seeds` (the
/// best guesses known before timing: winners of stale records and of other GPUs), then, up to `n`, the points of
/// a sample of the space that the cost model ([`k3k_tuner::cost`]) ranks best. Every point kept builds for the
/// preset and (with `compile`) compiles without spills, like [`plan_candidates`].
pub fn plan_first(
    op: &dyn Operator,
    preset: &Preset,
    n: usize,
    compile: bool,
    seeds: &[Knobs],
    limits: &SmLimits,
) -> (Vec<CandidateSpec>, Pruned) {
    let mut fixed = vec![op.default_knobs()];
    for s in seeds {
        if !fixed.contains(s) {
            fixed.push(s.clone());
        }
    }
    fixed.truncate(n.max(1));
    let taken = fixed.clone();
    let space = op.knob_space();
    let rest = space_sample(op, &space).filter(move |k| !taken.contains(k));
    plan_ranked(op, preset, fixed, rest, n, compile, limits)
}

/// Round 2 of a tune over many presets: `hints` (the winners of the run's other presets of the same operator)
/// first, then the points one knob away from `leader` (see [`plan_neighbours`] for the knobs it is taken around)
/// and a sample of the space, ranked by the cost model; none of them in `done` (ids), at most `n`.
#[allow(clippy::too_many_arguments)]
pub fn plan_more(
    op: &dyn Operator,
    preset: &Preset,
    leader: Option<&Knobs>,
    hints: &[Knobs],
    done: &std::collections::HashSet<String>,
    n: usize,
    compile: bool,
    limits: &SmLimits,
) -> (Vec<CandidateSpec>, Pruned) {
    let id = |k: &Knobs| CandidateSpec::from_knobs(knob_map(k)).id;
    let mut fixed: Vec<Knobs> = vec![];
    for h in hints {
        if !done.contains(&id(h)) && !fixed.contains(h) {
            fixed.push(h.clone());
        }
    }
    fixed.truncate(n);
    let space = op.knob_space();
    let mut near = match leader {
        Some(l) => neighbours(&space, &crate::bench::kernel_knobs(op, preset, l).unwrap_or_else(|| l.clone())),
        None => vec![],
    };
    near.sort_by_cached_key(|k| k3k_ir::hash::hash_str(&k.to_string()));
    let taken: std::collections::HashSet<String> = done.iter().cloned().chain(fixed.iter().map(id)).collect();
    let mut seen = taken.clone();
    let rest = near.into_iter().chain(space_sample(op, &space)).filter(move |k| seen.insert(id(k)));
    plan_ranked(op, preset, fixed, rest, n, compile, limits)
}

/// `fixed` in order (those that build), then up to `n` in all from `pool`: half as many again as needed are
/// planned from it and the ones the cost model ranks best kept (ties in pool order).
fn plan_ranked(
    op: &dyn Operator,
    preset: &Preset,
    fixed: Vec<Knobs>,
    pool: impl Iterator<Item = Knobs>,
    n: usize,
    compile: bool,
    limits: &SmLimits,
) -> (Vec<CandidateSpec>, Pruned) {
    let nf = fixed.len();
    let (first, mut pruned) = plan_points_costed(op, preset, fixed.into_iter(), nf, compile, limits);
    let mut keep: Vec<CandidateSpec> = first.into_iter().map(|(c, _)| c).collect();
    let need = n.saturating_sub(keep.len());
    if need > 0 {
        let (mut more, p2) = plan_points_costed(op, preset, pool, need + need.div_ceil(2), compile, limits);
        k3k_tuner::cost::order_by_cost(&mut more);
        keep.extend(more.into_iter().filter(|(_, c)| c.is_finite()).take(need).map(|(c, _)| c));
        pruned.merge(p2);
    }
    (keep, pruned)
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

/// The winners that other GPUs' records hold for the same problem (same operator, dtype and shape bucket; any
/// codegen version), newest first, each once, at most `max`: a new GPU starts from what won elsewhere. Read from
/// the sibling folders of `store` (`results/<other-gpu>/<op>.json`); points that no longer build are pruned like
/// any other.
pub fn other_gpu_winners(
    store: &ResultsStore,
    op: &dyn Operator,
    preset: &Preset,
    gpu: &GpuKey,
    max: usize,
) -> Vec<Knobs> {
    let Ok(key) = tune_key(op, preset, gpu) else { return vec![] };
    let Ok(dirs) = std::fs::read_dir(store.root()) else { return vec![] };
    let mut slugs: Vec<String> = dirs
        .filter_map(|d| d.ok())
        .filter(|d| d.path().is_dir())
        .filter_map(|d| d.file_name().into_string().ok())
        .filter(|s| *s != gpu.slug() && s != "bench" && s != "cpu-interp")
        .collect();
    slugs.sort();
    let mut found: Vec<(String, Knobs)> = vec![];
    for slug in slugs {
        let Ok(Some(file)) = store.load(&slug, op.name()) else { continue };
        for e in file.entries.iter().filter(|e| e.key.dtype == key.dtype && e.key.shape_bucket == key.shape_bucket) {
            let Some(w) = e.winner.as_deref().and_then(|id| e.candidate(id)) else { continue };
            if let Ok(k) = knobs_of(&w.knobs) {
                found.push((e.date.clone(), k));
            }
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0));
    let mut out: Vec<Knobs> = vec![];
    for (_, k) in found {
        if !out.contains(&k) {
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
        stats.shapes.push(kernel_shape(kern, m.resources.as_ref()));
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompileStats {
    pub kernels: usize,
    /// Of which came out of the module cache.
    pub cached: usize,
    /// What the cost model reads of each kernel ([`k3k_tuner::cost`]).
    pub shapes: Vec<KernelShape>,
}

/// What the cost model reads of a kernel: its launch threads, the program's shared memory plus ptxas's static
/// shared memory, ptxas's registers and spills (when assembled), and its grid when it is a constant.
pub fn kernel_shape(k: &k3k_ir::Kernel, r: Option<&k3k_codegen::ptxas::Resources>) -> KernelShape {
    let grid = k
        .grid
        .iter()
        .map(|e| e.as_const_int().and_then(|v| u64::try_from(v).ok()))
        .try_fold(1u64, |acc, v| v.map(|v| acc.saturating_mul(v.max(1))));
    KernelShape {
        threads: k.launch_threads(),
        registers: r.map(|r| r.registers),
        shared_bytes: u32::try_from(k.shared_bytes())
            .unwrap_or(u32::MAX)
            .saturating_add(r.map_or(0, |r| r.static_shared_bytes)),
        grid_blocks: grid,
        spill_bytes: r.map_or(0, |r| r.spill_store_bytes + r.spill_load_bytes),
    }
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
    let (keep, pruned) = plan_points_costed(op, preset, points, max, compile, &SmLimits::sm90(132));
    (keep.into_iter().map(|(c, _)| c).collect(), pruned)
}

/// [`plan_points`] with each kept candidate's modelled cost ([`k3k_tuner::cost::candidate_cost`]: from the ptxas
/// report when compiled, else from the IR alone).
fn plan_points_costed(
    op: &dyn Operator,
    preset: &Preset,
    points: impl Iterator<Item = Knobs>,
    max: usize,
    compile: bool,
    limits: &SmLimits,
) -> (Vec<(CandidateSpec, f64)>, Pruned) {
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
                Ok(ks) => group.push((k, ks.iter().map(|k| kernel_shape(k, None)).collect::<Vec<_>>())),
                Err(e) => pruned.add(e.to_string()),
            }
            if group.len() >= need {
                break;
            }
        }
        if group.is_empty() {
            break;
        }
        let results: Vec<(Knobs, Result<Vec<KernelShape>, String>)> = if compile {
            group
                .into_par_iter()
                .map(|(k, _)| {
                    let r = compile_candidate(op, preset, &k).map(|st| st.shapes);
                    (k, r)
                })
                .collect()
        } else {
            group.into_iter().map(|(k, shapes)| (k, Ok(shapes))).collect()
        };
        for (k, r) in results {
            match r {
                Ok(shapes) => keep.push((CandidateSpec::from_knobs(knob_map(&k)), candidate_cost(&shapes, limits))),
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
        // (With the generic chunk path: beside the full-chunk copy, a default since 2026-12-07, `rows` spills 16.)
        let rows = d.clone().with(k3k_ops::kda::GSWZ_KNOB, "rows").with("FULLC", 0i64);
        compile_candidate(&op, &p, &rows).expect("rows: no spills");
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
