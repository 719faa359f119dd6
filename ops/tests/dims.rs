//! Every operator declares its dims (`Operator::check_dims`): its benchmark presets and its random check cases
//! pass, and unknown, negative, out-of-bound or huge dims are typed errors naming the dim, from `check_dims`,
//! `kernels` and `instance` alike, before anything is allocated.

use k3k_ops::op::Preset;
use k3k_ops::registry;
use rand::SeedableRng;
use rand::rngs::StdRng;

#[test]
fn presets_and_random_cases_pass_the_declared_dims() {
    for op in registry::all() {
        for p in op.bench_presets() {
            op.check_dims(&p).unwrap_or_else(|e| panic!("{} preset `{}`: {e}", op.name(), p.name));
        }
        let mut rng = StdRng::seed_from_u64(43);
        for _ in 0..3000 {
            let p = op.random_case(&mut rng);
            op.check_dims(&p).unwrap_or_else(|e| panic!("{} case `{}`: {e}", op.name(), p.name));
        }
    }
}

/// A benchmark preset with one dim changed or added.
fn with(p: &Preset, dim: &str, v: i64) -> Preset {
    let mut q = p.clone();
    q.dims.insert(dim.into(), v);
    q
}

#[test]
fn bad_dims_are_typed_errors_naming_the_dim() {
    for op in registry::all() {
        let base = op.bench_presets().remove(0);
        let knobs = op.default_knobs();
        let mut bad = vec![("FOO".to_string(), with(&base, "FOO", 7))];
        for dim in base.dims.keys() {
            for v in [-1i64, 1 << 31, i64::MAX, i64::MIN] {
                bad.push((dim.clone(), with(&base, dim, v)));
            }
        }
        for (dim, p) in &bad {
            let e = op.check_dims(p).expect_err(&format!("{} {:?}", op.name(), p.dims)).to_string();
            assert!(e.contains(&format!("`{dim}`")) || e.contains("elements"), "{}: {e}", op.name());
            assert!(!e.contains("18446744073709551615"), "{}: {e}", op.name());
            assert!(op.kernels(p, &knobs).is_err(), "{} kernels {:?}", op.name(), p.dims);
            assert!(op.instance(p, 1).is_err(), "{} instance {:?}", op.name(), p.dims);
        }
    }
}

#[test]
fn unknown_dims_list_the_accepted_ones() {
    let op = registry::select("mxfp4_matmul").remove(0);
    let p = with(&op.bench_presets()[0], "pakced", 1);
    let e = op.check_dims(&p).unwrap_err().to_string();
    assert!(e.contains("`pakced`") && e.contains("`packed`") && e.contains("`c0..c{G-1}`"), "{e}");
    // A member of a family past its count.
    let lmg = registry::select("latent_moe_gemm").remove(0);
    let p = Preset::new("x", &[("G", 2), ("c0", 1), ("c1", 1), ("c2", 1), ("K", 64), ("N", 64)]);
    assert!(lmg.check_dims(&p).unwrap_err().to_string().contains("past G = 2"));
    // Many groups of many rows: bounded before the counts are drawn.
    let p = Preset::new("x", &[("G", 4096), ("mean", 1 << 20), ("K", 4096), ("N", 4096)]);
    assert!(lmg.check_dims(&p).unwrap_err().to_string().contains("elements"));
}
