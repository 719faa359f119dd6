//! What the command line hands the library, read strictly: operator selections, `--dims`, `--knobs` and
//! durations. Every bad input is a typed error naming what is wrong (the dim, the knob, the flag) and what is
//! accepted; nothing is clamped, wrapped or silently dropped.

use crate::ir::{KnobValue, Knobs};
use crate::ops::op::{Operator, Preset};
use crate::ops::registry;
use anyhow::{anyhow, bail};
use std::time::Duration;

/// Operators selected by `--op`: an exact operator name selects that operator alone; a family prefix ending in
/// `.` (`gated_mla.`), or a bare family name that is not itself an operator (`gated_mla`), selects the family;
/// `all` selects every operator.
pub fn select_ops(sel: &str) -> anyhow::Result<Vec<Box<dyn Operator>>> {
    let sel = sel.trim();
    let ops = registry::select(sel);
    if ops.is_empty() {
        bail!("no operator matches `--op {sel}`; known: {} (or a family such as `gated_mla`, or `all`)", names());
    }
    Ok(ops)
}

fn names() -> String {
    registry::names().join(", ")
}

/// `NAME=VALUE` pairs of a comma-separated list, trimmed, empty entries skipped; a name given twice is an error.
fn pairs<'a>(flag: &str, s: &'a str) -> anyhow::Result<Vec<(&'a str, &'a str)>> {
    let mut out: Vec<(&str, &str)> = vec![];
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, v) = part.split_once('=').ok_or_else(|| anyhow!("{flag}: expected NAME=VALUE, got `{part}`"))?;
        let (name, v) = (name.trim(), v.trim());
        if name.is_empty() {
            bail!("{flag}: `{part}` has no name before `=`");
        }
        if out.iter().any(|(n, _)| *n == name) {
            bail!("{flag}: `{name}` is given twice");
        }
        out.push((name, v));
    }
    Ok(out)
}

/// A problem from `--dims NAME=INT,...` for `op`: each value an integer, each name once, then the operator's
/// declared dims ([`Operator::check_dims`]: unknown dims, negative values and bounds, the problem's size).
pub fn parse_dims(op: &dyn Operator, s: &str) -> anyhow::Result<Preset> {
    let mut dims = std::collections::BTreeMap::new();
    for (name, v) in pairs("--dims", s)? {
        let value: i64 = v.parse().map_err(|_| match v.parse::<i128>() {
            Ok(_) => anyhow!("--dims: `{name}={v}`: {v} does not fit a 64-bit integer"),
            Err(_) => anyhow!("--dims: `{name}={v}`: `{v}` is not an integer"),
        })?;
        dims.insert(name.to_string(), value);
    }
    if dims.is_empty() {
        bail!("--dims: no dims given (expected NAME=INT,...)");
    }
    let p = Preset { name: format!("custom {}", s.trim()), dims };
    op.check_dims(&p)?;
    Ok(p)
}

/// `--knobs NAME=VALUE,...` on top of `op`'s defaults, each checked against the operator's knob space (the
/// value read in the axis's type, so `OVERLAP=true` on a string axis is the word `true`): an unknown knob or a
/// value outside its axis is an error listing what is allowed. `None` or an empty list: the defaults.
pub fn parse_knobs(op: &dyn Operator, s: Option<&str>) -> anyhow::Result<Knobs> {
    let defaults = op.default_knobs();
    let mut given = Knobs::new();
    for (name, v) in pairs("--knobs", s.unwrap_or(""))? {
        let value = if let Ok(i) = v.parse::<i64>() {
            KnobValue::Int(i)
        } else if let Ok(b) = v.parse::<bool>() {
            KnobValue::Bool(b)
        } else {
            KnobValue::Str(v.to_string())
        };
        given.set(name, value);
    }
    let checked = op.checked_knobs().check(&given, &defaults).map_err(|e| anyhow!("--knobs for {}: {e}", op.name()))?;
    let mut out = defaults;
    for (k, v) in checked.0 {
        out.set(&k, v);
    }
    Ok(out)
}

/// The longest duration a flag takes: 30 days.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// A duration flag (`90s`, `10m`, `1h`, `2d` or plain seconds), at most [`MAX_DURATION`]; `flag` names it in
/// errors.
pub fn parse_duration(flag: &str, s: &str) -> anyhow::Result<Duration> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| anyhow!("{flag}: `{s}` is not like 90s, 10m or 1h"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => bail!("{flag}: unknown unit in `{s}` (use s, m, h or d)"),
    };
    seconds(flag, v * scale)
}

