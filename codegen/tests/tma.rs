//! TMA + mbarrier semantics on the CPU backends: a broken barrier protocol (which would hang or corrupt a GPU
//! run) is a typed error, the same from the interpreter and the JIT; the validator rejects TMA destinations and
//! maps the copy engine cannot serve. The positive case (two phases, OOB boxes, both backends and the GPU) is
//! `tma_mbarrier` of `common/cases.rs`.

mod common;

use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_codegen::cpu::jit::{self, Engine};
use k3k_ir::*;

/// One 64x64 bf16 tile loaded by TMA from x [rows, 64] and waited on; `bytes` announced, `parity` waited for,
/// `arrive_extra` more arrivals on the full barrier, `skip_init` leaves the barrier uninitialized.
fn kernel(bytes: u32, parity: i64, arrive_extra: bool, skip_init: bool) -> Kernel {
    let mut b = KernelBuilder::new("tma_protocol", 128);
    let m = b.dim("M");
    let x = b.tensor("x", DType::Bf16, &[m.clone(), Expr::Int(64)], Access::Read);
    let y = b.tensor("y", DType::F32, &[Expr::Int(64), Expr::Int(64)], Access::Write);
    let s = b.shared("s", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
    let t = b.tile("t", DType::F32, 64, 64, [4, 1]);
    let full = b.mbarriers("full", 1);
    let map = b.tensor_map("x_map", x, &[64, 64], Swizzle::Xor16B);
    if !skip_init {
        b.mbar_init(full, 1);
    }
    b.mbar_arrive_expect_tx(full, 0i64, bytes);
    if arrive_extra {
        b.mbar_arrive(full, 0i64);
    }
    let dst = b.slot(s, 0i64);
    b.tma_load(map, dst, vec![Expr::Int(0), Expr::Int(0)], full, 0i64);
    b.mbar_wait(full, 0i64, parity);
    b.load(t, Place::Shared(b.slot(s, 0i64)));
    b.store(t, Place::Global(view(y, 0i64, 64i64, 64i64, 64i64, 2)));
    b.finish().unwrap()
}

fn run_both(k: &Kernel) -> (Result<Vec<HostTensor>, String>, Result<Vec<HostTensor>, String>) {
    let xs = HostTensor::from_f32(DType::Bf16, &[50, 64], &(0..50 * 64).map(|i| (i % 97) as f32).collect::<Vec<_>>());
    let mut yt = HostTensor::zeros(DType::F32, &[64, 64]);
    yt.poison();
    let ts = vec![xs, yt];
    let (mut a, mut c) = (ts.clone(), ts);
    let e1 = interp::run(k, &mut a, &[], InterpOptions::default()).map(|_| a).map_err(|e| e.to_string());
    assert!(jit::supports(k).is_ok(), "{:?}", jit::supports(k));
    let e2 = jit::compile(k).unwrap().run(&mut c, &[], InterpOptions::default()).map(|_| c).map_err(|e| e.to_string());
    (e1, e2)
}

#[test]
fn a_correct_protocol_runs_and_rows_past_the_tensor_read_zero_on_both_backends() {
    let k = kernel(64 * 64 * 2, 0, false, false);
    let (a, c) = run_both(&k);
    let (a, c) = (a.unwrap(), c.unwrap());
    assert_eq!(a[1].data, c[1].data, "JIT and interpreter differ");
    let y = a[1].to_f32_vec();
    for r in 0..64 {
        for col in 0..64 {
            let want = if r < 50 { ((r * 64 + col) % 97) as f32 } else { 0.0 };
            assert_eq!(y[r * 64 + col], want, "[{r}, {col}]");
        }
    }
    let _ = Engine::Jit;
}

#[test]
fn protocol_errors_are_typed_and_identical_on_both_backends() {
    let cases: [(Kernel, &str); 5] = [
        // expect_tx announces fewer bytes than the box delivers: the phase would complete early.
        (kernel(4096, 0, false, false), "more than expect_tx announced"),
        // more bytes than the copies deliver: the wait never returns.
        (kernel(64 * 64 * 2 + 16, 0, false, false), "would hang"),
        // the wrong parity: waits for a phase that has not started.
        (kernel(64 * 64 * 2, 1, false, false), "would hang"),
        // 128 arrivals on a barrier that expects one.
        (kernel(64 * 64 * 2, 0, true, false), "more arrivals than the count"),
        (kernel(64 * 64 * 2, 0, false, true), "before mbar_init"),
    ];
    for (k, frag) in cases {
        let (a, c) = run_both(&k);
        let (a, c) = (a.unwrap_err(), c.unwrap_err());
        assert_eq!(a, c);
        assert!(a.contains(frag) && a.contains("mbarrier `full`[0]"), "{a}");
    }
}

#[test]
fn the_validator_rejects_what_the_copy_engine_cannot_do() {
    let build = |rows_bytes_64: bool, swz: Swizzle, box_rows: u32, row0: u32, bar_ok: bool| {
        let mut b = KernelBuilder::new("tma_bad", 128);
        let m = b.dim("M");
        let cols = if rows_bytes_64 { 32 } else { 64 };
        let x = b.tensor("x", DType::Bf16, &[m, Expr::Int(cols as i64)], Access::Read);
        let s = b.shared("s", DType::Bf16, 304, cols, 1, swz);
        let full = b.mbarriers("full", 1);
        let map = b.tensor_map("x_map", x, &[cols, box_rows], Swizzle::Xor16B);
        b.mbar_init(full, 1);
        let dst = b.window(s, 0i64, row0, 0, box_rows, cols);
        let bar = if bar_ok { full } else { MbarId(7) };
        b.tma_load(map, dst, vec![Expr::Int(0), Expr::Int(0)], bar, 0i64);
        b.finish()
    };
    assert!(build(false, Swizzle::Xor16B, 64, 8, true).is_ok());
    let bad = [
        (build(true, Swizzle::Xor16B, 64, 0, true), "exactly 128 with the Xor16B"),
        (build(false, Swizzle::None, 64, 0, true), "swizzle"),
        (build(false, Swizzle::Xor16B, 257, 0, true), "box dim 257"),
        (build(false, Swizzle::Xor16B, 64, 4, true), "multiples of 1024"),
        (build(false, Swizzle::Xor16B, 64, 0, false), "no mbarrier declaration #7"),
    ];
    for (r, frag) in bad {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(frag), "{e}");
    }
}

