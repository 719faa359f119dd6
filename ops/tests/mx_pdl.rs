//! `mxfp4_matmul` with `PDL=true` (programmatic dependent launches between the plan's kernels): which kernel
//! waits for or releases which, the same output bits as plain launches on the CPU interpreter (where launches
//! run one after another and the statements are no-ops), every output within the f64 check, and the
//! `griddepcontrol` instructions in the rendered CUDA.
use k3k_ir::{GridDep, Knobs, Stmt};
use k3k_ops::mx::matmul::*;
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::Executor;
use rand::{Rng, SeedableRng, rngs::StdRng};

#[path = "common/mx_run.rs"]
#[allow(dead_code)]
mod mx_run;
use mx_run::{knobs, run};

/// The grid-dependency statements at the start of a kernel's body, in order.
fn leading_deps(k: &k3k_ir::Kernel) -> Vec<GridDep> {
    k.body.iter().map_while(|s| if let Stmt::GridDep(d) = s { Some(*d) } else { None }).collect()
}

/// MXFP8 activations (a dequant launch before main) with and without a K split's finalize after it, and bf16
/// activations with a split: each kernel waits for the one before it and releases the one after it, the names
/// say so, and nothing else in the kernels changes; the outputs are the plain launches' bits and pass the
/// reference check.
#[test]
fn pdl_chains_the_plan_kernels_and_keeps_the_results() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let dense = |m: i64, k: i64, n: i64, act: i64| {
        Preset::new(
            &format!("pdl M{m} K{k} N{n} act{act}"),
            &[("M", m), ("K", k), ("N", n), ("act", act), ("packed", 1)],
        )
    };
    let split_fin = |bm: i64| knobs(&[("BM", bm), ("SPLIT", 2), ("BK", 64)]).with("FIN", "kernel").with("MMA", "sync");
    let gemv = knobs(&[("BM", 8), ("SPLIT", 1)]).with("PATH", "gemv");
    // (preset, knobs, the leading grid dependencies of the dequant, main and finalize kernels)
    type Case = (Preset, Knobs, [Vec<GridDep>; 3]);
    use GridDep::{LaunchDependents as L, Wait as W};
    let cases: Vec<Case> = vec![
        // dequant -> gemv
        (dense(8, 256, 48, 1), gemv, [vec![L], vec![W], vec![]]),
        // dequant -> main -> finalize
        (dense(20, 256, 40, 1), split_fin(16), [vec![L], vec![W, L], vec![W]]),
        // main -> finalize (bf16 activations)
        (dense(20, 256, 40, 0), split_fin(16), [vec![], vec![L], vec![W]]),
        // one launch (split summed in the kernel): nothing to chain
        (dense(20, 256, 40, 0), knobs(&[("BM", 16), ("SPLIT", 2), ("BK", 64)]).with("FIN", "last"), Default::default()),
    ];
    for (p, kn, want) in &cases {
        let on = kn.clone().with("PDL", true);
        let inst = Mxfp4Matmul.instance(p, rng.random()).unwrap();
        let (plain, pdl) = (inst.plan(kn).unwrap(), inst.plan(&on).unwrap());
        assert_eq!(plain.steps.len(), pdl.steps.len(), "{}", p.name);
        // `want` is (dequant, main, finalize), the kernels' roles by name.
        let role = |name: &str| {
            if name.starts_with("k3k_mx_dequantize") {
                0
            } else if name.starts_with("k3k_mxfp4_mm_finalize") {
                2
            } else {
                1
            }
        };
        let roles: Vec<usize> = plain.steps.iter().map(|s| role(&s.kernel.name)).collect();
        assert_eq!(roles.iter().filter(|&&r| r == 1).count(), 1, "{}: one main kernel", p.name);
        for (step, (a, b)) in roles.iter().zip(plain.steps.iter().zip(&pdl.steps)) {
            let deps = leading_deps(&b.kernel);
            assert_eq!(deps, want[*step], "{} step {step}: {}", p.name, b.kernel.name);
            assert_eq!(b.kernel.waits_on_prior_grid(), deps.contains(&GridDep::Wait), "{}", b.kernel.name);
            assert!(leading_deps(&a.kernel).is_empty(), "{}: plain launches have no grid dependency", a.kernel.name);
            // The main kernel's name comes from its knobs (PDL=true among them), the others get `_pdl`.
            if *step == 1 {
                assert_eq!(a.kernel.name.replacen("_pfo", "_pdltrue_pfo", 1), b.kernel.name);
            } else if deps.is_empty() {
                assert_eq!(a.kernel.name, b.kernel.name);
            } else {
                assert_eq!(format!("{}_pdl", a.kernel.name), b.kernel.name);
            }
            if !deps.is_empty() {
                // (Debug strings: the bodies hold NaN constants, which `==` never matches.)
                let (rest, orig) = (format!("{:?}", &b.kernel.body[deps.len()..]), format!("{:?}", &a.kernel.body[..]));
                assert!(rest == orig, "{}: more than the grid dependencies changed", b.kernel.name);
                let cuda = k3k_codegen::render(&b.kernel).unwrap();
                for d in &deps {
                    let ins =
                        if *d == GridDep::Wait { "griddepcontrol.wait;" } else { "griddepcontrol.launch_dependents;" };
                    assert!(cuda.contains(ins), "{}: {ins} not rendered", b.kernel.name);
                }
            }
        }
        let y = |plan| Executor::Cpu.run(plan).unwrap().get("y").unwrap().data.clone();
        assert_eq!(y(&plain), y(&pdl), "{} [{on}]: PDL changed the output", p.name);
        run(p, rng.random(), &on);
    }
}

/// The resolved configuration records `PDL=true` (so a tuned record re-resolves to the same kernels), and the
/// knob reads as a bool.
#[test]
fn pdl_is_recorded_and_read_as_a_bool() {
    let p = Preset::new("pdl", &[("M", 8), ("K", 256), ("N", 48), ("act", 1), ("packed", 1)]);
    let ks = Mxfp4Matmul.kernels(&p, &default_knobs().with("PDL", true)).unwrap();
    assert_eq!(ks[0].knobs.bool("PDL").ok(), Some(true), "{}", ks[0].knobs);
    let again = Mxfp4Matmul.kernels(&p, &ks[0].knobs).unwrap();
    assert_eq!(again.iter().map(|k| &k.name).collect::<Vec<_>>(), ks.iter().map(|k| &k.name).collect::<Vec<_>>());
    let plain = Mxfp4Matmul.kernels(&p, &default_knobs()).unwrap();
    assert!(plain[0].knobs.bool("PDL").is_err(), "absent by default: {}", plain[0].knobs);
    let bad = Mxfp4Matmul.kernels(&p, &default_knobs().with("PDL", "maybe"));
    assert!(bad.is_err(), "PDL=maybe accepted");
}
