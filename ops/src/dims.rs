//! The dims an operator's presets take, declared as a table per operator, and the one check every
//! [`crate::op::Operator::check_dims`] runs before anything is built or allocated: every dim is declared (an
//! unknown or misspelt dim is an error naming it and listing the accepted ones), every value lies within its
//! declared bounds (a negative value is refused, never wrapped to a huge `usize` or clamped), and the problem's
//! elements are bounded ([`MAX_ELEMENTS`]).

use crate::OpError;
use crate::op::Preset;

/// Whether a preset must give a dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Always needed.
    Required,
    /// Optional, or needed by one form of the problem only (the operator's own resolution reports which).
    Optional,
    /// One of a family `<name>0`, `<name>1`, ..., below the value of the named count dim (explicit group counts,
    /// sequence lengths).
    Indexed { count: &'static str },
}

/// One declared dim.
#[derive(Clone, Copy, Debug)]
pub struct DimDecl {
    /// The dim, or for [`Need::Indexed`] the prefix of its family.
    pub name: &'static str,
    pub need: Need,
    /// Smallest accepted value.
    pub min: i64,
    /// Largest accepted value.
    pub max: i64,
    /// One line: what the dim means.
    pub doc: &'static str,
}

impl DimDecl {
    /// A dim every preset gives.
    pub const fn required(name: &'static str, min: i64, max: i64, doc: &'static str) -> Self {
        DimDecl { name, need: Need::Required, min, max, doc }
    }
    /// A dim a preset may give.
    pub const fn optional(name: &'static str, min: i64, max: i64, doc: &'static str) -> Self {
        DimDecl { name, need: Need::Optional, min, max, doc }
    }
    /// The family `<prefix>0 .. <prefix>{count - 1}`.
    pub const fn indexed(prefix: &'static str, count: &'static str, min: i64, max: i64, doc: &'static str) -> Self {
        DimDecl { name: prefix, need: Need::Indexed { count }, min, max, doc }
    }
    /// A 0/1 switch.
    pub const fn flag(name: &'static str, doc: &'static str) -> Self {
        DimDecl::optional(name, 0, 1, doc)
    }
    /// How the dim is written in a list of accepted dims (`c0..c{G-1}` for a family).
    pub fn display(&self) -> String {
        match self.need {
            Need::Indexed { count } => format!("{0}0..{0}{{{count}-1}}", self.name),
            _ => self.name.to_string(),
        }
    }
}

/// The most elements a problem may hold (its largest tensor, or the sum of its main tensors, as each operator's
/// footprint counts): 2^31, what the kernels' 32-bit indexing addresses, and 8 GiB of f32 on the host. The
/// largest benchmark presets hold about 2^30.
pub const MAX_ELEMENTS: f64 = 2147483648.0;

/// Bounds of sizes: rows and tokens (2^24), reduction and column dims (2^20), heads (1024), groups and
/// sequences (4096).
pub const MAX_ROWS: i64 = 1 << 24;
pub const MAX_COLS: i64 = 1 << 20;
pub const MAX_HEADS: i64 = 1024;
pub const MAX_GROUPS: i64 = 4096;

fn bad(op: &'static str, arg: &str, why: String) -> OpError {
    OpError::BadInput { op, arg: arg.into(), why }
}

/// The accepted dims of a table, for messages.
pub fn accepted(decls: &[DimDecl]) -> String {
    decls.iter().map(|d| format!("`{}`", d.display())).collect::<Vec<_>>().join(", ")
}

/// The declaration of `dim` and, for a family member, its index.
fn find<'a>(decls: &'a [DimDecl], dim: &str) -> Option<(&'a DimDecl, Option<u64>)> {
    if let Some(d) = decls.iter().find(|d| !matches!(d.need, Need::Indexed { .. }) && d.name == dim) {
        return Some((d, None));
    }
    decls.iter().filter(|d| matches!(d.need, Need::Indexed { .. })).find_map(|d| {
        let digits = dim.strip_prefix(d.name)?;
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        let i = if canonical { digits.parse::<u64>().ok()? } else { return None };
        Some((d, Some(i)))
    })
}

