//! The Cranelift JIT (`cpu::jit`) against the interpreter, bit for bit, on every primitive case (one kernel per
//! statement kind: maps, vector maps, reductions, every product form, copies, loads and stores of global and
//! shared places, scans, threads regions with shared stores, atomics and arrays): every case runs compiled and
//! also meets its own check. Errors end a JIT run with the interpreter's error; what the JIT does not lower
//! falls back to the interpreter.

mod common;

use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_codegen::cpu::jit::{self, Engine};

#[test]
fn jit_matches_the_interpreter_bit_for_bit_on_every_primitive_case() {
    let mut compiled = vec![];
    for c in common::cases::all() {
        let mut want = c.tensors.clone();
        interp::run(&c.kernel, &mut want, &c.scalars, InterpOptions::default()).unwrap();
        let mut got = c.tensors.clone();
        let engine = jit::run(&c.kernel, &mut got, &c.scalars, InterpOptions::default()).unwrap();
        // Every statement is lowered: no case may fall back to the interpreter.
        assert!(jit::supports(&c.kernel).is_ok(), "{}: {:?}", c.name, jit::supports(&c.kernel));
        assert_eq!(engine, Engine::Jit, "{}", c.name);
        compiled.push(c.name);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let at = g.data.iter().zip(&w.data).position(|(a, b)| a != b);
            assert!(
                at.is_none() && g.data.len() == w.data.len(),
                "{}: tensor {i} differs between the JIT and the interpreter (first at byte {at:?})",
                c.name
            );
        }
        (c.check)(&got);
    }
    eprintln!("compiled by the JIT: {compiled:?}");
    assert_eq!(compiled.len(), common::cases::all().len());
}

/// A one-block, one-warp kernel over a tensor `x [N]` f32 and an integer argument `D`, whose threads run `body`
/// (given `x` and `D`): the kernels [`same_error`] runs.
fn x_and_d_kernel(
    name: &str,
    body: impl FnOnce(&mut k3k_ir::KernelBuilder, k3k_ir::TensorId, k3k_ir::Expr),
) -> k3k_ir::Kernel {
    use k3k_ir::*;
    let mut b = KernelBuilder::new(name, 32);
    let n = b.dim("N");
    let x = b.tensor("x", DType::F32, &[n], Access::ReadWrite);
    let d = b.int_arg("D");
    b.grid(1i64, 1i64, 1i64);
    b.threads(|b| body(b, x, d));
    b.finish().unwrap()
}

/// Kernel `k` on a tensor `x` of `len` ones with `D = dv` fails with the same error on the interpreter and the
/// JIT, and the message contains `frag`.
fn same_error(k: &k3k_ir::Kernel, len: usize, dv: i64, frag: &str) {
    use k3k_ir::*;
    let t = HostTensor::from_f32(DType::F32, &[len], &vec![1.0; len]);
    let (mut a, mut c) = (vec![t.clone()], vec![t]);
    let e1 = interp::run(k, &mut a, &[("D", SymValue::Int(dv))], InterpOptions::default()).unwrap_err();
    let e2 = jit::compile(k).unwrap().run(&mut c, &[("D", SymValue::Int(dv))], InterpOptions::default()).unwrap_err();
    assert_eq!(e1.to_string(), e2.to_string());
    assert!(e2.to_string().contains(frag), "{e2}");
}

/// Out-of-bounds accesses and integer division by zero end a JIT run with the interpreter's error.
#[test]
fn jit_reports_the_interpreters_errors() {
    use k3k_ir::*;
    let k = x_and_d_kernel("jit_errors", |b, x, d| {
        let t = Expr::thread_idx();
        b.store_scalar(x, t.clone(), Expr::load(x, t.clone() / d) + 1.0);
    });
    for (len, dv, frag) in [(16usize, 1i64, "outside tensor `x`"), (64, 0, "division by zero")] {
        same_error(&k, len, dv, frag);
    }
}

