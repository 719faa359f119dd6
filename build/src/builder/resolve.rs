//! Resolving one request of [`Builder`](super::Builder) on every GPU: the operator and its problem, the
//! options' checks, the tuned (or default) knobs, the kernels and plans per GPU, their agreement, roles and pins.

use super::*;

fn find_op<'a>(ops: &'a [Box<dyn Operator>], name: &str) -> Result<&'a dyn Operator, BuildError> {
    ops.iter().find(|o| o.name() == name).map(|o| o.as_ref()).ok_or_else(|| {
        BuildError::Usage(format!(
            "unknown operator `{name}`; registered: {}",
            ops.iter().map(|o| o.name()).collect::<Vec<_>>().join(", ")
        ))
    })
}

fn preset_of(op: &dyn Operator, preset: &Option<String>, dims: &[(String, i64)]) -> Result<Preset, BuildError> {
    let mut p = match preset {
        Some(name) => op.bench_presets().into_iter().find(|p| &p.name == name).ok_or_else(|| {
            BuildError::Usage(format!(
                "operator `{}` has no preset `{name}`; presets: {}",
                op.name(),
                op.bench_presets().iter().map(|p| format!("`{}`", p.name)).collect::<Vec<_>>().join(", ")
            ))
        })?,
        None if dims.is_empty() => {
            return Err(BuildError::Usage(format!("request for `{}` has neither a preset nor dims", op.name())));
        }
        None => Preset { name: String::new(), dims: BTreeMap::new() },
    };
    for (k, v) in dims {
        p.dims.insert(k.clone(), *v);
    }
    if preset.is_none() || !dims.is_empty() {
        p.name = dims_text(&p.dims);
    }
    Ok(p)
}

/// Every GPU variant of a request must present the same launchers: as many kernels, with the same arguments,
/// and plans with the same inputs and outputs.
fn check_variants_agree(module: &str, variants: &[Variant]) -> Result<(), BuildError> {
    let first = &variants[0];
    for v in &variants[1..] {
        let same = v.kernels.len() == first.kernels.len()
            && v.kernels.iter().zip(&first.kernels).all(|(a, b)| signature(a) == signature(b));
        if !same {
            return Err(BuildError::Inconsistent {
                request: module.to_string(),
                why: format!(
                    "the kernels for {} ({}) and {} ({}) differ in number or arguments; make one request per GPU",
                    first.gpu,
                    first.kernels.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", "),
                    v.gpu,
                    v.kernels.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            });
        }
        if let (Some(a), Some(b)) = (&first.plan, &v.plan) {
            let io = |p: &RecordedPlan| -> Vec<String> {
                p.buffers
                    .iter()
                    .filter(|b| matches!(b.role, crate::rt::BufRole::Input | crate::rt::BufRole::Output))
                    .map(|b| format!("{} {:?} {:?} {:?}", b.name, b.role, b.dtype, b.shape))
                    .collect()
            };
            if io(a) != io(b) {
                return Err(BuildError::Inconsistent {
                    request: module.to_string(),
                    why: format!("the plans for {} and {} take different inputs or outputs", first.gpu, v.gpu),
                });
            }
        }
    }
    Ok(())
}

/// Each kernel's pinned dims: the request's explicit pins, plus every kernel dim named like a request dim
/// (unless freed or a run-time dim).
fn kernel_pins(
    r: &Request,
    first: &Variant,
    runtime: &[String],
    preset_dims: &BTreeMap<String, i64>,
) -> Vec<Vec<(String, i64)>> {
    first
        .kernels
        .iter()
        .map(|k| {
            let mut p: Vec<(String, i64)> = vec![];
            for s in k.syms.iter().filter(|s| s.kind == SymKind::Dim) {
                let pinned = r.pins.iter().any(|(n, _)| n == &s.name);
                if r.free.contains(&s.name) || (runtime.contains(&s.name) && !pinned) {
                    continue;
                }
                let v =
                    r.pins.iter().find(|(n, _)| n == &s.name).map(|(_, v)| *v).or(preset_dims.get(&s.name).copied());
                if let Some(v) = v {
                    p.push((s.name.clone(), v));
                }
            }
            p
        })
        .collect()
}

