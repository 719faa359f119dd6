//! Named tuning knobs: the values a kernel was built with, and the spaces an operator declares.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// One knob value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KnobValue {
    Bool(bool),
    Int(i64),
    Str(String),
}

impl fmt::Display for KnobValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KnobValue::Int(v) => write!(f, "{v}"),
            KnobValue::Bool(v) => write!(f, "{v}"),
            KnobValue::Str(v) => f.write_str(v),
        }
    }
}

impl From<i64> for KnobValue {
    fn from(v: i64) -> Self {
        KnobValue::Int(v)
    }
}
impl From<u32> for KnobValue {
    fn from(v: u32) -> Self {
        KnobValue::Int(v as i64)
    }
}
impl From<bool> for KnobValue {
    fn from(v: bool) -> Self {
        KnobValue::Bool(v)
    }
}
impl From<&str> for KnobValue {
    fn from(v: &str) -> Self {
        KnobValue::Str(v.to_string())
    }
}

/// Why a knob set cannot be read as an operator expects.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KnobError {
    #[error("knob `{name}` is missing")]
    Missing { name: String },
    #[error("knob `{name}` has value `{value}`, expected {expected}")]
    Invalid { name: String, value: String, expected: String },
    #[error("unknown knob `{name}`; this operator's knobs are {known}")]
    Unknown { name: String, known: String },
}

/// A set of knob values, ordered by name (stable for hashing and printing).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Knobs(pub BTreeMap<String, KnobValue>);

impl Knobs {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Builder-style insert.
    pub fn with(mut self, name: &str, v: impl Into<KnobValue>) -> Self {
        self.0.insert(name.to_string(), v.into());
        self
    }
    /// Insert or replace.
    pub fn set(&mut self, name: &str, v: impl Into<KnobValue>) {
        self.0.insert(name.to_string(), v.into());
    }
    /// Read an integer knob.
    pub fn int(&self, name: &str) -> Result<i64, KnobError> {
        match self.0.get(name) {
            Some(KnobValue::Int(v)) => Ok(*v),
            Some(other) => {
                Err(KnobError::Invalid { name: name.into(), value: other.to_string(), expected: "an integer".into() })
            }
            None => Err(KnobError::Missing { name: name.into() }),
        }
    }
    /// Read an integer knob as u32.
    pub fn u32(&self, name: &str) -> Result<u32, KnobError> {
        let v = self.int(name)?;
        u32::try_from(v).map_err(|_| KnobError::Invalid {
            name: name.into(),
            value: v.to_string(),
            expected: "a non-negative 32-bit integer".into(),
        })
    }
    /// Read a bool knob.
    pub fn bool(&self, name: &str) -> Result<bool, KnobError> {
        match self.0.get(name) {
            Some(KnobValue::Bool(v)) => Ok(*v),
            Some(other) => Err(KnobError::Invalid {
                name: name.into(),
                value: other.to_string(),
                expected: "true or false".into(),
            }),
            None => Err(KnobError::Missing { name: name.into() }),
        }
    }
    /// Read a string knob.
    pub fn str(&self, name: &str) -> Result<&str, KnobError> {
        match self.0.get(name) {
            Some(KnobValue::Str(v)) => Ok(v),
            Some(other) => {
                Err(KnobError::Invalid { name: name.into(), value: other.to_string(), expected: "a string".into() })
            }
            None => Err(KnobError::Missing { name: name.into() }),
        }
    }
    /// A short stable id such as `BM128_BN128_BK32_STAGES3` (used as a candidate id).
    pub fn id(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}{v}")).collect();
        parts.join("_")
    }
}

impl fmt::Display for Knobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// One axis of a knob space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnobAxis {
    pub name: String,
    pub values: Vec<KnobValue>,
    /// What the knob changes, for `k3k list`.
    pub doc: String,
}

impl KnobAxis {
    /// Knob `name` with `values`, described by `doc`.
    fn new<V: Into<KnobValue>>(name: &str, doc: &str, values: impl IntoIterator<Item = V>) -> Self {
        KnobAxis { name: name.into(), values: values.into_iter().map(Into::into).collect(), doc: doc.into() }
    }
}