/// Every error a tile, shared-memory or array statement can raise ends a JIT run with the interpreter's error
/// (same message: kernel, block, thread, buffer, index), and the JIT compiles each of these kernels.
#[test]
fn jit_reports_the_interpreters_errors_of_tiles_shared_memory_and_arrays() {
    use k3k_ir::*;
    type Body = Box<dyn Fn(&mut KernelBuilder, TensorId, Expr, SharedId, TileId)>;
    let cases: Vec<(&str, Body, &str)> = vec![
        (
            "tile load",
            Box::new(|b, x, d, _, t| b.load(t, Place::Global(view(x, d, 16i64, 16i64, 16i64, 1)))),
            "tile load index",
        ),
        (
            "tile store",
            Box::new(|b, x, d, _, t| b.store(t, Place::Global(view(x, d, 16i64, 16i64, 16i64, 1)))),
            "tile store index",
        ),
        (
            "async copy",
            Box::new(|b, x, d, s, _| {
                let dst = b.slot(s, 0i64);
                b.copy_async(dst, view(x, d, 16i64, 16i64, 16i64, 1));
            }),
            "async copy index",
        ),
        (
            "vector store",
            Box::new(|b, x, d, _, _| {
                let v = b.vec("v", 16, [1, 1]);
                b.store_vec(v, vec_view(x, d, 1i64, 16i64));
            }),
            "vector store index",
        ),
        (
            "shared tile index",
            Box::new(|b, _, d, s, t| {
                let r = b.slot(s, d / 8);
                b.load(t, Place::Shared(r));
            }),
            "shared `s` tile index",
        ),
        (
            "shared load in a map",
            Box::new(|b, _, d, s, t| b.map(t, Expr::shared_load(s, 0i64, Expr::RowIdx + d / 32, Expr::ColIdx))),
            "thread None: load of shared `s`",
        ),
        (
            "shared store in a region",
            Box::new(|b, _, d, s, _| {
                b.threads(|b| b.shared_store(s, 0i64, Expr::thread_idx() / 16 + d / 16, Expr::thread_idx() % 16, 1.0))
            }),
            "thread Some(",
        ),
        (
            "shared atomic",
            Box::new(|b, _, d, s, _| b.threads(|b| b.atomic_add_shared(s, d / 16, 0i64, Expr::thread_idx() % 16, 1.0))),
            "atomic of shared `s`",
        ),
        (
            "global atomic",
            Box::new(|b, x, d, _, _| b.threads(|b| b.atomic_add_global(x, Expr::thread_idx() + d, 1.0))),
            "atomic index",
        ),
        (
            "array index",
            Box::new(|b, x, d, _, _| {
                b.threads(|b| {
                    let a = b.let_array("a", 4, ScalarTy::Float, 0.5);
                    b.array_set(a, Expr::thread_idx() % 4, 2.0);
                    b.store_scalar(x, Expr::thread_idx(), Expr::array_get(a, Expr::thread_idx() % 4 + d / 32));
                })
            }),
            "array `a` of 4 elements",
        ),
    ];
    for (name, body, frag) in cases {
        let mut b = KernelBuilder::new(&format!("jit_err_{}", name.replace(' ', "_")), 64);
        let x = b.tensor("x", DType::F32, &[Expr::Int(256)], Access::ReadWrite);
        let d = b.int_arg("D");
        let s = b.shared("s", DType::F32, 16, 16, 2, Swizzle::None);
        let t = b.tile("t", DType::F32, 16, 16, [1, 1]);
        b.grid(2i64, 1i64, 1i64);
        body(&mut b, x, d, s, t);
        let k = b.finish().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(jit::supports(&k).is_ok(), "{name}: {:?}", jit::supports(&k));
        let x0 = HostTensor::from_f32(DType::F32, &[256], &(0..256).map(|i| i as f32 * 0.25 - 3.0).collect::<Vec<_>>());
        for (dv, fails) in [(0i64, false), (250, true)] {
            let scalars = [("D", SymValue::Int(dv))];
            let (mut a, mut c) = (vec![x0.clone()], vec![x0.clone()]);
            let e1 = interp::run(&k, &mut a, &scalars, InterpOptions::default());
            let e2 = jit::compile(&k).unwrap().run(&mut c, &scalars, InterpOptions::default());
            match (e1, e2) {
                (Ok(()), Ok(())) if !fails => assert_eq!(a[0].data, c[0].data, "{name}: outputs differ"),
                (Err(e1), Err(e2)) if fails => {
                    assert_eq!(e1.to_string(), e2.to_string(), "{name}");
                    assert!(e2.to_string().contains(frag), "{name}: {e2}");
                }
                (e1, e2) => panic!("{name}, D = {dv}: interpreter {e1:?}, JIT {e2:?}"),
            }
        }
    }
}

