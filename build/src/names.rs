//! The names of a request's generated types (kernel names without what their knobs decide) and the interface
//! that decides whether two kernels can share a launcher.

use k3k_ir::{Dim, Kernel, Knobs, stable_hash};
use k3k_ops::op::{Operator, Preset};

/// A role name from a kernel name: without the `k3k_` prefix and the knob suffix the kernel's name carries.
pub(crate) fn role_of(k: &Kernel) -> String {
    let mut n = k.name.strip_prefix("k3k_").unwrap_or(&k.name).to_string();
    let id = k.knobs.id().to_lowercase();
    if !id.is_empty()
        && let Some(s) = n.strip_suffix(&format!("_{id}"))
    {
        n = s.to_string();
    }
    n
}

/// Kernel names without the parts that depend on knobs: each kernel's name (as [`role_of`] shortens it) is
/// split into `_` tokens, and a token is dropped when a kernel built at a point one knob away from the defaults
/// or from `knobs` (with the same number and interfaces of kernels) does not carry it. So a tune that changes
/// knobs does not rename the generated types. Kernels a plan adds keep their names.
pub(crate) fn knob_free_names(op: &dyn Operator, p: &Preset, kernels: &[Kernel], knobs: &Knobs) -> Vec<String> {
    let build = |k: &Knobs| -> Option<Vec<Kernel>> {
        let mut seen = std::collections::HashSet::new();
        op.kernels(p, k).ok().map(|ks| ks.into_iter().filter(|k| seen.insert(stable_hash(k))).collect())
    };
    let Some(base) = build(knobs) else { return vec![] };
    if base.len() > kernels.len() || base.iter().zip(kernels).any(|(a, b)| stable_hash(a) != stable_hash(b)) {
        return vec![];
    }
    let mut tokens: Vec<Vec<(String, bool)>> =
        base.iter().map(|k| role_of(k).split('_').map(|t| (t.to_string(), true)).collect()).collect();
    let space = op.knob_space();
    let mut points = vec![];
    for start in [op.default_knobs(), knobs.clone()] {
        points.push(start.clone());
        for axis in &space.axes {
            for v in &axis.values {
                let mut k = start.clone();
                k.set(&axis.name, v.clone());
                points.push(k);
            }
        }
    }
    // At most 96 points, spread over the list (a large space's axes are sampled, not all walked).
    let step = points.len().div_ceil(96).max(1);
    for k in points.iter().step_by(step) {
        let Some(other) = build(k) else { continue };
        if other.len() != base.len() || other.iter().zip(&base).any(|(a, b)| signature(a) != signature(b)) {
            continue;
        }
        for (toks, o) in tokens.iter_mut().zip(&other) {
            let theirs = role_of(o);
            let theirs: Vec<&str> = theirs.split('_').collect();
            for (t, keep) in toks.iter_mut() {
                *keep &= theirs.contains(&t.as_str());
            }
        }
    }
    tokens
        .iter()
        .zip(&base)
        .map(|(toks, k)| {
            let kept: Vec<&str> = toks.iter().filter(|(_, keep)| *keep).map(|(t, _)| t.as_str()).collect();
            if kept.is_empty() { role_of(k) } else { kept.join("_") }
        })
        .collect()
}

/// The interface of a kernel (arguments and symbols), to tell whether two kernels can share a launcher.
pub(crate) fn signature(k: &Kernel) -> String {
    let sym = |d: &Dim| match d {
        Dim::Const(c) => c.to_string(),
        Dim::Sym(s) => k.syms[s.0 as usize].name.clone(),
    };
    let tensors: Vec<String> = k
        .tensors
        .iter()
        .map(|t| {
            format!(
                "{}: {}[{}] {:?}",
                t.name,
                t.dtype.name(),
                t.dims.iter().map(sym).collect::<Vec<_>>().join(", "),
                t.access
            )
        })
        .collect();
    let syms: Vec<String> = k.syms.iter().map(|s| format!("{}:{:?}", s.name, s.kind)).collect();
    format!("({}) syms {}", tensors.join(", "), syms.join(" "))
}