/// The variants of a request for IR kernels given in build.rs: the same kernels (each once) on every GPU, and the
/// request's title.
fn raw_variants(
    module: &str,
    r: &Request,
    kernels: &[Kernel],
    gpus: &[String],
) -> Result<(String, Vec<Variant>), BuildError> {
    let mut variants = vec![];
    if kernels.is_empty() {
        return Err(BuildError::Usage(format!("kernel request `{module}` has no kernels")));
    }
    if r.plan {
        return Err(BuildError::Usage("`plan(true)` needs an operator request".into()));
    }
    let title = format!("IR kernels `{}`", kernels.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join("`, `"));
    let mut seen = std::collections::HashSet::new();
    let ks: Vec<Kernel> = kernels.iter().filter(|k| seen.insert(stable_hash(k))).cloned().collect();
    for g in gpus {
        variants.push(Variant {
            gpu: g.clone(),
            knobs: Knobs::new(),
            source: "IR kernels given in build.rs".into(),
            kernels: ks.clone(),
            plan: None,
            varlen: None,
        });
    }
    Ok((title, variants))
}

/// The role names without knob values and the run-time dims left free, for an operator request.
fn free_names(op: &dyn Operator, r: &Request, build_p: &Preset, variants: &[Variant]) -> (Vec<String>, Vec<String>) {
    if let Some((dim, values)) = &r.buckets {
        (values.iter().map(|b| format!("{dim}{b}")).collect(), vec![dim.clone()])
    } else if r.varlen.is_some() {
        // The batch's tokens, sequences and chunks all come at run time.
        let names = ["intra", "state", "state_from_h0"].map(String::from).to_vec();
        (names, ["B", "T", "N"].map(String::from).to_vec())
    } else {
        // Free only where every GPU's kernels are the same at other values of the dim.
        let mut free: Option<Vec<String>> = None;
        for v in variants {
            let f = free_runtime_dims(op, build_p, &v.knobs, &v.kernels);
            free = Some(match free {
                None => f,
                Some(prev) => prev.into_iter().filter(|d| f.contains(d)).collect(),
            });
        }
        let names = knob_free_names(op, build_p, &variants[0].kernels, &variants[0].knobs);
        (names, free.unwrap_or_default())
    }
}

/// The options of an operator request that do not depend on the GPU: forced knobs in the operator's space,
/// `assume_folded_scales()` on MXFP4 only, `buckets(..)` over a run-time dim and alone.
fn check_op_options(op: &dyn Operator, name: &str, r: &Request, module: &str) -> Result<(), BuildError> {
    let usage = |what: String| BuildError::Usage(format!("request `{module}` (`{name}`): {what}"));
    if let Some(f) = &r.knobs {
        op.checked_knobs().check(f, &op.default_knobs()).map_err(|e| usage(format!(".knobs(..): {e}")))?;
    }
    if r.folded_scales && name != MXFP4_OP {
        return Err(usage(format!("`assume_folded_scales()` applies to `{MXFP4_OP}` only")));
    }
    if let Some((dim, values)) = &r.buckets {
        if !runtime_dims(name).contains(&dim.as_str()) {
            return Err(usage(format!(
                "`buckets({dim:?}, ..)`: `{dim}` is no run-time dim of `{name}` (those are {:?})",
                runtime_dims(name)
            )));
        }
        if values.is_empty() || values[0] < 1 || r.plan || r.varlen.is_some() {
            return Err(usage(
                "`buckets(..)` takes values from 1, and no `plan(true)` or `varlen(..)` beside it".into(),
            ));
        }
    }
    Ok(())
}

