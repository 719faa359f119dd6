//! Kernel fingerprints: what keeps a tuned record and the kernel it was measured on the same program.
//!
//! A tuning record is found by its key ([`crate::tuning::tune_key`]): the operator, the stable hash of the IR of
//! its kernels at the default knobs, [`CODEGEN_VERSION`], NVRTC, the GPU and the shape bucket. Two changes slip
//! past that key and would hand out a record measured on another kernel:
//! - the renderer or the CUDA prelude changes the CUDA of an unchanged IR without a [`CODEGEN_VERSION`] bump;
//! - an operator's builder changes the IR of a tuned (non-default) knob point while its default kernels stay the
//!   same, so the key still matches.
//!
//! And one change breaks the key where it should not: a builder change that alters the default kernels' IR
//! without changing what they compute (a renamed variable) makes every record of the preset stop applying, and
//! the tuned knobs silently fall back to the defaults. A tuned line of the file with no tuned kernel now is named.
//!
//! A fingerprint file (`results/<gpu>/fingerprints.txt`) lists, for every operator and benchmark preset, the
//! kernels at the default knobs and at the knobs the store hands out ([`crate::tuning::tuned_knobs`]): the
//! kernels model crates get from `k3k-build` and `k3k bench` times. Each line holds the stable hash of the
//! kernel's IR and of its rendered CUDA. [`compare`] names every line that breaks one of the three rules against
//! the kernels this build makes; `tests/fingerprints.rs` runs it, and `K3K_BLESS=1` rewrites the file after an
//! intended change (a version bump, a re-tune, or a change that cannot move a timing).

use crate::tuning::tuned_record;
use anyhow::{Context, bail};
use k3k_codegen::{CODEGEN_VERSION, render};
use k3k_ir::hash::{hash_str, stable_hash};
use k3k_ir::{Kernel, Knobs};
use k3k_ops::op::Operator;
use k3k_tuner::ResultsStore;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Where a fingerprinted kernel's knobs come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The operator's default knobs.
    Default,
    /// The knobs the results store hands out for the preset (a tuned record).
    Tuned,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Tuned => "tuned",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "default" => Some(Source::Default),
            "tuned" => Some(Source::Tuned),
            _ => None,
        }
    }
}

/// One kernel of one operator preset at one knob set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub op: String,
    pub preset: String,
    pub source: Source,
    pub knobs: String,
    pub kernel: String,
    /// Stable hash of the kernel's printed IR.
    pub ir: String,
    /// Stable hash of its rendered CUDA C.
    pub cuda: String,
}

impl Fingerprint {
    /// The fingerprint of kernel `k`, one of `op`'s at `preset` and `knobs`.
    pub fn of(op: &str, preset: &str, source: Source, knobs: &Knobs, k: &Kernel) -> anyhow::Result<Self> {
        let cuda = render(k).with_context(|| format!("{op}: rendering {}", k.name))?;
        Ok(Fingerprint {
            op: op.into(),
            preset: preset.into(),
            source,
            knobs: knobs.to_string(),
            kernel: k.name.clone(),
            ir: stable_hash(k),
            cuda: hash_str(&cuda),
        })
    }

    /// What a line is matched on between two files.
    fn id(&self) -> (String, String, Source, String, String) {
        (self.op.clone(), self.preset.clone(), self.source, self.knobs.clone(), self.kernel.clone())
    }
}

/// The fingerprints of `ops` at every benchmark preset: the default knobs' kernels and, where the store holds a
/// record for the GPU `gpu_slug`, the tuned knobs' kernels.
pub fn collect(ops: &[Box<dyn Operator>], store: &ResultsStore, gpu_slug: &str) -> anyhow::Result<Vec<Fingerprint>> {
    let mut out = vec![];
    for op in ops {
        let gpu = store.load(gpu_slug, op.name()).ok().flatten().map(|f| f.gpu);
        for preset in op.bench_presets() {
            let mut sets = vec![(Source::Default, op.default_knobs())];
            if let Some((knobs, _)) = gpu.as_ref().and_then(|gpu| tuned_record(store, op.as_ref(), &preset, gpu)) {
                sets.push((Source::Tuned, knobs));
            }
            for (source, knobs) in sets {
                let kernels = op
                    .kernels(&preset, &knobs)
                    .with_context(|| format!("{} {}: kernels at {knobs}", op.name(), preset.name))?;
                for k in &kernels {
                    out.push(Fingerprint::of(op.name(), &preset.name, source, &knobs, k)?);
                }
            }
        }
    }
    Ok(out)
}