/// What the JIT does not lower makes `supports` say why, and `run` falls back to the interpreter (same result).
#[test]
fn jit_declines_what_it_does_not_lower_and_falls_back() {
    use k3k_ir::*;
    // A float tile stored into e8m0 storage (the interpreter has no float -> e8m0 store either).
    let mut b = KernelBuilder::new("jit_decline", 32);
    let x = b.tensor("x", DType::E8m0, &[Expr::Int(64)], Access::ReadWrite);
    let t = b.tile("t", DType::F32, 16, 8, [1, 1]);
    b.grid(1i64, 1i64, 1i64);
    b.map(t, 1.0);
    b.store(t, Place::Global(view(x, 0i64, 8i64, 0i64, 8i64, 1)));
    let k = b.finish().unwrap();
    let why = jit::supports(&k).unwrap_err().to_string();
    assert!(why.contains("not lowered by the JIT"), "{why}");
    // Zero valid rows: nothing is stored, so the interpreter runs it fine.
    let mut ts = vec![HostTensor::zeros(DType::E8m0, &[64])];
    assert_eq!(jit::run(&k, &mut ts, &[], InterpOptions::default()).unwrap(), Engine::Interpreter);
}

/// The JIT rounds to bf16 inline (maps into bf16 tiles and shared buffers, bf16 stores, `round_bf16`): the same
/// bits as the `half` crate for every sign/exponent/high-mantissa pattern with the low bits around every
/// rounding boundary, NaNs (payloads kept, made quiet) and infinities included.
#[test]
fn jit_rounds_to_bf16_like_half_on_every_boundary() {
    use k3k_ir::*;
    let lows = [0u32, 1, 0x3fff, 0x4000, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xc000, 0xffff];
    let xs: Vec<i64> = (0..=0xffffu32).flat_map(|hi| lows.iter().map(move |lo| ((hi << 16) | lo) as i64)).collect();
    let n = xs.len();
    let mut b = KernelBuilder::new("jit_bf16_rounding", 256);
    let x = b.tensor("x", DType::U32, &[Expr::Int(n as i64)], Access::Read);
    let r = b.tensor("r", DType::U32, &[Expr::Int(n as i64)], Access::Write);
    let y = b.tensor("y", DType::Bf16, &[Expr::Int(n as i64)], Access::Write);
    b.grid((n / 256) as i64, 1i64, 1i64);
    b.threads(|b| {
        let i = Expr::Special(Special::BlockIdx(0)) * 256 + Expr::thread_idx();
        let f = Expr::Un(UnOp::FromBits, Box::new(Expr::load(x, i.clone())));
        b.store_scalar(r, i.clone(), Expr::Un(UnOp::Bits, Box::new(Expr::Un(UnOp::RoundBf16, Box::new(f.clone())))));
        b.store_scalar(y, i, f);
    });
    let k = b.finish().unwrap();
    let mut ts = vec![
        HostTensor::from_i64(DType::U32, &[n], &xs),
        HostTensor::zeros(DType::U32, &[n]),
        HostTensor::zeros(DType::Bf16, &[n]),
    ];
    jit::compile(&k).unwrap().run(&mut ts, &[], InterpOptions::default()).unwrap();
    for (i, &v) in xs.iter().enumerate() {
        let want = half::bf16::from_f32(f32::from_bits(v as u32)).to_bits();
        assert_eq!(ts[1].get_i64(i) as u32, (want as u32) << 16, "round_bf16 of {v:#010x}");
        assert_eq!(u16::from_le_bytes([ts[2].data[2 * i], ts[2].data[2 * i + 1]]), want, "bf16 store of {v:#010x}");
    }
}

