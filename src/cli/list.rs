//! `k3k list`.

use k3k::ops::registry;

/// Arguments of `k3k list`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only this operator (or family).
    #[arg(long)]
    pub op: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let ops = match &a.op {
        Some(s) => super::select_ops(s)?,
        None => registry::all(),
    };
    if a.json {
        let v: Vec<_> = ops
            .iter()
            .map(|o| {
                serde_json::json!({"op": o.name(), "summary": o.summary(), "knobs": o.knob_space(),
                    "default_knobs": o.default_knobs(), "presets": o.bench_presets()})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    for o in ops {
        println!("{}\n  {}", o.name(), o.summary());
        println!("  knobs (space of {} points before pruning; default {}):", o.knob_space().size(), o.default_knobs());
        for ax in o.knob_space().axes {
            let vals: Vec<String> = ax.values.iter().map(|v| v.to_string()).collect();
            println!("    {:<8} {{{}}}  {}", ax.name, vals.join(", "), ax.doc);
        }
        println!("  benchmark presets:");
        for p in o.bench_presets() {
            let dims: Vec<String> = p.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("    {:<32} --dims {}", p.name, dims.join(","));
        }
        println!();
    }
    Ok(0)
}
