//! Shared buffers that reuse another buffer's bytes (`SharedAlias`): validation, layout, and the CPU backends'
//! model (the first write into a buffer poisons every buffer sharing its storage), identical in the interpreter
//! and the JIT, so a program that reads data an aliased write clobbered fails.

use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_codegen::cpu::jit::{self, Engine};
use k3k_ir::*;

/// Root `sA` (f32, 256 elements = 1 KB); `sB` (bf16, 64 = 128 bytes) at offset 0 and `sC` (f32 16x8 = 512
/// bytes) at offset 512: `sB` and `sC` are disjoint, both overlap the root. Phases, one barrier apart:
/// 1. write sA, read it back (out[0..32]);
/// 2. write sB and sC (tile store for sC), read both (out[32..64], out[64..96]);
/// 3. (`stale`) read sA again: its bytes were reused, so out[96..128] must be poison;
///    (else) write sA again and read it (out[96..128] = 3x).
fn kernel(stale: bool) -> Kernel {
    let mut b = KernelBuilder::new(if stale { "alias_stale" } else { "alias_ok" }, 32);
    let n = b.dim("N");
    let x = b.tensor("x", DType::F32, std::slice::from_ref(&n), Access::Read);
    let out = b.tensor("out", DType::F32, &[Expr::Int(128)], Access::Write);
    b.grid(1i64, 1i64, 1i64);
    let sa = b.shared("sA", DType::F32, 1, 256, 1, Swizzle::None);
    let sb = b.shared_alias("sB", DType::Bf16, 1, 64, 1, Swizzle::None, sa, 0);
    let sc = b.shared_alias("sC", DType::F32, 16, 8, 1, Swizzle::None, sa, 512);
    let tc = b.tile("tC", DType::F32, 16, 8, [1, 1]);
    b.threads(|b| {
        let t = Expr::thread_idx();
        b.shared_store(sa, 0i64, 0i64, t.clone(), Expr::load(x, t.clone()));
    });
    b.barrier();
    b.threads(|b| {
        let t = Expr::thread_idx();
        b.store_scalar(out, t.clone(), Expr::shared_load(sa, 0i64, 0i64, t.clone()));
    });
    b.barrier();
    b.threads(|b| {
        let t = Expr::thread_idx();
        b.shared_store(sb, 0i64, 0i64, t.clone(), Expr::load(x, t.clone()) * 2.0);
    });
    b.map(tc, (Expr::RowIdx * 8i64 + Expr::ColIdx).to_float() + 100.0);
    let d = b.slot(sc, 0i64);
    b.store(tc, Place::Shared(d));
    b.barrier();
    b.threads(|b| {
        let t = Expr::thread_idx();
        b.store_scalar(out, t.clone() + 32i64, Expr::shared_load(sb, 0i64, 0i64, t.clone()));
        b.store_scalar(out, t.clone() + 64i64, Expr::shared_load(sc, 0i64, t.clone() / 8i64, t.clone() % 8i64));
    });
    b.barrier();
    if !stale {
        b.threads(|b| {
            let t = Expr::thread_idx();
            b.shared_store(sa, 0i64, 0i64, t.clone(), Expr::load(x, t.clone()) * 3.0);
        });
        b.barrier();
    }
    b.threads(|b| {
        let t = Expr::thread_idx();
        b.store_scalar(out, t.clone() + 96i64, Expr::shared_load(sa, 0i64, 0i64, t.clone()));
    });
    b.finish().unwrap()
}

fn run_both(k: &Kernel) -> Vec<f32> {
    let xs: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 0.25).collect();
    let mk = || vec![HostTensor::from_f32(DType::F32, &[32], &xs), HostTensor::zeros(DType::F32, &[128])];
    let (mut a, mut c) = (mk(), mk());
    interp::run(k, &mut a, &[], InterpOptions::default()).unwrap();
    assert_eq!(jit::run(k, &mut c, &[], InterpOptions::default()).unwrap(), Engine::Jit);
    assert_eq!(a[1].data, c[1].data, "{}: the JIT differs from the interpreter", k.name);
    a[1].to_f32_vec()
}

#[test]
fn aliased_buffers_share_bytes_and_stale_reads_see_poison() {
    let xs: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 0.25).collect();
    for stale in [false, true] {
        let k = kernel(stale);
        let (offsets, total) = k.shared_layout();
        assert_eq!((offsets[1], offsets[2], total), (offsets[0], offsets[0] + 512, 1024), "{}", k.name);
        let o = run_both(&k);
        for i in 0..32 {
            assert_eq!(o[i], xs[i], "phase 1, {i}");
            assert_eq!(o[32 + i], 2.0 * xs[i], "sB, {i}");
            assert_eq!(o[64 + i], (100 + i) as f32, "sC (disjoint from sB), {i}");
            if stale {
                assert!(o[96 + i].is_nan(), "stale read of the root at {i}: {} (not poison)", o[96 + i]);
            } else {
                assert_eq!(o[96 + i], 3.0 * xs[i], "root rewritten, {i}");
            }
        }
    }
    // The CUDA renderer places the aliases inside their root.
    let src = k3k_codegen::render(&kernel(false)).unwrap();
    assert!(src.contains("s1 = k3k_smem + 0;") && src.contains("s2 = k3k_smem + 512;"), "{src}");
}

#[test]
fn bad_aliases_are_rejected() {
    let build = |of_alias: bool, offset: u32, rows: u32| {
        let mut b = KernelBuilder::new("bad_alias", 32);
        b.grid(1i64, 1i64, 1i64);
        let sa = b.shared("sA", DType::F32, 1, 64, 1, Swizzle::None);
        let sb = b.shared_alias("sB", DType::F32, 1, 32, 1, Swizzle::None, sa, 0);
        b.shared_alias("sC", DType::F32, rows, 32, 1, Swizzle::None, if of_alias { sb } else { sa }, offset);
        b.finish().map(|_| ()).map_err(|e| e.to_string())
    };
    assert_eq!(build(false, 128, 1), Ok(()));
    assert!(build(false, 128, 2).unwrap_err().contains("do not fit"));
    assert!(build(false, 64, 1).unwrap_err().contains("multiple of 128"));
    assert!(build(true, 0, 1).unwrap_err().contains("itself an alias"));
}