/// Signalling NaNs written into float tiles and shared buffers come back quiet, as from the interpreter's
/// f64 storage (x86 conversions quiet them), whether written by maps, shared stores, loads or copies.
#[test]
fn jit_quiets_signalling_nans_in_tiles_and_shared_memory_like_the_interpreter() {
    use k3k_ir::*;
    let mut b = KernelBuilder::new("jit_snan", 32);
    let x = b.tensor("x", DType::F32, &[Expr::Int(128)], Access::Read);
    let y = b.tensor("y", DType::U32, &[Expr::Int(6 * 128)], Access::Write);
    let s = b.shared("s", DType::F32, 16, 8, 1, Swizzle::None);
    let t = b.tile("t", DType::F32, 16, 8, [1, 1]);
    b.grid(1i64, 1i64, 1i64);
    let bits_at = |b: &mut KernelBuilder, base: i64| {
        b.threads(|b| {
            let i = Expr::thread_idx();
            for q in 0..4i64 {
                let at = i.clone() * 4 + q;
                let r = at.clone() / 8;
                let c = at.clone() % 8;
                b.store_scalar(y, at.clone() + base, Expr::Un(UnOp::Bits, Box::new(Expr::shared_load(s, 0i64, r, c))));
            }
        });
    };
    // A map of signalling NaN bit patterns, stored to shared through the tile.
    b.map(t, Expr::Un(UnOp::FromBits, Box::new(Expr::Int(0x7f80_0001) + Expr::RowIdx * 8 + Expr::ColIdx)));
    b.store(t, Place::Shared(b.slot(s, 0i64)));
    b.barrier();
    bits_at(&mut b, 0);
    b.barrier();
    // Shared stores of signalling NaNs.
    b.threads(|b| {
        let i = Expr::thread_idx();
        for q in 0..4i64 {
            let at = i.clone() * 4 + q;
            b.shared_store(
                s,
                0i64,
                at.clone() / 8,
                at.clone() % 8,
                Expr::Un(UnOp::FromBits, Box::new(Expr::Int(0xff80_0001) + at)),
            );
        }
    });
    b.barrier();
    bits_at(&mut b, 128);
    b.barrier();
    // Tile loads and async copies of a tensor holding signalling NaNs.
    b.load(t, Place::Global(view(x, 0i64, 8i64, 16i64, 8i64, 1)));
    b.map(t, Expr::Elem(t));
    b.store(t, Place::Shared(b.slot(s, 0i64)));
    b.barrier();
    bits_at(&mut b, 256);
    b.barrier();
    b.copy_async(b.slot(s, 0i64), view(x, 0i64, 8i64, 16i64, 8i64, 1));
    b.commit();
    b.wait(0);
    b.barrier();
    bits_at(&mut b, 384);
    let k = b.finish().unwrap();
    let xs: Vec<f32> = (0..128u32).map(|i| f32::from_bits(0x7f80_0001 + i * 3)).collect();
    let mut xt = HostTensor::zeros(DType::F32, &[128]);
    for (i, v) in xs.iter().enumerate() {
        xt.data[4 * i..4 * i + 4].copy_from_slice(&v.to_bits().to_le_bytes());
    }
    let ts = vec![xt, HostTensor::zeros(DType::U32, &[6 * 128])];
    let (mut a, mut c) = (ts.clone(), ts);
    interp::run(&k, &mut a, &[], InterpOptions::default()).unwrap();
    jit::compile(&k).unwrap().run(&mut c, &[], InterpOptions::default()).unwrap();
    for i in 0..4 * 128 {
        assert_eq!(
            c[1].get_i64(i),
            a[1].get_i64(i),
            "element {i}: JIT {:#x}, interpreter {:#x}",
            c[1].get_i64(i),
            a[1].get_i64(i)
        );
    }
}

