//! `k3k fingerprint`: the IR and rendered-CUDA hashes of an operator's kernels, to check that a change leaves
//! kernels as they were (see `k3k::fingerprint`).

use k3k::codegen::CODEGEN_VERSION;
use k3k::fingerprint::{Fingerprint, Source, every_point, to_text};

/// Arguments of `k3k fingerprint`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Operator name, family prefix or `all`.
    #[arg(long, default_value = "all")]
    pub op: String,
    /// One benchmark preset (default: all of each operator's).
    #[arg(long)]
    pub preset: Option<String>,
    /// Problems by their dims instead of presets, separated by `;` (each a preset named `custom <dims>`, for the one
    /// operator of `--op`), e.g. `B=1,T=64,H=2,K=128,gate=1,bias=1` to cover kernel variants no preset builds.
    #[arg(long, conflicts_with = "preset")]
    pub dims: Option<String>,
    /// Every point of the knob space that builds, not only the default knobs (the decode's space holds about
    /// 1.3 million points: a minute per preset on two cores).
    #[arg(long)]
    pub every_point: bool,
    /// With `--every-point`: spaces larger than this are sampled (the same points every run; e.g. 100000 for
    /// hist_quantile's 6 million points).
    #[arg(long)]
    pub sample: Option<usize>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let mut out: Vec<Fingerprint> = vec![];
    for op in super::select_ops(&a.op)? {
        let presets = match (&a.preset, &a.dims) {
            (Some(p), _) => vec![super::pick_preset(op.as_ref(), Some(p), None)?],
            (None, Some(d)) => d
                .split(';')
                .filter(|s| !s.trim().is_empty())
                .map(|s| super::pick_preset(op.as_ref(), None, Some(s.trim())))
                .collect::<anyhow::Result<_>>()?,
            (None, None) => op.bench_presets(),
        };
        for preset in presets {
            if a.every_point {
                out.extend(every_point(op.as_ref(), &preset, a.sample)?);
            } else {
                let knobs = op.default_knobs();
                for k in &op.kernels(&preset, &knobs)? {
                    out.push(Fingerprint::of(op.name(), &preset.name, Source::Default, &knobs, k)?);
                }
            }
        }
    }
    eprintln!("{} kernels", out.len());
    print!("{}", to_text(CODEGEN_VERSION, &out));
    Ok(0)
}