/// The fingerprints of `op`'s kernels at `preset` for every point of its knob space that builds (points rejected
/// as invalid knobs are skipped), in the space's order, or for a fixed sample of `limit` points in a seeded order
/// when the space is larger: a refactor of a builder or of the renderer that should not change any kernel is
/// checked by comparing two such lists (`k3k fingerprint --every-point`).
pub fn every_point(
    op: &dyn Operator,
    preset: &k3k_ops::op::Preset,
    limit: Option<usize>,
) -> anyhow::Result<Vec<Fingerprint>> {
    use rayon::prelude::*;
    let space = op.knob_space();
    let points: Vec<_> = match limit {
        Some(n) if space.size() > n => space.shuffled(0).take(n).collect(),
        _ => space.points(),
    };
    let per_point: Vec<anyhow::Result<Vec<Fingerprint>>> = points
        .par_iter()
        .map(|knobs| {
            let kernels = match op.kernels(preset, knobs) {
                Ok(k) => k,
                Err(k3k_ops::OpError::InvalidKnobs { .. }) => return Ok(vec![]),
                Err(e) => return Err(anyhow::anyhow!("{} {} at {knobs}: {e}", op.name(), preset.name)),
            };
            kernels.iter().map(|k| Fingerprint::of(op.name(), &preset.name, Source::Default, knobs, k)).collect()
        })
        .collect();
    Ok(per_point.into_iter().collect::<anyhow::Result<Vec<_>>>()?.into_iter().flatten().collect())
}

const HEADER: &str =
    "# k3k kernel fingerprints: op, preset, knob source, knobs, kernel, IR hash, CUDA hash (tab-separated)";

/// The file text of `fps` for codegen version `version`.
pub fn to_text(version: u32, fps: &[Fingerprint]) -> String {
    let mut s = format!("{HEADER}\n# codegen {version}\n");
    for f in fps {
        let _ =
            writeln!(s, "{}\t{}\t{}\t{}\t{}\t{}\t{}", f.op, f.preset, f.source.name(), f.knobs, f.kernel, f.ir, f.cuda);
    }
    s
}

/// A fingerprint file back: its codegen version and lines. A malformed file is an error naming the line.
pub fn parse(text: &str) -> anyhow::Result<(u32, Vec<Fingerprint>)> {
    let mut version = None;
    let mut fps = vec![];
    for (i, line) in text.lines().enumerate() {
        if let Some(v) = line.strip_prefix("# codegen ") {
            version = Some(v.trim().parse::<u32>().with_context(|| format!("line {}: codegen version {v:?}", i + 1))?);
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let [op, preset, source, knobs, kernel, ir, cuda] = f[..] else {
            bail!("line {}: expected 7 tab-separated fields, got {}", i + 1, f.len());
        };
        let source = Source::parse(source).with_context(|| format!("line {}: knob source {source:?}", i + 1))?;
        fps.push(Fingerprint {
            op: op.into(),
            preset: preset.into(),
            source,
            knobs: knobs.into(),
            kernel: kernel.into(),
            ir: ir.into(),
            cuda: cuda.into(),
        });
    }
    let version = version.context("no `# codegen N` line")?;
    Ok((version, fps))
}

/// How the kernels of this build differ from a fingerprint file.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Broken rules, one line each (see the module docs).
    pub violations: Vec<String>,
    /// Kernels of this build the file does not list (new presets, knobs or kernels; a file to bless).
    pub unlisted: usize,
    /// Lines whose IR changed while nothing says a record could be reused for it (default knobs: the tuning
    /// key changed with it).
    pub ir_changed: usize,
}