/// The Cartesian product of knob axes an operator offers the tuner. Invalid combinations are removed by the
/// operator's own pruning (shared memory, registers, divisibility) before anything is compiled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KnobSpace {
    pub axes: Vec<KnobAxis>,
    /// Values a kernel builder accepts beyond those the tuner samples (a layout kept for hand-picked or older
    /// knob sets): [`KnobSpace::check`] takes them, the tuner's walks never visit them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted: Vec<KnobAxis>,
}

impl KnobSpace {
    /// Add an axis.
    pub fn axis<V: Into<KnobValue>>(mut self, name: &str, doc: &str, values: impl IntoIterator<Item = V>) -> Self {
        self.axes.push(KnobAxis::new(name, doc, values));
        self
    }

    /// Accept `values` of knob `name` too (see [`KnobSpace::accepted`]).
    pub fn accepts<V: Into<KnobValue>>(mut self, name: &str, doc: &str, values: impl IntoIterator<Item = V>) -> Self {
        self.accepted.push(KnobAxis::new(name, doc, values));
        self
    }

    /// Number of points (before pruning).
    pub fn size(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    /// The point at index `i` of [`KnobSpace::points`]'s order (mixed radix, the last axis varying fastest),
    /// without enumerating the space; `None` past the end.
    pub fn point(&self, mut i: usize) -> Option<Knobs> {
        if i >= self.size() {
            return None;
        }
        let mut k = Knobs::new();
        for axis in self.axes.iter().rev() {
            let n = axis.values.len();
            k.set(&axis.name, axis.values[i % n].clone());
            i /= n;
        }
        Some(k)
    }

    /// Every `size / n`-th point (about `n` points spread evenly over [`KnobSpace::points`]'s order), without
    /// enumerating the space: what a test that samples a space of millions of points should use.
    pub fn strided(&self, n: usize) -> Vec<Knobs> {
        let step = (self.size() / n.max(1)).max(1);
        (0..self.size()).step_by(step).filter_map(|i| self.point(i)).collect()
    }

    /// Every point exactly once in a fixed pseudo-random order that depends on `seed`, generated lazily: the
    /// index `i` of a counter over the next power of two is sent through a bijection of that range (xor, odd
    /// multiplications and xor-shifts, each invertible modulo a power of two) and the images past the end are
    /// skipped (cycle walking). Memory and time per point are O(axes) whatever the space's size.
    pub fn shuffled(&self, seed: u64) -> impl Iterator<Item = Knobs> + '_ {
        let size = self.size() as u64;
        let bits = size.max(2).next_power_of_two().trailing_zeros();
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let shift = bits.div_ceil(2).max(1);
        let mix = move |i: u64| {
            let mut y = (i ^ seed) & mask;
            y = y.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask;
            y ^= y >> shift;
            y = y.wrapping_mul(0xBF58_476D_1CE4_E5B9) & mask;
            y ^= y >> shift;
            y
        };
        (0..=mask).map(mix).filter(move |&y| y < size).filter_map(|y| self.point(y as usize))
    }