/// `DequantFp4` runs compiled and decodes exactly as the interpreter does, bit for bit, for every scale byte
/// (0..=255, so also the bytes that break the `fold` / `finite` promises) and every nibble, under each of the
/// four promise combinations, from windows at an offset inside the second tile of their shared buffers; where
/// the promises hold the result is the exact MXFP4 value `e2m1(q) * 2^(s - 127)` (NaN for s = 255).
#[test]
fn jit_decodes_mxfp4_like_the_interpreter() {
    use k3k_ir::*;
    const E2M1: [f64; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];
    // A bf16 [128, 64] tile on [1, 2] warps (32-column bands); words u32 [128, 16] (window at column 4 of 16),
    // scales u8 [128, 4] (window at column 1), tile 1 of 2 of each buffer.
    let (rows, cols) = (128usize, 64usize);
    let (wcols, scols) = (16usize, 4usize);
    let mut rng = common::Rng::new(7);
    let words: Vec<i64> = (0..2 * rows * wcols).map(|_| (rng.next_u64() as u32) as i64).collect();
    // Each byte 0..=255 once among the 128 x 2 scales the window reads (rows x columns 1..3).
    let mut scales: Vec<i64> = (0..2 * rows * scols).map(|_| rng.int(0, 256)).collect();
    for s in 0..=255usize {
        scales[rows * scols + (s / 2) * scols + 1 + s % 2] = s as i64;
    }
    for (fold, finite) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut b = KernelBuilder::new("jit_dequant_fp4", 64);
        let wq = b.tensor("wq", DType::U32, &[Expr::Int((2 * rows * wcols) as i64)], Access::Read);
        let ws = b.tensor("ws", DType::U8, &[Expr::Int((2 * rows * scols) as i64)], Access::Read);
        let y = b.tensor("y", DType::Bf16, &[Expr::Int(rows as i64), Expr::Int(cols as i64)], Access::Write);
        let sq = b.shared("sq", DType::U32, rows as u32, wcols as u32, 2, Swizzle::None);
        let ss = b.shared("ss", DType::U8, rows as u32, scols as u32, 2, Swizzle::None);
        let t = b.tile("t", DType::Bf16, rows as u32, cols as u32, [1, 2]);
        b.grid(1i64, 1i64, 1i64);
        b.threads(|b| {
            b.for_("i", Expr::thread_idx(), Expr::Int((2 * rows * wcols) as i64), 64i64, |b, i| {
                let at = i.clone() % (rows * wcols) as i64;
                let (tile, r, c) = (i.clone() / (rows * wcols) as i64, at.clone() / wcols as i64, at % wcols as i64);
                b.shared_store(sq, tile, r, c, Expr::load(wq, i));
            });
            b.for_("j", Expr::thread_idx(), Expr::Int((2 * rows * scols) as i64), 64i64, |b, i| {
                let at = i.clone() % (rows * scols) as i64;
                let (tile, r, c) = (i.clone() / (rows * scols) as i64, at.clone() / scols as i64, at % scols as i64);
                b.shared_store(ss, tile, r, c, Expr::load(ws, i));
            });
        });
        b.barrier();
        let (q, s) = (b.window(sq, 1i64, 0, 4, rows as u32, 8), b.window(ss, 1i64, 0, 1, rows as u32, 2));
        b.dequant_fp4(t, q, s, true, fold, finite);
        b.store(t, Place::Global(view(y, 0i64, cols as i64, rows as i64, cols as i64, 2)));
        let k = b.finish().unwrap();
        assert!(jit::supports(&k).is_ok(), "{:?}", jit::supports(&k));
        let ts = vec![
            HostTensor::from_i64(DType::U32, &[2 * rows * wcols], &words),
            HostTensor::from_i64(DType::U8, &[2 * rows * scols], &scales),
            HostTensor::zeros(DType::Bf16, &[rows, cols]),
        ];
        let (mut a, mut c) = (ts.clone(), ts);
        interp::run(&k, &mut a, &[], InterpOptions::default()).unwrap();
        assert_eq!(jit::run(&k, &mut c, &[], InterpOptions::default()).unwrap(), Engine::Jit);
        let at = a[2].data.iter().zip(&c[2].data).position(|(x, y)| x != y);
        assert!(at.is_none(), "fold {fold} finite {finite}: the JIT and the interpreter differ at byte {at:?}");
        let mut checked = 0;
        for r in 0..rows {
            for col in 0..cols {
                let s = scales[rows * scols + r * scols + 1 + col / 32] as u32;
                if (fold && s > 128 && s != 255) || (finite && s == 255) {
                    continue;
                }
                let (w, p) = k3k_ir::fp4::slot(col % 32, true);
                let word = words[rows * wcols + r * wcols + 4 + 4 * (col / 32) + w] as u32;
                let nib = k3k_ir::fp4::code(word, p, true);
                let want = if s == 255 { f32::NAN } else { (E2M1[nib as usize] * 2f64.powi(s as i32 - 127)) as f32 };
                let got = c[2].get_f32(r * cols + col);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "fold {fold} finite {finite} ({r}, {col}): nib {nib} s {s}: {got:e} != {want:e}"
                );
                checked += 1;
            }
        }
        assert!(checked > rows * cols / 3, "fold {fold} finite {finite}: only {checked} values checked");
    }
}