/// Compare this build's fingerprints `now` (at [`CODEGEN_VERSION`]) with a file's (`version`, `old`).
pub fn compare(version: u32, old: &[Fingerprint], now: &[Fingerprint]) -> Comparison {
    let old: BTreeMap<_, _> = old.iter().map(|f| (f.id(), f)).collect();
    let mut c = Comparison::default();
    if version != CODEGEN_VERSION {
        c.violations.push(format!(
            "the file was written at codegen version {version}, this build is {CODEGEN_VERSION}: bless it"
        ));
        return c;
    }
    // A preset whose tuned record applied when the file was written and applies no more: the record is keyed by
    // the hash of the default kernels' IR, so a builder change that alters that IR (even a renamed variable)
    // silently drops the tuned knobs users got (on 2026-12-06 the M64 records were found lost this way).
    let tuned_now: std::collections::BTreeSet<_> =
        now.iter().filter(|f| f.source == Source::Tuned).map(|f| (&f.op, &f.preset)).collect();
    let lost: std::collections::BTreeSet<_> = old
        .values()
        .filter(|f| f.source == Source::Tuned && !tuned_now.contains(&(&f.op, &f.preset)))
        .map(|f| (&f.op, &f.preset))
        .collect();
    for (op, preset) in lost {
        c.violations.push(format!(
            "{op} {preset}: its tuned record no longer applies (the tuning key hashes the default kernels' IR, which \
             changed): keep the default IR, re-tune, or bless if the record is meant to go"
        ));
    }
    for f in now {
        let Some(o) = old.get(&f.id()) else {
            c.unlisted += 1;
            continue;
        };
        let what = format!("{} {} {} knobs {} kernel {}", f.op, f.preset, f.source.name(), f.knobs, f.kernel);
        if o.ir == f.ir {
            if o.cuda != f.cuda {
                c.violations.push(format!(
                    "{what}: same IR, different CUDA at codegen version {CODEGEN_VERSION}: a renderer or prelude change \
                     needs a CODEGEN_VERSION bump (tuned records would be reused for other kernels)"
                ));
            }
        } else if f.source == Source::Tuned {
            c.violations.push(format!(
                "{what}: the IR of a tuned point changed while its record still applies (the tuning key hashes the \
                 default kernels only): re-tune, or bless if the change cannot move its timing"
            ));
        } else {
            c.ir_changed += 1;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(source: Source, ir: &str, cuda: &str) -> Fingerprint {
        Fingerprint {
            op: "op".into(),
            preset: "p".into(),
            source,
            knobs: "A=1".into(),
            kernel: "k".into(),
            ir: ir.into(),
            cuda: cuda.into(),
        }
    }

    #[test]
    fn text_round_trips() {
        let fps = vec![fp(Source::Default, "aa", "bb"), fp(Source::Tuned, "cc", "dd")];
        let (v, back) = parse(&to_text(7, &fps)).unwrap();
        assert_eq!(v, 7);
        assert_eq!(back, fps);
        assert!(parse("op\tp\n").unwrap_err().to_string().contains("line 1"));
        assert!(parse("# nothing\n").is_err());
    }

    #[test]
    fn the_three_rules_and_what_passes() {
        let v = CODEGEN_VERSION;
        // Unchanged, or IR changed at default knobs (its tuning key changed with it): no violation.
        let c = compare(v, &[fp(Source::Default, "aa", "bb")], &[fp(Source::Default, "aa", "bb")]);
        assert!(c.violations.is_empty());
        let c = compare(v, &[fp(Source::Default, "aa", "bb")], &[fp(Source::Default, "a2", "b2")]);
        assert!(c.violations.is_empty());
        assert_eq!(c.ir_changed, 1);
        // Same IR, other CUDA: the renderer changed without a version bump.
        let c = compare(v, &[fp(Source::Default, "aa", "bb")], &[fp(Source::Default, "aa", "b2")]);
        assert!(c.violations[0].contains("CODEGEN_VERSION bump"), "{:?}", c.violations);
        // A tuned point's IR changed while its record still applies.
        let c = compare(v, &[fp(Source::Tuned, "aa", "bb")], &[fp(Source::Tuned, "a2", "b2")]);
        assert!(c.violations[0].contains("re-tune"), "{:?}", c.violations);
        // A tuned record that applied and applies no more (its default IR changed): named.
        let c = compare(
            v,
            &[fp(Source::Default, "aa", "bb"), fp(Source::Tuned, "cc", "dd")],
            &[fp(Source::Default, "a2", "b2")],
        );
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        assert!(c.violations[0].contains("op p: its tuned record no longer applies"), "{:?}", c.violations);
        // New kernels are counted, not violations; another version asks for a bless.
        let c = compare(v, &[], &[fp(Source::Tuned, "aa", "bb")]);
        assert_eq!((c.violations.len(), c.unlisted), (0, 1));
        let c = compare(v + 1, &[], &[]);
        assert!(c.violations[0].contains("bless"));
    }
}