/// Check `p` against the declared dims of `op`: names, bounds, required dims and family indices (see the module
/// docs). The errors name the dim.
pub fn check(op: &'static str, decls: &[DimDecl], p: &Preset) -> Result<(), OpError> {
    for (dim, &v) in &p.dims {
        let Some((d, index)) = find(decls, dim) else {
            return Err(bad(op, dim, format!("unknown dim; {op} takes {}", accepted(decls))));
        };
        if v < d.min || v > d.max {
            let what = if v < 0 && d.min >= 0 { "a negative value" } else { "out of bounds" };
            return Err(bad(op, dim, format!("{what}: {v} is outside {}..={} ({})", d.min, d.max, d.doc)));
        }
        if let (Need::Indexed { count }, Some(i)) = (d.need, index) {
            match p.dims.get(count) {
                None => return Err(bad(op, dim, format!("`{dim}` needs the count `{count}` ({})", d.doc))),
                Some(&n) if i >= n.max(0) as u64 => {
                    return Err(bad(op, dim, format!("`{dim}` is past {count} = {n}: the family is {}", d.display())));
                }
                Some(_) => {}
            }
        }
    }
    for d in decls.iter().filter(|d| d.need == Need::Required) {
        if !p.dims.contains_key(d.name) {
            return Err(bad(op, d.name, format!("missing dim ({}); {op} takes {}", d.doc, accepted(decls))));
        }
    }
    Ok(())
}

/// A dim's value as f64 for a footprint (`default` when absent; negative values were refused by [`check`]).
pub fn size(p: &Preset, dim: &str, default: i64) -> f64 {
    p.dims.get(dim).copied().unwrap_or(default).max(0) as f64
}

/// The sum of a family `<prefix>0 .. <prefix>{n-1}` (absent members count 0).
pub fn family_sum(p: &Preset, prefix: &str, n: f64) -> f64 {
    (0..n as u64).map(|i| size(p, &format!("{prefix}{i}"), 0)).sum()
}

/// Refuse a problem of more than [`MAX_ELEMENTS`] elements (`elements`, from the operator's footprint).
pub fn bound(op: &'static str, p: &Preset, elements: f64) -> Result<(), OpError> {
    if elements.is_finite() && elements <= MAX_ELEMENTS {
        return Ok(());
    }
    let dims = p.dims.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    Err(bad(
        op,
        "dims",
        format!("the problem ({dims}) holds about {elements:.3e} elements, more than the {MAX_ELEMENTS:.0} supported"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: &[DimDecl] = &[
        DimDecl::required("K", 1, 100, "reduction"),
        DimDecl::optional("G", 1, 8, "groups"),
        DimDecl::indexed("c", "G", 0, 50, "rows of group i"),
        DimDecl::flag("p", "routing weights"),
    ];

    fn err(dims: &[(&str, i64)]) -> String {
        check("t", DIMS, &Preset::new("x", dims)).unwrap_err().to_string()
    }

    #[test]
    fn names_bounds_and_families() {
        assert!(check("t", DIMS, &Preset::new("x", &[("K", 3), ("G", 2), ("c0", 1), ("c1", 0), ("p", 1)])).is_ok());
        let e = err(&[("K", 3), ("FOO", 7)]);
        assert!(e.contains("`FOO`") && e.contains("unknown dim") && e.contains("`c0..c{G-1}`"), "{e}");
        let e = err(&[("K", -1)]);
        assert!(e.contains("`K`") && e.contains("-1") && e.contains("negative"), "{e}");
        assert!(!e.contains("18446744073709551615"), "{e}");
        assert!(err(&[("K", 101)]).contains("1..=100"));
        assert!(err(&[("G", 2)]).contains("missing dim"));
        assert!(err(&[("K", 1), ("G", 2), ("c2", 1)]).contains("past G = 2"));
        assert!(err(&[("K", 1), ("c0", 1)]).contains("needs the count `G`"));
        // `c01` and `c` are not members of the family.
        assert!(err(&[("K", 1), ("G", 2), ("c01", 1)]).contains("unknown dim"));
        assert!(err(&[("K", 1), ("c", 1)]).contains("unknown dim"));
        assert!(err(&[("K", 1), ("p", 2)]).contains("`p`"));
    }

    #[test]
    fn the_bound_refuses_huge_problems() {
        let p = Preset::new("x", &[("K", 3)]);
        assert!(bound("t", &p, 1e6).is_ok());
        assert!(bound("t", &p, 1e12).unwrap_err().to_string().contains("elements"));
        assert!(bound("t", &p, f64::NAN).is_err());
        assert_eq!(family_sum(&Preset::new("x", &[("c0", 3), ("c2", 4)]), "c", 3.0), 7.0);
    }
}