/// Resolve one request on every GPU.
#[allow(clippy::too_many_arguments)]
pub(super) fn resolve_request(
    module: String,
    r: &Request,
    ops: &[Box<dyn Operator>],
    gpus: &[String],
    results: &Path,
    nvrtc: Option<&str>,
    kdir: &Path,
    warnings: &mut Vec<String>,
) -> Result<(Resolved, Vec<ResolvedRequest>), BuildError> {
    let mut variants: Vec<Variant> = vec![];
    let mut reports = vec![];
    let (title, op_name, shape, preset_dims);
    // Role names without knob values, and the run-time dims left free, for an operator request (below).
    let mut knob_free: Vec<String> = vec![];
    let mut runtime_free: Vec<String> = vec![];
    match &r.source {
        Source::Raw { kernels } => {
            (title, variants) = raw_variants(&module, r, kernels, gpus)?;
            op_name = String::new();
            shape = String::new();
            preset_dims = BTreeMap::new();
        }
        Source::Op { name, preset, dims } => {
            let op = find_op(ops, name)?;
            let p = preset_of(op, preset, dims)?;
            let usage = |what: String| BuildError::Usage(format!("request `{module}` (`{name}`): {what}"));
            check_op_options(op, name, r, &module)?;
            // The shape the kernels (and a plan's instances) are built for: for MXFP4 weights, the kernels that
            // are right for every scale byte unless the request assumes folded scales (the lookup of tuned knobs
            // keeps the request's shape: the knobs were tuned on the same problem).
            let mut build_p = build_preset(name, &p, r.folded_scales);
            if let Some((max_tokens, max_seqs)) = r.varlen {
                if name != "kda" {
                    return Err(usage("`varlen(..)` applies to `kda` only".into()));
                }
                if r.plan {
                    return Err(usage("`varlen(..)` and `plan(true)` exclude each other".into()));
                }
                if max_tokens == 0 || max_seqs == 0 || max_tokens > i32::MAX as usize {
                    return Err(usage(format!(
                        "`varlen({max_tokens}, {max_seqs})`: both limits from 1, tokens < 2^31"
                    )));
                }
                // The representative batch the automatic knob choices are made for.
                if !build_p.dims.contains_key("N") && !build_p.dims.contains_key("B") {
                    let b = max_seqs.min(max_tokens);
                    build_p.dims.insert("B".into(), b as i64);
                    build_p.dims.insert("T".into(), (max_tokens / b).max(1) as i64);
                }
            }
            // Dims the operator does not take, or out of its bounds, before anything is built.
            op.check_dims(&build_p).map_err(|e| BuildError::Op {
                request: module.clone(),
                gpu: "-".into(),
                err: Box::new(e),
            })?;
            op_name = name.clone();
            shape = p.name.clone();
            preset_dims = p.dims.clone();
            title = format!("`{name}` at {}", dims_text(&p.dims));
            let op_err =
                |gpu: &str, err| BuildError::Op { request: module.clone(), gpu: gpu.into(), err: Box::new(err) };
            // Plans are recorded from two seeded instances (seed 1 and 2): what differs is run-time data.
            let instances = if r.plan {
                Some((
                    op.instance(&build_p, 1).map_err(|e| op_err("-", e))?,
                    op.instance(&build_p, 2).map_err(|e| op_err("-", e))?,
                ))
            } else {
                None
            };
            for g in gpus {
                // Tuned (or default) knobs, with the ones build.rs forces on top.
                let forced = |mut k: Knobs| {
                    if let Some(f) = &r.knobs {
                        k.0.extend(f.0.clone());
                    }
                    k
                };
                if let Some((dim, values)) = &r.buckets {
                    let v =
                        bucket_variant(op, &p, &build_p, dim, values, g, results, nvrtc, warnings, &forced, &module)?;
                    reports.extend(v.1);
                    variants.push(v.0);
                    continue;
                }
                let lookup_p = if r.varlen.is_some() { &build_p } else { &p };
                let (tuned, mut source) = lookup::resolve(op, lookup_p, g, results, nvrtc, warnings);
                let mut varlen_rec = None;
                let mut knobs = forced(tuned);
                if r.varlen.is_some() {
                    knobs = varlen_knobs(&build_p, &knobs).map_err(|e| op_err(g, e))?;
                }
                let kernels = match (r.varlen, op.kernels(&build_p, &knobs)) {
                    (Some((max_tokens, max_seqs)), _) => {
                        let (ks, rec) =
                            varlen_kernels(op, &build_p, &knobs, max_tokens, max_seqs).map_err(|e| match e {
                                Ok(e) => op_err(g, e),
                                Err(why) => BuildError::Inconsistent { request: module.clone(), why },
                            })?;
                        varlen_rec = Some(rec);
                        ks
                    }
                    (None, r) => match r {
                        Ok(k) => k,
                        Err(e) if matches!(source, KnobSource::Tuned { .. }) => {
                            warnings.push(format!("{module} on {g}: knobs {knobs} fail ({e}); using the defaults"));
                            knobs = forced(op.default_knobs());
                            source = KnobSource::Default { why: "the tuned knobs failed to build".into() };
                            op.kernels(&build_p, &knobs).map_err(|e| op_err(g, e))?
                        }
                        Err(e) => return Err(op_err(g, e)),
                    },
                };
                if let KnobSource::Default { why } = &source {
                    warnings.push(format!("{name} [{}] on {g}: {why}; using the default knobs {knobs}", p.name));
                }
                let source_text = match &r.knobs {
                    Some(f) => format!("{source}, with {f} from build.rs"),
                    None => source.to_string(),
                };
                let mut seen = std::collections::HashSet::new();
                let mut ks: Vec<Kernel> = kernels.into_iter().filter(|k| seen.insert(stable_hash(k))).collect();
                let plan = match &instances {
                    Some((a, b)) => {
                        let pa = a.plan(&knobs).map_err(|e| op_err(g, e))?;
                        let pb = b.plan(&knobs).map_err(|e| op_err(g, e))?;
                        Some(record_plan(&module, g, &pa, &pb, &mut ks, &mut seen, &r.runtime_inputs, kdir)?)
                    }
                    None => None,
                };
                reports.push(ResolvedRequest {
                    module: module.clone(),
                    op: name.clone(),
                    shape: p.name.clone(),
                    gpu: g.clone(),
                    knobs: knobs.clone(),
                    source: source.clone(),
                    kernels: ks.iter().map(|k| k.name.clone()).collect(),
                });
                variants.push(Variant {
                    gpu: g.clone(),
                    knobs,
                    source: source_text,
                    kernels: ks,
                    plan,
                    varlen: varlen_rec,
                });
            }
            (knob_free, runtime_free) = free_names(op, r, &build_p, &variants);
        }
    }

    check_variants_agree(&module, &variants)?;
    let first = &variants[0];
    let mut roles: Vec<String> = first.kernels.iter().map(role_of).collect();
    for (role, name) in roles.iter_mut().zip(&knob_free) {
        *role = name.clone();
    }
    if !r.roles.is_empty() && r.roles.len() != roles.len() {
        return Err(BuildError::Usage(format!(
            "request `{module}`: `.roles(..)` names {} kernels ({}), but the request has {}: {}",
            r.roles.len(),
            r.roles.join(", "),
            roles.len(),
            first.kernels.iter().map(|k| format!("`{}`", k.name)).collect::<Vec<_>>().join(", ")
        )));
    }
    for (i, name) in r.roles.iter().enumerate() {
        roles[i] = name.clone();
    }
    // Every dim `.pin(..)` or `.free_dims(..)` names must be a dim of the request's kernels.
    let kernel_dims: std::collections::BTreeSet<&str> = first
        .kernels
        .iter()
        .flat_map(|k| k.syms.iter().filter(|s| s.kind == SymKind::Dim).map(|s| s.name.as_str()))
        .collect();
    for (what, name) in r.pins.iter().map(|(n, _)| (".pin", n)).chain(r.free.iter().map(|n| (".free_dims", n))) {
        if !kernel_dims.contains(name.as_str()) {
            return Err(BuildError::Usage(format!(
                "request `{module}`: `{what}(..)` names `{name}`, which is no dim of its kernels; their dims are {}",
                kernel_dims.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let runtime = runtime_free.clone();
    let roles = crate::ident::unique(
        roles.iter().map(|s| crate::ident::camel(s)).collect(),
        &["Plan", "Inputs", "Outputs", "Self"],
    );
    let pins = kernel_pins(r, first, &runtime, &preset_dims);
    let folded_scales = r.folded_scales;
    let runtime_free = runtime_free.into_iter().filter(|d| !r.pins.iter().any(|(n, _)| n == d)).collect();
    let buckets = r.buckets.clone();
    Ok((
        Resolved { module, title, op: op_name, shape, roles, pins, variants, folded_scales, runtime_free, buckets },
        reports,
    ))
}