    /// Check hand-given knobs (from the CLI, `k3k-build`'s `.knobs(..)`, a fuzz or tune request) against this
    /// space and the operator's defaults, and return them with each value in its axis's type. Every name must be
    /// an axis of the space or a default knob, and every value one the axis offers or the default's: a knob
    /// outside the space is refused rather than read as something else (`MMA=tensor` as `sync`). A value is read
    /// in the axis's type first, so `OVERLAP=true` on a string axis is the word `true` and `BM=64` on a string
    /// axis the word `64`. The error names the knob and lists what is allowed.
    pub fn check(&self, knobs: &Knobs, defaults: &Knobs) -> Result<Knobs, KnobError> {
        let mut out = Knobs::new();
        for (name, value) in &knobs.0 {
            let default = defaults.0.get(name);
            let mut allowed: Vec<KnobValue> = self
                .axes
                .iter()
                .chain(&self.accepted)
                .filter(|a| &a.name == name)
                .flat_map(|a| a.values.iter().cloned())
                .collect();
            if let Some(d) = default
                && !allowed.contains(d)
            {
                allowed.push(d.clone());
            }
            if allowed.is_empty() {
                let mut known: Vec<&str> = self.axes.iter().chain(&self.accepted).map(|a| a.name.as_str()).collect();
                known.extend(defaults.0.keys().map(String::as_str));
                known.sort_unstable();
                known.dedup();
                let known = if known.is_empty() {
                    "none (it takes no knobs)".to_string()
                } else {
                    known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                };
                return Err(KnobError::Unknown { name: name.clone(), known });
            }
            let text = value.to_string();
            let found = allowed.iter().find(|v| **v == *value || v.to_string() == text);
            match found {
                Some(v) => out.set(name, v.clone()),
                None => {
                    let list = allowed.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
                    return Err(KnobError::Invalid {
                        name: name.clone(),
                        value: text,
                        expected: format!("one of {list}"),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Every point of the space, in [`KnobSpace::point`]'s order. This materializes the whole product: for a
    /// large space use [`KnobSpace::shuffled`], [`KnobSpace::strided`] or [`KnobSpace::point`].
    pub fn points(&self) -> Vec<Knobs> {
        (0..self.size()).filter_map(|i| self.point(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_enumerates_product() {
        let s = KnobSpace::default().axis("BM", "", [64i64, 128]).axis("STAGES", "", [2i64, 3, 4]);
        let pts = s.points();
        assert_eq!(pts.len(), 6);
        assert_eq!(s.size(), 6);
        assert_eq!(pts[0].int("BM").unwrap(), 64);
        assert_eq!(pts[5].int("STAGES").unwrap(), 4);
        let mut ids: Vec<_> = pts.iter().map(|k| k.id()).collect();
        ids.dedup();
        assert_eq!(ids.len(), 6);
    }

    fn space() -> KnobSpace {
        KnobSpace::default().axis("A", "", [1i64, 2, 3]).axis("B", "", ["x", "y"]).axis("C", "", [true, false]).axis(
            "D",
            "",
            [4i64, 5, 6, 7, 8],
        )
    }

    #[test]
    fn point_is_the_order_of_points() {
        let s = space();
        let all = s.points();
        // The order, written out: the first axis varies slowest, the last fastest.
        let mut expect = vec![];
        for a in [1i64, 2, 3] {
            for b in ["x", "y"] {
                for c in [true, false] {
                    for d in [4i64, 5, 6, 7, 8] {
                        expect.push(Knobs::new().with("A", a).with("B", b).with("C", c).with("D", d));
                    }
                }
            }
        }
        assert_eq!(all, expect);
        for (i, p) in expect.iter().enumerate() {
            assert_eq!(s.point(i).as_ref(), Some(p), "index {i}");
        }
        assert_eq!(s.point(all.len()), None);
        assert_eq!(KnobSpace::default().points(), vec![Knobs::new()], "the empty space has one point");
        assert!(KnobSpace::default().axis("A", "", Vec::<i64>::new()).points().is_empty());
        let st = s.strided(6);
        assert_eq!(st.len(), 6);
        assert_eq!(st[1], all[10]);
    }

    #[test]
    fn shuffled_visits_every_point_once_in_a_seeded_order() {
        let s = space();
        let mut sorted_all: Vec<String> = s.points().iter().map(|k| k.id()).collect();
        sorted_all.sort();
        for seed in [0u64, 1, 0xdead_beef] {
            let order: Vec<String> = s.shuffled(seed).map(|k| k.id()).collect();
            assert_ne!(order, s.points().iter().map(|k| k.id()).collect::<Vec<_>>(), "seed {seed}: not shuffled");
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, sorted_all, "seed {seed}: not a permutation");
            assert_eq!(order, s.shuffled(seed).map(|k| k.id()).collect::<Vec<_>>(), "seed {seed}: not stable");
        }
        assert_ne!(s.shuffled(1).next(), s.shuffled(2).next());
        // One axis of one value and the empty space.
        let one = KnobSpace::default().axis("A", "", [1i64]);
        assert_eq!(one.shuffled(3).count(), 1);
    }

    #[test]
    fn a_space_of_millions_is_walked_lazily() {
        let mut s = KnobSpace::default();
        for a in 0..12 {
            s = s.axis(&format!("K{a}"), "", [0i64, 1, 2, 3]);
        }
        assert_eq!(s.size(), 1 << 24);
        let first: Vec<Knobs> = s.shuffled(7).take(1000).collect();
        let distinct: std::collections::HashSet<String> = first.iter().map(|k| k.id()).collect();
        assert_eq!(distinct.len(), 1000);
        // Spread: every value of every axis shows up in a thousand draws.
        for a in 0..12 {
            let vals: std::collections::HashSet<i64> = first.iter().map(|k| k.int(&format!("K{a}")).unwrap()).collect();
            assert_eq!(vals.len(), 4, "axis K{a}");
        }
        assert!((10..=11).contains(&s.strided(10).len()));
    }

    #[test]
    fn typed_reads_report_the_knob() {
        let k = Knobs::new().with("BM", 64i64).with("swz", "xor");
        assert_eq!(k.int("BM").unwrap(), 64);
        let e = k.int("swz").unwrap_err();
        assert!(e.to_string().contains("`swz`"), "{e}");
        assert!(matches!(k.bool("nope"), Err(KnobError::Missing { .. })));
    }

    #[test]
    fn check_refuses_unknown_knobs_and_values_outside_the_space() {
        let s = space();
        let defaults = Knobs::new().with("A", 1i64).with("E", 0i64);
        // In the space, read in each axis's type; a default knob outside the axes is known too.
        let ok = Knobs::new().with("A", 3i64).with("B", "y").with("C", false).with("E", 0i64);
        assert_eq!(s.check(&ok, &defaults).unwrap(), ok);
        // A value given as a word on an int axis, or as a number on a string axis, is read in the axis's type.
        let words = Knobs::new().with("A", "2");
        assert_eq!(s.check(&words, &defaults).unwrap(), Knobs::new().with("A", 2i64));
        // An unknown name lists the known ones.
        let e = s.check(&Knobs::new().with("FOO", 1i64), &defaults).unwrap_err();
        assert!(matches!(&e, KnobError::Unknown { name, .. } if name == "FOO"), "{e}");
        assert!(e.to_string().contains("`A`") && e.to_string().contains("`E`"), "{e}");
        // A misspelt (lower-case) name is unknown, not ignored.
        assert!(matches!(s.check(&Knobs::new().with("a", 1i64), &defaults), Err(KnobError::Unknown { .. })));
        // A value outside the axis lists the allowed values.
        let e = s.check(&Knobs::new().with("B", "z"), &defaults).unwrap_err();
        assert!(e.to_string().contains("`B`") && e.to_string().contains("x, y"), "{e}");
        let e = s.check(&Knobs::new().with("D", 9i64), &defaults).unwrap_err();
        assert!(e.to_string().contains("4, 5, 6, 7, 8"), "{e}");
        assert!(s.check(&Knobs::new().with("C", "maybe"), &defaults).is_err());
        // Values accepted beyond the sampled axes (not walked by the tuner).
        let wider = space().accepts("B", "", ["z"]).accepts("F", "", [1i64]);
        assert!(wider.check(&Knobs::new().with("B", "z").with("F", 1i64), &defaults).is_ok());
        assert_eq!(wider.size(), s.size(), "accepted values are no tuning points");
        // An operator without knobs says so.
        let e = KnobSpace::default().check(&Knobs::new().with("X", 1i64), &Knobs::new()).unwrap_err();
        assert!(e.to_string().contains("takes no knobs"), "{e}");
    }

    #[test]
    fn knobs_roundtrip_json() {
        let k = Knobs::new().with("BM", 64i64).with("fast", true).with("raster", "row");
        let s = serde_json::to_string(&k).unwrap();
        assert_eq!(s, r#"{"BM":64,"fast":true,"raster":"row"}"#);
        let back: Knobs = serde_json::from_str(&s).unwrap();
        assert_eq!(back, k);
    }
}