/// The host-side checks before `cuTensorMapEncodeTiled`: each bad argument is an error naming the tensor.
#[test]
fn tensor_map_parameters_are_checked_and_named() {
    use k3k_codegen::tensor_map::{TensorMapError, map_params};
    let k = kernel(64 * 64 * 2, 0, false, false);
    let m = &k.tensor_maps[0];
    // x [50, 64] bf16: dims innermost first, the row stride in bytes, the box.
    assert_eq!(map_params(&k, m, &[50, 64], 0x1000).unwrap(), (vec![64, 50], vec![128], vec![64, 64]));
    let e = map_params(&k, m, &[50, 64], 0x1008).unwrap_err();
    assert!(matches!(&e, TensorMapError::Misaligned { arg, .. } if arg == "x"), "{e}");
    // 36 bf16 per row: a 72-byte stride.
    let e = map_params(&k, m, &[50, 36], 0x1000).unwrap_err();
    assert!(matches!(&e, TensorMapError::Stride { arg, bytes: 72, .. } if arg == "x"), "{e}");
    assert!(e.to_string().contains("tensor `x`") && e.to_string().contains("x_map"), "{e}");
    let e = map_params(&k, m, &[0, 64], 0x1000).unwrap_err();
    assert!(matches!(&e, TensorMapError::Shape { .. }), "{e}");
}

/// A 64x64 tile (`(64 r + c) % 97`) stored to y [64, 64] through one staging buffer by a bulk store; `rewrite`: the program then
/// overwrites the staging buffer with another tile (`waited`: after retiring the store with a wait, as it must).
fn bulk_store_kernel(rewrite: bool, waited: bool) -> Kernel {
    let mut b = KernelBuilder::new("tma_store", 128);
    let y = b.tensor("y", DType::Bf16, &[Expr::Int(64), Expr::Int(64)], Access::Write);
    let s = b.shared("s", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
    let t = b.tile("t", DType::F32, 64, 64, [4, 1]);
    let map = b.tensor_map("y_map", y, &[64, 64], Swizzle::Xor16B);
    b.map(t, ((Expr::RowIdx * 64i64 + Expr::ColIdx) % 97i64).to_float());
    b.store_cols(t, 0, b.slot(s, 0i64));
    b.tma_store(map, b.slot(s, 0i64), vec![Expr::Int(0), Expr::Int(0)]);
    if rewrite {
        if waited {
            b.tma_store_wait(0);
        }
        b.map(t, -1.0f64);
        b.store_cols(t, 0, b.slot(s, 0i64));
    }
    b.finish().unwrap()
}

#[test]
fn a_bulk_store_reads_its_source_up_to_the_wait_that_retires_it() {
    let run = |k: &Kernel| -> (Vec<f32>, Vec<f32>) {
        let mut y = HostTensor::zeros(DType::Bf16, &[64, 64]);
        y.poison();
        let (mut a, mut c) = (vec![y.clone()], vec![y]);
        interp::run(k, &mut a, &[], InterpOptions::default()).unwrap();
        assert!(jit::supports(k).is_ok(), "{:?}", jit::supports(k));
        jit::compile(k).unwrap().run(&mut c, &[], InterpOptions::default()).unwrap();
        (a[0].to_f32_vec(), c[0].to_f32_vec())
    };
    let want: Vec<f32> = (0..64 * 64).map(|i| (i % 97) as f32).collect();
    // Stored and never touched again, or rewritten after the wait: both backends store the tile.
    for k in [bulk_store_kernel(false, false), bulk_store_kernel(true, true)] {
        let (a, c) = run(&k);
        assert_eq!(a, want, "{}", k.name);
        assert_eq!(c, want, "{}", k.name);
    }
    // Rewritten before any wait: the copy engine may read the new contents; both backends read at the latest
    // moment (here the block's end) and store them, so the program's check fails on the CPU.
    let (a, c) = run(&bulk_store_kernel(true, false));
    assert!(a.iter().all(|&v| v == -1.0), "the interpreter read the source before it was rewritten");
    assert!(c.iter().all(|&v| v == -1.0), "the JIT read the source before it was rewritten");
}