/// A threads region with warp statements runs compiled in lockstep like the interpreter: each thread keeps its
/// own variables and per-thread array across the exchanges (a float xor shuffle, a ballot, an int shuffle up
/// after a syncwarp), reads block-level variables, and a later plain region sees the block's state. An
/// array index out of range in the segment after an exchange ends the run with the interpreter's error (same
/// thread).
#[test]
fn jit_runs_warp_regions_in_lockstep_like_the_interpreter() {
    use k3k_ir::*;
    let (threads, blocks) = (64usize, 3usize);
    let n = threads * blocks;
    let build = |bad: bool| {
        let mut b = KernelBuilder::new("jit_lockstep", threads as u32);
        let x = b.tensor("x", DType::F32, &[Expr::Int(n as i64)], Access::Read);
        let of = b.tensor("of", DType::F32, &[Expr::Int(n as i64)], Access::Write);
        let oi = b.tensor("oi", DType::I64, &[Expr::Int(3 * n as i64)], Access::Write);
        b.grid(blocks as i64, 1i64, 1i64);
        let o = b.let_("o", Expr::block_idx(0) * 1000i64);
        b.threads(|b| {
            let g = b.let_("g", Expr::block_idx(0) * threads as i64 + Expr::thread_idx());
            let a = b.let_array("a", 4, ScalarTy::Float, Expr::lane_idx().to_float());
            b.array_set(a, 1i64, Expr::load(x, g.clone()));
            let v = b.let_("v", Expr::load(x, g.clone()) * 3.0f64);
            let sh = b.warp_shuffle("sh", WarpOp::ShflXor(1), v);
            b.array_set(a, 2i64, sh + Expr::array_get(a, 1i64));
            let w = b.let_("w", o.clone() + Expr::thread_idx());
            let bl = b.warp_shuffle("bl", WarpOp::Ballot, Expr::array_get(a, 2i64).gt(1.0f64));
            b.warp_sync();
            let u = b.warp_shuffle("u", WarpOp::ShflUp(2), &w * 7i64);
            // With `bad`, threads from 37 on read past the array's end.
            let i = if bad { Expr::thread_idx() / 37i64 * 4i64 } else { Expr::Int(0) };
            let s = Expr::array_get(a, i) + Expr::array_get(a, 1i64) + Expr::array_get(a, 2i64);
            b.store_scalar(of, g.clone(), s);
            b.store_scalar(oi, g.clone(), bl + w.clone());
            b.store_scalar(oi, &g + n as i64, u);
        });
        b.threads(|b| {
            let g = b.let_("g", Expr::block_idx(0) * threads as i64 + Expr::thread_idx());
            b.store_scalar(oi, &g + 2 * n as i64, o.clone() + Expr::warp_idx());
        });
        b.finish().unwrap()
    };
    let mut rng = common::Rng::new(11);
    let xs: Vec<f32> = (0..n).map(|_| rng.f32(-1.0, 1.0)).collect();
    let ts = vec![
        HostTensor::from_f32(DType::F32, &[n], &xs),
        HostTensor::zeros(DType::F32, &[n]),
        HostTensor::zeros(DType::I64, &[3 * n]),
    ];
    let k = build(false);
    let (mut a, mut c) = (ts.clone(), ts.clone());
    interp::run(&k, &mut a, &[], InterpOptions::default()).unwrap();
    assert_eq!(jit::run(&k, &mut c, &[], InterpOptions::default()).unwrap(), Engine::Jit);
    for (i, (g, w)) in c.iter().zip(&a).enumerate() {
        assert_eq!(g.data, w.data, "tensor {i} differs between the JIT and the interpreter");
    }
    for g in 0..n {
        let (lane, w0, blk, t) = (g % 32, g - g % 32, g / threads, g % threads);
        let a2 = xs[w0 + (lane ^ 1)] * 3.0 + xs[g];
        assert_eq!(c[1].get_f32(g), lane as f32 + xs[g] + a2, "sum {g}");
        let mask: i64 = (0..32).filter(|&j| xs[w0 + (j ^ 1)] * 3.0 + xs[w0 + j] > 1.0).map(|j| 1i64 << j).sum();
        let w = |t: usize| (blk * 1000 + t) as i64;
        assert_eq!(c[2].get_i64(g), mask + w(t), "ballot {g}");
        assert_eq!(c[2].get_i64(n + g), 7 * w(if lane >= 2 { t - 2 } else { t }), "shfl_up {g}");
        assert_eq!(c[2].get_i64(2 * n + g), (blk * 1000 + t / 32) as i64, "after {g}");
    }
    let k = build(true);
    let (mut a, mut c) = (ts.clone(), ts);
    let e1 = interp::run(&k, &mut a, &[], InterpOptions::default()).unwrap_err();
    let e2 = jit::compile(&k).unwrap().run(&mut c, &[], InterpOptions::default()).unwrap_err();
    assert_eq!(e1.to_string(), e2.to_string());
    assert!(e2.to_string().contains("thread 37: array `a` of 4 elements indexed at 4"), "{e2}");
}

