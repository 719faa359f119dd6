//! Every `hist_quantile` kernel of the benchmark presets (default knobs and a spread of other knob points)
//! renders, compiles with NVRTC and assembles with ptxas for sm_90a with no spills; names are unique per
//! program.
use k3k_codegen::{BuildOptions, build};
use k3k_ops::hist_quantile::*;
use k3k_ops::op::Operator;
use std::collections::HashMap;

fn knob_points() -> Vec<k3k_ir::Knobs> {
    let d = default_knobs();
    vec![
        d.clone(),
        d.clone().with("MERGE", "atomic"),
        d.clone().with("HLAYOUT", "rows").with("ASEL", "rank"),
        d.clone().with("HLAYOUT", "rows").with("MERGE", "atomic"),
        d.clone().with("HFX", 32i64),
        d.clone().with("HFX", 4i64),
        d.clone().with("PPACK", "packed"),
        d.clone().with("ATPW", 2i64),
        d.clone().with("ATPW", 2i64).with("ABPS", 3i64),
        d.clone().with("PPACK", "packed").with("HFX", 32i64),
        d.clone().with("AW", 4i64).with("HT", 256i64).with("HU", 4i64).with("HKB", 33i64),
        d.clone().with("AW", 16i64).with("HT", 1024i64).with("HU", 4i64).with("HKB", 132i64),
        d.clone().with("ASEL", "ring").with("LU", 4i64),
        d.clone().with("ASEL", "ring").with("AW", 7i64).with("ASTAGES", 3i64).with("ABPS", 2i64),
        d.clone().with("ASEL", "ring").with("AW", 7i64).with("ASTAGES", 2i64).with("PPACK", "packed").with("LU", 8i64),
        d.clone().with("MERGE", "atomic").with("ASEL", "ring").with("AW", 14i64).with("ASTAGES", 2i64),
        d.clone().with("ASEL", "lean"),
        d.clone().with("ASEL", "lean").with("ABPS", 6i64).with("HBIN", "select"),
        d.clone()
            .with("ASEL", "lean")
            .with("HBIN", "select")
            .with("HKB", 33i64)
            .with("HU", 4i64)
            .with("HBLOCKS", 528i64),
        d.clone().with("HBIN", "select").with("MERGE", "atomic").with("PPACK", "packed"),
        d.clone().with("ASEL", "lean").with("AW", 16i64).with("HBIN", "select").with("HT", 256i64).with("HU", 16i64),
    ]
}

#[test]
fn preset_kernels_compile_without_spills() {
    let ops: [Box<dyn Operator>; 2] = [Box::new(HistQuantileQb), Box::new(HistQuantileColumn)];
    let mut names: HashMap<String, String> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for op in &ops {
        let mut presets = op.bench_presets();
        // Other alpha variants: masked lanes, two lane groups, k = 0.
        if op.name() == OP_QB {
            for (e, k) in [(100, 32), (1024, 63), (37, 0), (1024, 31), (33, 5)] {
                presets.push(k3k_ops::op::Preset::new("x", &[("T", 4096), ("E", e), ("k", k), ("B", 256), ("two", 1)]));
            }
        }
        for p in &presets {
            for kn in knob_points() {
                for k in op.kernels(p, &kn).unwrap() {
                    let h = k3k_ir::stable_hash(&k);
                    if let Some(prev) = names.insert(k.name.clone(), h.clone()) {
                        assert_eq!(prev, h, "two different kernels named {}", k.name);
                    }
                    if !seen.insert(h) {
                        continue;
                    }
                    let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                    let r = m.resources.clone().unwrap();
                    eprintln!(
                        "{}: {} regs, {} B shared, stack {}, spills {}/{}",
                        k.name,
                        r.registers,
                        k.shared_bytes(),
                        r.stack_frame_bytes,
                        r.spill_store_bytes,
                        r.spill_load_bytes
                    );
                    assert!(!r.spills(), "{}: {r:?}", k.name);
                }
            }
        }
    }
}
