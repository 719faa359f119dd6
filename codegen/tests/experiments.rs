//! The timing experiments of `K3K_EXPERIMENT` (see `k3k_codegen::EXPERIMENTS`): each one compiles (NVRTC and
//! ptxas, no spills) for the `fp4_gemv` primitive, register and shared-memory rings, and removes what it says; names are parsed strictly.

mod common;

use common::cases;
use k3k_codegen::{ARCH, EXPERIMENTS, nvrtc, parse_experiments, ptxas, render, with_experiments};

/// The PTX of a kernel's source with the given experiments defined.
fn ptx(k: &k3k_ir::Kernel, xp: &[&str]) -> String {
    let src = with_experiments(&render(k).unwrap(), xp);
    let out = nvrtc::compile_ptx(&k.name, &src, ARCH).unwrap_or_else(|e| panic!("{}: {xp:?}: {e}", k.name));
    let a = ptxas::assemble(&k.name, &out.ptx, ARCH).unwrap_or_else(|e| panic!("{}: {xp:?}: {e}", k.name));
    assert!(!a.resources.spills(), "{} {xp:?} spills: {:?}", k.name, a.resources);
    out.ptx
}

fn count(ptx: &str, what: &str) -> usize {
    ptx.matches(what).count()
}

#[test]
fn each_experiment_compiles_and_removes_its_work() {
    for case in [cases::fp4_gemv(), cases::fp4_gemv_staged()] {
        let k = &case.kernel;
        let base = ptx(k, &[]);
        let mma = count(&base, "mma.sync.aligned.m16n8k16");
        let mul = count(&base, "mul.rn.bf16x2") + count(&base, "mul.bf16x2");
        assert!(mma > 0 && mul > 0, "{}: the baseline multiplies and scales ({mma} mma, {mul} mul)", k.name);
        for (name, _) in EXPERIMENTS {
            let x = ptx(k, &[name]);
            assert_ne!(x, base, "{} {name}: the program is unchanged", k.name);
            let (xm, xs) =
                (count(&x, "mma.sync.aligned.m16n8k16"), count(&x, "mul.rn.bf16x2") + count(&x, "mul.bf16x2"));
            match name {
                "NOSCALE" => assert!(xm == mma && xs < mul, "{} {name}: {xm} mma, {xs} mul", k.name),
                "NODECODE" => assert!(xm == mma && xs < mul, "{} {name}: {xm} mma, {xs} mul", k.name),
                "NOMMA" => assert!(xm == 0 && xs > 0, "{} {name}: {xm} mma, {xs} mul", k.name),
                "NOMATH" => assert!(xm == 0 && xs < mul, "{} {name}: {xm} mma, {xs} mul", k.name),
                other => panic!("experiment {other} has no test"),
            }
        }
    }
}

#[test]
fn experiment_names_are_parsed_strictly() {
    assert_eq!(parse_experiments("").unwrap(), Vec::<&str>::new());
    assert_eq!(parse_experiments("nodecode, NOMMA").unwrap(), vec!["NODECODE", "NOMMA"]);
    let e = parse_experiments("NODECODE,FAST").unwrap_err().to_string();
    assert!(e.contains("K3K_EXPERIMENT") && e.contains("`FAST`") && e.contains("NOSCALE"), "{e}");
    let src = with_experiments("int x;", &["NOMATH"]);
    assert_eq!(src, "#define K3K_XP_NOMATH 1\nint x;");
    assert_eq!(with_experiments("int x;", &[]), "int x;", "no experiment: the source as rendered");
}

/// `Stmt::Fp4Gemv`'s `l2_prefetch` (the staged ring's L2 prefetch size): 0, 64, 128 or 256, and only with `staged`;
/// the validator names it otherwise. (The primitive cases build the staged kernel at every size: `primitives.rs`.)
#[test]
fn l2_prefetch_is_validated() {
    use k3k_ir::{Stmt, validate};
    fn set(k: &mut k3k_ir::Kernel, v: u32) {
        for s in &mut k.body {
            if let Stmt::Fp4Gemv(g) = s {
                g.l2_prefetch = v;
            }
        }
    }
    let mut staged = cases::fp4_gemv_staged().kernel;
    validate(&staged).unwrap();
    set(&mut staged, 100);
    let e = validate(&staged).unwrap_err().to_string();
    assert!(e.contains("l2_prefetch 100"), "{e}");
    let mut ring = cases::fp4_gemv().kernel;
    set(&mut ring, 128);
    let e = validate(&ring).unwrap_err().to_string();
    assert!(e.contains("l2_prefetch 128") && e.contains("staged"), "{e}");
}
