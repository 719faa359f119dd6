//! Thread-block clusters on the CPU backends (`cpu::cluster`): the CTAs of a cluster run concurrently, a
//! broken multicast protocol is a typed error (the same from the interpreter and the JIT), and the validator
//! rejects cluster shapes the GPU cannot launch. The positive case (multicast into both CTAs over a reused
//! 2-slot ring, OOB boxes, both backends, NVRTC + ptxas, the GPU) is `tma_multicast_cluster` of
//! `common/cases.rs`.

mod common;

use common::cases::tma_multicast_cluster_with;
use k3k_codegen::cpu::interp::{self, InterpError, InterpOptions};
use k3k_codegen::cpu::jit::{self, Engine};
use k3k_ir::*;

fn both(k: &Kernel, ts: &[HostTensor]) -> [(Result<(), InterpError>, Vec<HostTensor>); 2] {
    let mut a = ts.to_vec();
    let ra = interp::run(k, &mut a, &[], InterpOptions::default());
    let mut b = ts.to_vec();
    let rb = jit::JitKernel::run(&jit::compile(k).expect("lowered"), &mut b, &[], InterpOptions::default());
    [(ra, a), (rb, b)]
}

#[test]
fn multicast_case_runs_compiled_and_matches() {
    let c = tma_multicast_cluster_with(false, false);
    assert!(jit::supports(&c.kernel).is_ok(), "{:?}", jit::supports(&c.kernel));
    let mut t = c.tensors.clone();
    assert_eq!(jit::run(&c.kernel, &mut t, &[], InterpOptions::default()).unwrap(), Engine::Jit);
    (c.check)(&t);
    let [(ra, a), (rb, b)] = both(&c.kernel, &c.tensors);
    ra.unwrap();
    rb.unwrap();
    assert!(a.iter().zip(&b).all(|(x, y)| x.data == y.data), "JIT and interpreter differ");
    (c.check)(&a);
}

#[test]
fn a_dropped_peer_release_is_a_deadlock_on_both_backends() {
    let c = tma_multicast_cluster_with(true, false);
    for (r, _) in both(&c.kernel, &c.tensors) {
        match r {
            Err(InterpError::Deadlock { what, cluster, .. }) => {
                assert!(what.contains("empty"), "{what}");
                assert_eq!(cluster, [0, 0, 0]);
            }
            other => panic!("expected a deadlock, got {other:?}"),
        }
    }
}

#[test]
fn a_refill_without_the_releases_is_caught() {
    // The producers do not wait for the empty barriers: a refill lands in a slot the peer has not read, so its
    // full barrier receives bytes beyond the phase's expectation (or the data is wrong).
    let c = tma_multicast_cluster_with(false, true);
    for (r, ts) in both(&c.kernel, &c.tensors) {
        match r {
            Err(e) => {
                let s = e.to_string();
                assert!(s.contains("mbarrier") || s.contains("deadlock"), "{s}");
            }
            Ok(()) => {
                let bad = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (c.check)(&ts))).is_err();
                assert!(bad, "an unprotected refill went unnoticed");
            }
        }
    }
}

fn cluster_kernel(cluster: [u32; 3], grid: i64, cta: i64, mask: Option<i64>) -> Result<Kernel, IrError> {
    let mut b = KernelBuilder::new("cluster_shape", 32);
    let x = b.tensor("x", DType::Bf16, &[Expr::Int(64), Expr::Int(64)], Access::Read);
    b.grid(grid, 1i64, 1i64);
    b.cluster(cluster);
    let s = b.shared("s", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
    let bar = b.mbarriers("bar", 1);
    let map = b.tensor_map("x_map", x, &[64, 64], Swizzle::Xor16B);
    b.mbar_init(bar, 1);
    b.cluster_sync();
    b.mbar_arrive_cluster(bar, 0i64, cta);
    let dst = b.slot(s, 0i64);
    match mask {
        Some(m) => b.tma_load_multicast(map, dst, vec![Expr::Int(0), Expr::Int(0)], bar, 0i64, m),
        None => b.tma_load(map, dst, vec![Expr::Int(0), Expr::Int(0)], bar, 0i64),
    }
    b.finish()
}

#[test]
fn validator_rejects_bad_cluster_shapes() {
    assert!(cluster_kernel([2, 1, 1], 4, 1, Some(3)).is_ok());
    let msg = |r: Result<Kernel, IrError>| r.expect_err("rejected").to_string();
    assert!(msg(cluster_kernel([3, 3, 1], 9, 0, None)).contains("cluster shape"));
    assert!(msg(cluster_kernel([0, 1, 1], 4, 0, None)).contains("cluster shape"));
    assert!(msg(cluster_kernel([16, 1, 1], 16, 0, None)).contains("cluster shape"));
    assert!(msg(cluster_kernel([2, 1, 1], 3, 0, None)).contains("not a multiple of the cluster"));
    assert!(msg(cluster_kernel([2, 1, 1], 4, 2, None)).contains("cluster CTA rank 2"));
    assert!(msg(cluster_kernel([2, 1, 1], 4, 0, Some(4))).contains("multicast mask"));
    assert!(msg(cluster_kernel([2, 1, 1], 4, 0, Some(0))).contains("multicast mask"));
    assert!(msg(cluster_kernel([1, 1, 1], 4, 0, Some(1))).contains("needs a cluster"));
}

#[test]
fn a_symbolic_grid_that_the_cluster_does_not_tile_is_an_error() {
    let mut b = KernelBuilder::new("cluster_grid", 32);
    let n = b.dim("N");
    let y = b.tensor("y", DType::F32, std::slice::from_ref(&n), Access::Write);
    b.grid(n.clone(), 1i64, 1i64);
    b.cluster([2, 1, 1]);
    b.cluster_sync();
    let _ = y;
    let k = b.finish().unwrap();
    let mut ts = vec![HostTensor::zeros(DType::F32, &[3])];
    let e = interp::run(&k, &mut ts, &[], InterpOptions::default()).unwrap_err();
    assert!(e.to_string().contains("not a multiple of the cluster shape"), "{e}");
    let mut ts = vec![HostTensor::zeros(DType::F32, &[4])];
    interp::run(&k, &mut ts, &[], InterpOptions::default()).unwrap();
    jit::run(&k, &mut ts, &[], InterpOptions::default()).unwrap();
}