/// A wide access at an index that is not a multiple of its lanes (known only at run time), or past the end of
/// its tensor, ends a JIT run with the interpreter's error.
#[test]
fn jit_reports_the_interpreters_wide_access_errors() {
    use k3k_ir::*;
    let k = x_and_d_kernel("jit_wide_errors", |b, x, d| {
        let a = b.let_array("a", 4, ScalarTy::Float, 0.0);
        let i = Expr::thread_idx() * 4i64 + d;
        b.load_wide(a, 0, x, i.clone(), 4);
        b.store_wide(x, i, a, 0, 4);
    });
    for (len, dv, frag) in [(128usize, 1i64, "not a multiple of its 4 lanes"), (126, 0, "outside tensor `x`")] {
        same_error(&k, len, dv, frag);
    }
}

/// A long straight-line per-thread body (the shape of kda.decode's register-resident state) is compiled with the
/// single-pass register allocator (the backtracking one takes seconds on such bodies) and still runs bit for bit
/// like the interpreter; a short body keeps the backtracking allocator.
#[test]
fn jit_compiles_long_per_thread_bodies_with_the_single_pass_allocator() {
    use k3k_ir::*;
    let build = |steps: usize| {
        let mut b = KernelBuilder::new(&format!("jit_long_body_{steps}"), 32);
        let n = b.dim("N");
        let x = b.tensor("x", DType::F32, &[n], Access::ReadWrite);
        b.grid(1i64, 1i64, 1i64);
        b.threads(|b| {
            let t = Expr::thread_idx();
            // 8 running values, each step mixing two of them: every value stays live to the end.
            let mut v: Vec<Expr> = (0..8i64).map(|i| b.let_("v", Expr::load(x, t.clone() * 8i64 + i))).collect();
            for s in 0..steps {
                let (i, j) = (s % 8, (s * 3 + 1) % 8);
                v[i] = b.let_("v", v[i].clone() * 0.75 + v[j].clone() * 0.5 - 0.125);
            }
            for (i, vi) in v.iter().enumerate() {
                b.store_scalar(x, t.clone() * 8i64 + i as i64, vi.clone());
            }
        });
        b.finish().unwrap()
    };
    assert_eq!(jit::regalloc_for(&build(16)), "backtracking");
    let k = build(600);
    assert_eq!(jit::regalloc_for(&k), "single_pass");
    let vals: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
    let t = HostTensor::from_f32(DType::F32, &[256], &vals);
    let (mut want, mut got) = (vec![t.clone()], vec![t]);
    interp::run(&k, &mut want, &[], InterpOptions::default()).unwrap();
    jit::compile(&k).unwrap().run(&mut got, &[], InterpOptions::default()).unwrap();
    assert_eq!(got[0].data, want[0].data, "single-pass JIT == interpreter");
    assert_ne!(got[0].data, vals.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), "the kernel wrote x");
}