/// A number of seconds given to `flag`, finite, non-negative and at most [`MAX_DURATION`].
pub fn seconds(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        bail!("{flag}: {secs} s is not a duration (a non-negative number of seconds)");
    }
    if secs > MAX_DURATION.as_secs_f64() {
        bail!("{flag}: {secs:.3e} s is more than the 30 days allowed");
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str) -> Box<dyn Operator> {
        registry::all().into_iter().find(|o| o.name() == name).unwrap()
    }

    #[test]
    fn dims_are_trimmed_typed_and_checked() {
        let g = op("latent_moe_gemm");
        let p = parse_dims(g.as_ref(), " G=2 , mean=64,K=256,N=512 ").unwrap();
        assert_eq!(p.dims["G"], 2);
        for (s, want) in [
            ("G=-1,mean=64,K=256,N=512", "`G`: a negative value"),
            ("G=2,G=3,mean=64,K=256,N=512", "`G` is given twice"),
            ("G=x,mean=64,K=256,N=512", "not an integer"),
            ("G=99999999999999999999,mean=64,K=256,N=512", "64-bit"),
            ("G=2,mean=64,K=256,N=512,FOO=7", "`FOO`"),
            ("G=2147483648,mean=64,K=256,N=512", "`G`"),
            ("=2", "no name"),
            ("G", "NAME=VALUE"),
            ("", "no dims"),
        ] {
            let e = format!("{:#}", parse_dims(g.as_ref(), s).unwrap_err());
            assert!(e.contains(want), "{s}: {e}");
        }
        // A dim whose range takes negative values.
        let c = op("hist_quantile.column");
        assert!(parse_dims(c.as_ref(), "T=64,E=4,B=16,lo_milli=-1000").is_ok());
    }

    #[test]
    fn knobs_are_checked_against_the_space() {
        let g = op("latent_moe_gemm");
        assert_eq!(parse_knobs(g.as_ref(), None).unwrap(), g.default_knobs());
        let k = parse_knobs(g.as_ref(), Some(" BM = 64 ")).unwrap();
        assert_eq!(k.int("BM").unwrap(), 64);
        for (s, want) in
            [("bm=64", "`bm`"), ("MMA=tensor", "`MMA`"), ("RASTER=diagonal", "`RASTER`"), ("BM=64,BM=128", "twice")]
        {
            let e = format!("{:#}", parse_knobs(g.as_ref(), Some(s)).unwrap_err());
            assert!(e.contains(want), "{s}: {e}");
        }
        // Plan knobs outside the tuning space are known too.
        assert_eq!(parse_knobs(op("kda").as_ref(), Some("TSPLIT=4")).unwrap().int("TSPLIT").unwrap(), 4);
        assert!(parse_knobs(op("kda").as_ref(), Some("TSPLIT=3")).is_err());
        assert!(parse_knobs(op("gated_mla.decode").as_ref(), Some("NSPLIT=2,DIRECT=0")).is_ok());
    }

    #[test]
    fn durations_are_bounded() {
        assert_eq!(parse_duration("--budget", "90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("--budget", "2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("--budget", "99999999999999999999999h").unwrap_err().to_string().contains("30 days"));
        assert!(parse_duration("--budget", "18000000000000000000").is_err());
        assert!(parse_duration("--budget", "1x").is_err());
        assert!(parse_duration("--budget", "").is_err());
        assert!(seconds("--compile-s", f64::NAN).is_err());
        assert!(seconds("--compile-s", -1.0).is_err());
    }

    #[test]
    fn an_exact_name_selects_one_operator() {
        let names = |s: &str| select_ops(s).unwrap().iter().map(|o| o.name()).collect::<Vec<_>>();
        assert_eq!(names("kda"), ["kda"]);
        assert_eq!(names("kda."), ["kda.decode"]);
        assert_eq!(names("gated_mla").len(), 3);
        assert_eq!(names("gated_mla."), names("gated_mla"));
        assert_eq!(names("all").len(), registry::all().len());
        assert!(select_ops("nope").is_err());
    }
}
