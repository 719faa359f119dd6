//! The validator's tests.

use super::*;

mod unit {
    use super::*;
    use crate::builder::{KernelBuilder, view};
    use crate::expr::TensorId;
    use crate::fp4_gemv::{Fp4Ring, Fp4Staging};
    use crate::mx::Fp4Flags;

    fn small() -> KernelBuilder {
        let mut b = KernelBuilder::new("t", 128);
        let m = b.dim("M");
        b.tensor("x", DType::F32, &[m], Access::Read);
        b
    }

    #[test]
    fn solo_tile_rules() {
        // Solo tiles on [2, 1] of 8 warps: maps among solo tiles of the same warps, products into a solo
        // accumulator and stores pass; a map into a tile that is not solo, a row reduction, a register A operand of
        // a replicated accumulator fail.
        type Body<'a> = &'a dyn Fn(&mut KernelBuilder, [TileId; 3], VecId, SharedId);
        let build = |f: Body| {
            let mut b = KernelBuilder::new("s", 256);
            let sh = b.shared("a", DType::Bf16, 32, 32, 1, Swizzle::Xor16B);
            let acc = b.tile("acc", DType::F32, 32, 32, [2, 1]);
            let op = b.tile("op", DType::Bf16, 32, 32, [2, 1]);
            let r = b.tile("r", DType::F32, 32, 32, [2, 1]);
            let v = b.vec("v", 32, [2, 1]);
            b.solo(acc);
            b.solo(op);
            f(&mut b, [acc, op, r], v, sh);
            b.finish().map(|_| ()).map_err(|e| e.msg)
        };
        let src = |b: &KernelBuilder, sh| Operand::Shared { src: b.slot(sh, 0i64), transpose: false };
        build(&|b, [acc, op, _], _, sh| {
            b.map(acc, 0.0f64);
            let (x, y) = (src(b, sh), src(b, sh));
            b.mma(acc, x, y);
            b.map(op, Expr::Elem(acc) * 2.0);
            let y = src(b, sh);
            b.mma(acc, Operand::Reg(op), y);
            b.store(acc, Place::Shared(b.slot(sh, 0i64)));
        })
        .unwrap();
        let e = build(&|b, [acc, _, r], _, _| b.map(r, Expr::Elem(acc))).unwrap_err();
        assert!(e.contains("not solo"), "{e}");
        let e = build(&|b, [acc, _, _], v, _| b.reduce(v, acc, ReduceOp::Sum, false)).unwrap_err();
        assert!(e.contains("solo tile"), "{e}");
        let e = build(&|b, [_, op, r], _, sh| {
            let y = src(b, sh);
            b.mma(r, Operand::Reg(op), y)
        })
        .unwrap_err();
        assert!(e.contains("solo accumulator"), "{e}");
        // The printed kernel (its hash) says which tiles are solo; a kernel without any prints as before.
        let printed = |solo: bool| {
            let mut b = KernelBuilder::new("p", 64);
            let t = b.tile("t", DType::F32, 16, 16, [1, 1]);
            if solo {
                b.solo(t);
            }
            b.map(t, 0.0f64);
            crate::print::kernel(&b.finish().unwrap())
        };
        let (plain, solo) = (printed(false), printed(true));
        assert!(!plain.contains("solo") && solo.contains("warps=1x1 solo"), "{solo}");
    }

    #[test]
    fn mma_async_accumulator_layouts() {
        // A 256-thread block (two warpgroups) multiplying a [64, 64] register A by a [64 keys, 64 cols] B stored
        // [K, N] into an accumulator on `acc_warps`; `transpose` reads B as [N, K] instead.
        let build = |acc_warps: [u32; 2], a_warps: [u32; 2], transpose: bool| {
            let mut b = KernelBuilder::new("w", 256);
            let sh = b.shared("v", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
            let p = b.tile("p", DType::Bf16, 64, 64, a_warps);
            let acc = b.tile("acc", DType::F32, 64, 64, acc_warps);
            b.map(p, 1.0f64);
            let src = b.slot(sh, 0i64);
            b.mma_async(acc, Operand::Reg(p), Operand::Shared { src, transpose });
            b.mma_wait(0);
            b.finish().map(|_| ()).map_err(|e| e.msg)
        };
        // Replicated over the second warpgroup, and split by columns over both (32 columns each).
        build([4, 1], [4, 1], false).unwrap();
        build([4, 1], [4, 1], true).unwrap();
        build([4, 2], [4, 1], false).unwrap();
        // Column bands read a [K, N] B only; the register A keeps the row bands [4, 1]; bands use every warp.
        assert!(build([4, 2], [4, 1], true).unwrap_err().contains("N-contiguous"));
        assert!(build([4, 2], [4, 2], false).unwrap_err().contains("warps [4, 1]"));
        let e = build([2, 2], [2, 1], false).unwrap_err();
        assert!(e.contains("64 rows per warpgroup"), "{e}");
    }

    #[test]
    fn producer_rules() {
        // A producer-warp kernel whose producer body assigns a variable the skeleton declared.
        let build = |threads: u32, warp: bool, f: &dyn Fn(&mut KernelBuilder, VarId, SharedId, TensorId)| {
            let mut b = KernelBuilder::new("p", threads);
            let m = b.dim("M");
            let x = b.tensor("x", DType::F32, std::slice::from_ref(&m), Access::Read);
            let y = b.tensor("y", DType::F32, &[m], Access::Write);
            let sh = b.shared("s", DType::F32, 16, 16, 1, Swizzle::None);
            if warp {
                b.producer_warp();
            }
            let v = b.let_var("cursor", Expr::load(x, 0i64).to_int());
            f(&mut b, v, sh, y);
            b.finish()
        };
        let ok = |b: &mut KernelBuilder, v: VarId, _: SharedId, _: TensorId| {
            b.for_("i", 0i64, 4i64, 1i64, |b, i| b.producer(|b| b.assign(v, Expr::Var(v) + i)));
        };
        let k = build(128, true, &ok).unwrap();
        assert_eq!(k.launch_threads(), 128 + PRODUCER_THREADS);
        let kind = |r: Result<Kernel, IrError>| r.map(|_| ()).map_err(|e| (e.kind, e.msg));
        // Without a producer warp, or consumer threads that are not whole warpgroups.
        let e = kind(build(128, false, &ok)).unwrap_err();
        assert!(e.1.contains("needs a producer-warp kernel"), "{e:?}");
        let e = kind(build(64, true, &ok)).unwrap_err();
        assert!(e.0 == IrErrorKind::Resource && e.1.contains("whole warpgroups"), "{e:?}");
        let e = kind(build(1024, true, &ok)).unwrap_err();
        assert!(e.1.contains("exceed 1024"), "{e:?}");
        // Tile statements inside a producer body; a producer-owned variable read by the skeleton.
        let e = kind(build(128, true, &|b, _, sh, _| {
            let t = b.tile("t", DType::F32, 16, 16, [1, 1]);
            let r = b.slot(sh, 0i64);
            b.producer(|b| b.load(t, Place::Shared(r)));
        }))
        .unwrap_err();
        assert!(e.1.contains("inside a `producer` body"), "{e:?}");
        let e = kind(build(128, true, &|b, v, _, _| {
            b.producer(|b| b.assign(v, 1i64));
            b.if_(Expr::Var(v).gt(0i64), |_| {});
        }))
        .unwrap_err();
        assert!(e.1.contains("assigned by the producer warp"), "{e:?}");
        // The skeleton both roles run reads no shared memory and no tensor the kernel writes.
        let e = kind(build(128, true, &|b, _, sh, _| {
            b.let_var("s0", Expr::shared_load(sh, 0i64, 0i64, 0i64));
        }))
        .unwrap_err();
        assert!(e.1.contains("block-level control of a producer-warp kernel"), "{e:?}");
        let e = kind(build(128, true, &|b, _, _, y| {
            b.let_var("y0", Expr::load(y, 0i64));
        }))
        .unwrap_err();
        assert!(e.1.contains("which the kernel writes"), "{e:?}");
    }

    #[test]
    fn in_turn_rules() {
        // A kernel of `threads` consumer threads whose body `f` builds around a turn.
        let build = |threads: u32, f: &dyn Fn(&mut KernelBuilder, SharedId)| {
            let mut b = KernelBuilder::new("t", threads);
            let m = b.dim("M");
            let _y = b.tensor("y", DType::F32, &[m], Access::Write);
            let sh = b.shared("s", DType::F32, 16, 16, 1, Swizzle::None);
            f(&mut b, sh);
            b.finish()
        };
        let kind = |r: Result<Kernel, IrError>| r.map(|_| ()).map_err(|e| (e.kind, e.msg));
        let ok = |b: &mut KernelBuilder, _: SharedId| {
            b.for_("i", 0i64, 4i64, 1i64, |b, i| {
                b.in_turn(|b| {
                    let j = b.let_("j", i + 1i64);
                    b.if_(j.gt(2i64), |_| {});
                })
            });
        };
        let k = build(256, &ok).unwrap();
        assert!(crate::print::kernel(&k).contains("in turn {"));
        // Turns need two whole warpgroups.
        for threads in [128, 192] {
            let e = kind(build(threads, &ok)).unwrap_err();
            assert!(e.0 == IrErrorKind::Shape && e.1.contains("at least two whole consumer warpgroups"), "{e:?}");
        }
        // Nothing inside that waits for the other warpgroup: barriers (also in a loop and a scan), nested turns,
        // an elected wait outside a producer body.
        let e = kind(build(256, &|b, _| b.in_turn(|b| b.for_("i", 0i64, 2i64, 1i64, |b, _| b.barrier())))).unwrap_err();
        assert!(e.1.contains("a barrier inside an `in_turn` body"), "{e:?}");
        let e = kind(build(256, &|b, sh| {
            let t = b.tile("t", DType::F32, 16, 16, [1, 1]);
            b.in_turn(|b| b.scan_rows(t, sh));
        }))
        .unwrap_err();
        assert!(e.1.contains("a barrier inside an `in_turn` body"), "{e:?}");
        let e = kind(build(256, &|b, _| b.in_turn(|b| b.in_turn(|_| {})))).unwrap_err();
        assert!(e.1.contains("a nested `in_turn`"), "{e:?}");
        let e = kind(build(256, &|b, _| {
            let bar = b.mbarriers("full", 1);
            b.mbar_init(bar, 1);
            b.in_turn(|b| b.mbar_wait_elected(bar, 0i64, 0i64));
        }))
        .unwrap_err();
        assert!(e.1.contains("an elected mbarrier wait outside a producer body"), "{e:?}");
        // Not inside a threads region.
        let e = kind(build(256, &|b, _| b.threads(|b| b.in_turn(|_| {})))).unwrap_err();
        assert!(e.0 == IrErrorKind::Scope && e.1.contains("`in_turn` is a block-level statement"), "{e:?}");
    }

    #[test]
    fn elected_warpgroup_rules() {
        let build = |threads: u32, w: u32, producer: bool| {
            let mut b = KernelBuilder::new("t", threads);
            b.elected_warpgroup(w);
            if producer {
                b.producer_warp();
            }
            b.finish().map(|k| crate::print::kernel(&k)).map_err(|e| e.msg)
        };
        assert!(build(256, 1, false).unwrap().contains("elected_warpgroup = 1"));
        assert!(!build(256, 0, false).unwrap().contains("elected_warpgroup"));
        for (threads, w, producer) in [(128, 1, false), (256, 2, false), (256, 1, true)] {
            let e = build(threads, w, producer).unwrap_err();
            assert!(e.contains("elected_warpgroup"), "{e}");
        }
    }

    #[test]
    fn first_warpgroups_rules() {
        // A kernel of `threads` threads with a [64, 16] tile `t` and row vector `v` on [4, 1] warps, a [64, 16]
        // tile `u` on [4, 2] warps and a shared buffer: `f` builds the body.
        type Body = dyn Fn(&mut KernelBuilder, [TileId; 2], VecId, SharedId);
        let build = |threads: u32, f: &Body| {
            let mut b = KernelBuilder::new("t", threads);
            let m = b.dim("M");
            let _y = b.tensor("y", DType::F32, &[m], Access::Write);
            let sh = b.shared("s", DType::F32, 64, 16, 1, Swizzle::None);
            let t = b.tile("t", DType::F32, 64, 16, [4, 1]);
            let u = b.tile("u", DType::F32, 64, 16, if threads == 256 { [4, 2] } else { [4, 1] });
            let v = b.vec("v", 64, [4, 1]);
            f(&mut b, [t, u], v, sh);
            b.finish()
        };
        let kind = |r: Result<Kernel, IrError>| r.map(|_| ()).map_err(|e| (e.kind, e.msg));
        // Warpgroup 0 computes `t` and its row sums and stores them; everyone reads the buffer after a barrier.
        fn ok(b: &mut KernelBuilder, [t, u]: [TileId; 2], v: VecId, sh: SharedId) {
            b.first_warpgroups(1, |b| {
                let x = b.let_("x", 2i64);
                b.for_("i", 0i64, 2i64, 1i64, |b, _| {
                    b.map(t, Expr::RowIdx.to_float() * x.clone().to_float());
                    b.reduce(v, t, ReduceOp::Sum, false);
                    b.map(t, Expr::RowVal(v));
                });
                let dst = b.slot(sh, 0i64);
                b.store(t, Place::Shared(dst));
            });
            b.barrier();
            b.map(u, Expr::shared_load(sh, 0i64, Expr::RowIdx, Expr::ColIdx));
        }
        let k = build(256, &ok).unwrap();
        assert!(crate::print::kernel(&k).contains("first 1 warpgroups {"));
        // At least one warpgroup more than the body's, whole warpgroups.
        let e = kind(build(128, &|b, [t, _], _, _| b.first_warpgroups(1, |b| b.map(t, 0.0f64)))).unwrap_err();
        assert!(e.0 == IrErrorKind::Shape && e.1.contains("needs at least 2 whole warpgroups"), "{e:?}");
        // A tile or vector of the body mentioned outside it (or in a body of another count).
        let e = kind(build(256, &|b, [t, u], v, sh| {
            ok(b, [t, u], v, sh);
            b.map(t, 0.0f64);
        }))
        .unwrap_err();
        assert!(e.0 == IrErrorKind::Scope && e.1.contains("tile `t` is mentioned inside"), "{e:?}");
        let e = kind(build(256, &|b, [t, u], v, sh| {
            ok(b, [t, u], v, sh);
            b.vec_map(v, 1.0f64);
        }))
        .unwrap_err();
        assert!(e.1.contains("vector `v` is mentioned inside a `first_warpgroups` body and outside"), "{e:?}");
        let e = kind(build(384, &|b, [t, _], _, _| {
            b.first_warpgroups(1, |b| b.map(t, 0.0f64));
            b.first_warpgroups(2, |b| b.map(t, 1.0f64));
        }))
        .unwrap_err();
        assert!(e.1.contains("in bodies of other counts"), "{e:?}");
        // A tile on more warps than the body runs.
        let e = kind(build(256, &|b, [_, u], _, _| b.first_warpgroups(1, |b| b.map(u, 0.0f64)))).unwrap_err();
        assert!(e.0 == IrErrorKind::Layout && e.1.contains("tile `u` on warps [4, 2]"), "{e:?}");
        // Nothing that waits for or spreads over the skipping warpgroups; no assignment of outer variables.
        let e = kind(build(256, &|b, _, _, _| b.first_warpgroups(1, |b| b.barrier()))).unwrap_err();
        assert!(e.0 == IrErrorKind::Scope && e.1.contains("`barrier` inside a `first_warpgroups` body"), "{e:?}");
        let e = kind(build(256, &|b, _, _, _| b.first_warpgroups(1, |b| b.threads(|_| {})))).unwrap_err();
        assert!(e.1.contains("`threads region` inside a `first_warpgroups` body"), "{e:?}");
        let e = kind(build(256, &|b, _, _, _| b.first_warpgroups(1, |b| b.first_warpgroups(1, |_| {})))).unwrap_err();
        assert!(e.1.contains("`first_warpgroups` inside a `first_warpgroups` body"), "{e:?}");
        let e = kind(build(256, &|b, _, _, _| {
            let x = b.let_var("x", 0i64);
            b.first_warpgroups(1, |b| b.assign(x, 1i64));
        }))
        .unwrap_err();
        assert!(e.1.contains("variable `x` is introduced outside the `first_warpgroups` body"), "{e:?}");
        // Products started in the body are waited for in it.
        let mma = |wait: bool| {
            move |b: &mut KernelBuilder, _: [TileId; 2], _: VecId, _: SharedId| {
                let sa = b.shared("a", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
                let acc = b.tile("acc", DType::F32, 64, 64, [4, 1]);
                b.first_warpgroups(1, |b| {
                    let (a, w) = (b.slot(sa, 0i64), b.slot(sa, 0i64));
                    b.mma_async_init(
                        acc,
                        Operand::Shared { src: a, transpose: false },
                        Operand::Shared { src: w, transpose: true },
                        false,
                    );
                    if wait {
                        b.mma_wait(0);
                    }
                });
            }
        };
        build(256, &mma(true)).unwrap();
        let e = kind(build(256, &mma(false))).unwrap_err();
        assert!(e.1.contains("leaves `mma_async` products in flight"), "{e:?}");
    }

    #[test]
    fn tma_store_rules() {
        // A 256-thread kernel storing a 64x64 bf16 tile through a staging buffer: `f` edits the statements.
        let build = |access: Access, f: &dyn Fn(&mut KernelBuilder, TileId, SharedId, crate::tma::TmapId)| {
            let mut b = KernelBuilder::new("t", 256);
            let m = b.dim("M");
            let n = b.dim("N");
            let y = b.tensor("y", DType::Bf16, &[m, n], access);
            let t = b.tile("acc", DType::F32, 64, 128, [4, 1]);
            let sh = b.shared("sy", DType::Bf16, 64, 64, 2, Swizzle::Xor16B);
            let map = b.tensor_map("y_map", y, &[64, 64], Swizzle::Xor16B);
            f(&mut b, t, sh, map);
            b.finish()
        };
        let kind = |r: Result<Kernel, IrError>| r.map(|_| ()).map_err(|e| (e.kind, e.msg));
        let ok = |b: &mut KernelBuilder, t: TileId, sh: SharedId, map: crate::tma::TmapId| {
            for j in 0..2u32 {
                let w = b.window(sh, j as i64, 0, 0, 64, 64);
                b.tma_store_wait(1);
                b.store_cols(t, 64 * j, w.clone());
                b.tma_store(map, w, vec![Expr::Int(64 * j as i64), Expr::Int(0)]);
            }
        };
        let k = build(Access::Write, &ok).unwrap();
        let text = crate::print::kernel(&k);
        assert!(text.contains("<~tma") && text.contains("acc[:, 64..128]"), "{text}");
        // A read-only destination, a window narrower than the box, columns outside the tile or off the 8-column
        // grid, a store or wait inside a turn (they synchronize the consumers), inside a threads region.
        let e = kind(build(Access::Read, &ok)).unwrap_err();
        assert!(e.0 == IrErrorKind::Type && e.1.contains("read-only tensor `y`"), "{e:?}");
        let e = kind(build(Access::Write, &|b, _, sh, map| {
            b.tma_store(map, b.window(sh, 0i64, 0, 0, 32, 64), vec![Expr::Int(0), Expr::Int(0)])
        }))
        .unwrap_err();
        assert!(e.0 == IrErrorKind::Shape && e.1.contains("window of 32 rows, the box has 64"), "{e:?}");
        for col0 in [96, 4] {
            let e = kind(build(Access::Write, &|b, t, sh, _| b.store_cols(t, col0, b.window(sh, 0i64, 0, 0, 64, 64))))
                .unwrap_err();
            assert!(e.0 == IrErrorKind::Shape && e.1.contains("columns must lie inside the tile"), "{col0}: {e:?}");
        }
        let e = kind(build(Access::Write, &|b, t, sh, map| b.in_turn(|b| ok(b, t, sh, map)))).unwrap_err();
        assert!(e.1.contains("a barrier inside an `in_turn` body"), "{e:?}");
        let e = kind(build(Access::Write, &|b, _, _, _| b.threads(|b| b.tma_store_wait(0)))).unwrap_err();
        assert!(e.0 == IrErrorKind::Scope && e.1.contains("`tma_store_wait` is a block-level statement"), "{e:?}");
    }

    #[test]
    fn dequant_fp4_stream_rules() {
        // (tile dtype, tile cols, words dtype, words vec, scales dtype, inside a threads region) -> error kind
        let cases = [
            (DType::Bf16, 64, DType::U32, 4, DType::U8, false, None),
            (DType::F32, 64, DType::U32, 4, DType::U8, false, Some(IrErrorKind::Layout)),
            (DType::Bf16, 48, DType::U32, 4, DType::U8, false, Some(IrErrorKind::Layout)),
            (DType::Bf16, 64, DType::U8, 4, DType::U8, false, Some(IrErrorKind::Type)),
            (DType::Bf16, 64, DType::U32, 2, DType::U8, false, Some(IrErrorKind::Type)),
            (DType::Bf16, 64, DType::U32, 4, DType::U32, false, Some(IrErrorKind::Type)),
            (DType::Bf16, 64, DType::U32, 4, DType::U8, true, Some(IrErrorKind::Scope)),
        ];
        for (tdt, cols, qdt, qvec, sdt, region, want) in cases {
            let mut b = KernelBuilder::new("t", 128);
            let n = b.dim("N");
            let q = b.tensor("q", qdt, &[n.clone(), Expr::Int(8)], Access::Read);
            let s = b.tensor("s", sdt, &[n.clone(), Expr::Int(2)], Access::Read);
            let t = b.tile("w", tdt, 64, cols, [4, 1]);
            let qv = view(q, 0i64, 8i64, n.clone(), 8i64, qvec);
            let sv = view(s, 0i64, 2i64, n.clone(), 2i64, 1);
            if region {
                b.threads(|b| b.dequant_fp4_stream(t, qv, sv, true, false, false));
            } else {
                b.dequant_fp4_stream(t, qv, sv, true, false, false);
            }
            match (b.finish(), want) {
                (Ok(_), None) => {}
                (Err(e), Some(k)) => assert_eq!(e.kind, k, "{tdt} {cols} {qdt} vec {qvec} {sdt} region {region}: {e}"),
                (r, w) => panic!("{tdt} {cols} {qdt} vec {qvec} {sdt} region {region}: {:?}, want {w:?}", r.err()),
            }
        }
    }

    #[test]
    fn fp4_gemv_staged_scratch_holds_the_rings() {
        // 4 warps, 64-row tiles: the staged rings need 16 + 4 x 3 x 4 x 1088 = 52240 bytes with tile-major words
        // (per-lane copies), 61456 with row-major ones, in tiles of any shape (the partials alias the rings); the
        // register ring needs a [64, 8] tile per warp.
        let build_xa = |tiled: bool, staged: bool, rows: u32, count: u32, x_two_ahead: bool| {
            let mut b = KernelBuilder::new("t", 128);
            let q = b.tensor("q", DType::U32, &[Expr::Int(64), Expr::Int(448)], Access::Read);
            let s = b.tensor("s", DType::U8, &[Expr::Int(64), Expr::Int(112)], Access::Read);
            let x = b.tensor("x", DType::Bf16, &[Expr::Int(4), Expr::Int(3584)], Access::Read);
            let out = b.shared("out", DType::F32, 64, 17, 1, Swizzle::None);
            let scratch = b.shared("scratch", DType::F32, rows, 8, count, Swizzle::None);
            let (qv, sv) = (view(q, 0i64, 448i64, 64i64, 448i64, 4), view(s, 0i64, 112i64, 64i64, 112i64, 1));
            let xv = view(x, 0i64, 3584i64, 4i64, 3584i64, 8);
            let w = b.window(out, 0i64, 0, 0, 64, 8);
            let flags = Fp4Flags { packed: true, fold: true, finite: true };
            let ring = if staged {
                Fp4Ring::Shared(Fp4Staging { stages: 3, l2_prefetch: 128, tiled, bulk: false, x_two_ahead })
            } else {
                Fp4Ring::Registers(3)
            };
            b.fp4_gemv(w, scratch, qv, sv, xv, flags, 1, ring);
            b.finish()
        };
        let build = |tiled: bool, staged: bool, rows: u32, count: u32| build_xa(tiled, staged, rows, count, false);
        assert!(build(true, true, 16, 103).is_ok(), "52736 bytes hold the tile-major rings");
        let e = build(true, true, 16, 102).unwrap_err();
        assert!(e.kind == IrErrorKind::Layout && e.to_string().contains("needs 52240 bytes"), "{e}");
        let e = build(false, true, 16, 103).unwrap_err();
        assert!(e.to_string().contains("needs 61456 bytes") && e.to_string().contains("has 52736"), "{e}");
        assert!(build(false, true, 64, 31).is_ok(), "31 [64, 8] tiles: 63488 bytes");
        let e = build(false, false, 16, 103).unwrap_err();
        assert!(e.to_string().contains("at least 512 elements per tile"), "{e}");
        assert!(build(false, false, 64, 4).is_ok(), "a [64, 8] tile per warp for the register ring");
        assert!(build_xa(true, true, 16, 103, true).is_ok(), "x_two_ahead on the staged ring");
    }

    #[test]
    fn type_errors_name_the_place() {
        let mut b = small();
        let acc = b.tile("acc", DType::F32, 64, 64, [2, 2]);
        b.for_("i", 0i64, 4i64, 1i64, |b, i| b.map(acc, i)); // int into a float tile
        let e = b.finish().unwrap_err();
        assert_eq!(e.kind, IrErrorKind::Type);
        assert!(e.at.contains("for `i`") && e.at.contains("map `acc`"), "{e}");
    }

    #[test]
    fn layout_rules() {
        let mut b = small();
        b.tile("bad", DType::F32, 24, 64, [2, 2]);
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Layout);
        let mut b = small();
        let t = b.tile("t", DType::F32, 64, 64, [2, 2]);
        let v = b.vec("v", 64, [2, 2]);
        b.reduce(v, t, ReduceOp::Max, false);
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Layout);
    }

    #[test]
    fn scope_rules() {
        let mut b = small();
        let mut inner = None;
        b.for_("i", 0i64, 4i64, 1i64, |b, _| inner = Some(b.let_var("x", 1i64)));
        b.assign(inner.unwrap(), 2i64);
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Scope);
    }

    #[test]
    fn mma_shapes_checked() {
        let mut b = small();
        let acc = b.tile("acc", DType::F32, 64, 64, [2, 2]);
        let sa = b.shared("sa", DType::Bf16, 64, 32, 1, Swizzle::Xor16B);
        let sb = b.shared("sb", DType::Bf16, 64, 48, 1, Swizzle::None);
        let (ra, rb) = (b.slot(sa, 0i64), b.slot(sb, 0i64));
        b.mma(acc, Operand::Shared { src: ra, transpose: false }, Operand::Shared { src: rb, transpose: true });
        let e = b.finish().unwrap_err();
        assert_eq!(e.kind, IrErrorKind::Shape, "{e}");
    }

    #[test]
    fn shared_limit() {
        let mut b = small();
        b.shared("huge", DType::F32, 256, 256, 1, Swizzle::None);
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Resource);
    }

    #[test]
    fn read_only_store_rejected() {
        let mut b = KernelBuilder::new("t", 32);
        let m = b.dim("M");
        let x = b.tensor("x", DType::F32, &[m.clone(), m.clone()], Access::Read);
        let t = b.tile("t", DType::F32, 16, 8, [1, 1]);
        b.store(t, Place::Global(view(x, 0i64, m.clone(), m.clone(), m, 1)));
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Type);
    }

    fn region_kernel() -> (KernelBuilder, TensorId, SharedId) {
        let mut b = KernelBuilder::new("t", 64);
        let m = b.dim("M");
        let y = b.tensor("y", DType::F32, &[m], Access::Write);
        let s = b.shared("s", DType::U32, 4, 8, 2, Swizzle::None);
        (b, y, s)
    }

    fn fails(b: KernelBuilder, kind: IrErrorKind, needle: &str) {
        let e = b.finish().unwrap_err();
        assert_eq!(e.kind, kind, "{e}");
        assert!(e.to_string().contains(needle), "expected `{needle}` in: {e}");
    }

    #[test]
    fn regions_accept_per_thread_code() {
        let (mut b, y, s) = region_kernel();
        let outer = b.let_("outer", 3i64);
        b.threads(|b| {
            let t = Expr::thread_idx();
            let acc = b.let_var("acc", 0i64);
            b.for_("i", 0i64, &t % 4i64, 1i64, |b, i| b.assign(acc, Expr::Var(acc) + i + outer.clone()));
            let a = b.let_array("a", 4, ScalarTy::Float, 0.0);
            b.array_set(a, 1i64, Expr::lane_idx().to_float());
            b.if_(Expr::warp_idx().eq(1i64), |b| {
                b.store_scalar(y, t.clone(), Expr::array_get(a, 1i64));
            });
            b.atomic_add_shared(s, 1i64, &t / 8i64 % 4i64, &t % 8i64, acc);
            let old = b.atomic_fetch(
                "old",
                AtomicTarget::Shared { buf: s, index: 0i64.into(), row: 0i64.into(), col: 0i64.into() },
                AtomicOp::Max,
                5i64,
            );
            b.shared_store(s, 0i64, 1i64, 1i64, old);
        });
        b.barrier();
        let k = b.finish().unwrap();
        let text = crate::print::kernel(&k);
        assert!(text.contains("threads {") && text.contains("atomic_add(s[1]"), "{text}");
        assert!(text.contains("let old%") && text.contains("a@0[1] := float(lane)"), "{text}");
    }

    #[test]
    fn block_level_statements_are_rejected_in_regions() {
        let (mut b, _, _) = region_kernel();
        b.threads(|b| b.barrier());
        fails(b, IrErrorKind::Scope, "`barrier` is a block-level statement");
        let (mut b, _, _) = region_kernel();
        let t = b.tile("t", DType::F32, 16, 8, [1, 1]);
        b.threads(|b| b.if_(Expr::thread_idx().lt(3i64), |b| b.map(t, 1.0)));
        fails(b, IrErrorKind::Scope, "`map` is a block-level statement");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| b.threads(|_| {}));
        fails(b, IrErrorKind::Scope, "`threads region` is a block-level statement");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| b.commit());
        fails(b, IrErrorKind::Scope, "`async commit`");
    }

    #[test]
    fn per_thread_code_is_rejected_outside_regions() {
        let (mut b, y, _) = region_kernel();
        b.store_scalar(y, 0i64, 1.0);
        fails(b, IrErrorKind::Scope, "only valid inside a threads region");
        let (mut b, _, _) = region_kernel();
        b.let_array("a", 2, ScalarTy::Int, 0i64);
        fails(b, IrErrorKind::Scope, "`let_array` is per-thread code");
        let (mut b, _, _) = region_kernel();
        b.let_("t", Expr::thread_idx());
        fails(b, IrErrorKind::Type, "ThreadIdx differs between threads");
        let (mut b, _, _) = region_kernel();
        let t = b.tile("t", DType::I32, 16, 8, [1, 1]);
        b.map(t, Expr::lane_idx());
        fails(b, IrErrorKind::Type, "LaneIdx");
    }

    #[test]
    fn regions_cannot_assign_block_variables() {
        let (mut b, _, _) = region_kernel();
        let v = b.let_var("v", 0i64);
        b.threads(|b| b.assign(v, Expr::thread_idx()));
        fails(b, IrErrorKind::Scope, "variable `v` is introduced outside the threads region");
        // A loop variable of an enclosing block-level loop is block-level too.
        let (mut b, _, _) = region_kernel();
        b.for_("i", 0i64, 2i64, 1i64, |b, _| {
            let w = b.let_var("w", 0i64);
            b.threads(|b| b.assign(w, 1i64));
        });
        fails(b, IrErrorKind::Scope, "`w`");
    }

    #[test]
    fn region_stores_and_atomics_are_typed() {
        let (mut b, y, _) = region_kernel();
        b.threads(|b| b.store_scalar(y, 0i64, 1i64));
        fails(b, IrErrorKind::Type, "stored value must be float");
        let mut b = KernelBuilder::new("t", 32);
        let x = b.tensor("x", DType::F32, &[Expr::Int(4)], Access::Read);
        b.threads(|b| b.store_scalar(x, 0i64, 1.0));
        fails(b, IrErrorKind::Type, "read-only");
        let mut b = KernelBuilder::new("t", 32);
        let x = b.tensor("x", DType::E8m0, &[Expr::Int(4)], Access::Write);
        b.threads(|b| b.store_scalar(x, 0i64, 1.0));
        fails(b, IrErrorKind::Type, "view it as u8");
        let mut b = KernelBuilder::new("t", 32);
        let s = b.shared("s", DType::Bf16, 1, 8, 1, Swizzle::None);
        b.threads(|b| b.atomic_add_shared(s, 0i64, 0i64, 0i64, 1.0));
        fails(b, IrErrorKind::Type, "atomics update i32, u32, i64, u64 or f32");
        let (mut b, _, s) = region_kernel();
        b.threads(|b| b.atomic_add_shared(s, 0i64, 0i64, 8i64, 1i64));
        fails(b, IrErrorKind::Shape, "col 8 is outside 0..8");
        let (mut b, _, s) = region_kernel();
        b.threads(|b| b.atomic_add_shared(s, 0i64, 0i64, 1i64, 1.0));
        fails(b, IrErrorKind::Type, "atomic operand must be int");
    }

    #[test]
    fn arrays_are_scoped_and_bounded() {
        let (mut b, y, _) = region_kernel();
        let mut arr = None;
        b.threads(|b| arr = Some(b.let_array("a", 4, ScalarTy::Float, 0.0)));
        b.threads(|b| b.store_scalar(y, 0i64, Expr::array_get(arr.unwrap(), 0i64)));
        fails(b, IrErrorKind::Scope, "array #0 `a` used out of scope");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| {
            let a = b.let_array("a", 4, ScalarTy::Float, 0.0);
            b.array_set(a, 4i64, 1.0);
        });
        fails(b, IrErrorKind::Shape, "indexed at 4");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| {
            b.let_array("a", 0, ScalarTy::Int, 0i64);
        });
        fails(b, IrErrorKind::Resource, "array length 0");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| {
            let a = b.let_array("a", 2, ScalarTy::Int, 0i64);
            b.array_set(a, 0i64, 1.5);
        });
        fails(b, IrErrorKind::Type, "array element must be int");
    }

    #[test]
    fn shared_loads_and_bit_ops_are_typed() {
        let (mut b, _, s) = region_kernel();
        let t = b.tile("t", DType::I32, 16, 8, [1, 1]);
        b.map(t, Expr::shared_load(s, 1i64, Expr::RowIdx % 4i64, Expr::ColIdx));
        b.finish().unwrap();
        let (mut b, _, s) = region_kernel();
        b.grid(Expr::shared_load(s, 0i64, 0i64, 0i64), 1i64, 1i64);
        fails(b, IrErrorKind::Type, "grid sizes");
        let (mut b, _, s) = region_kernel();
        b.let_("v", Expr::shared_load(s, 2i64, 0i64, 0i64));
        fails(b, IrErrorKind::Shape, "tile index 2 is outside 0..2");
        let (mut b, _, _) = region_kernel();
        b.let_("v", Expr::Int(3).bits());
        fails(b, IrErrorKind::Type, "`bits` needs a float");
        let (mut b, _, _) = region_kernel();
        b.let_("v", Expr::Float(3.0).from_bits());
        fails(b, IrErrorKind::Type, "`from_bits` needs an int");
        let (mut b, _, _) = region_kernel();
        let f = b.let_("f", Expr::Int(0x3f80_0000).from_bits().round().trunc());
        b.let_("i", f.bits());
        b.finish().unwrap();
    }

    #[test]
    fn scan_scratch_is_checked() {
        // A 32x16 tile scanned through a scratch buffer: (tile dtype, scratch dtype, scratch rows and columns,
        // inside a threads region, the error).
        for (tile_dt, scratch_dt, [rows, cols], in_threads, kind, msg) in [
            (DType::F32, DType::F32, [32, 8], false, IrErrorKind::Shape, "at least 32x16"),
            (DType::F32, DType::Bf16, [32, 16], false, IrErrorKind::Shape, "must be f32"),
            (DType::Bf16, DType::F32, [32, 16], false, IrErrorKind::Type, "scans run on f32 tiles"),
            (DType::F32, DType::F32, [40, 24], true, IrErrorKind::Scope, "`scan` is a block-level statement"),
        ] {
            let mut b = KernelBuilder::new("t", 64);
            let t = b.tile("t", tile_dt, 32, 16, [2, 1]);
            let s = b.shared("s", scratch_dt, rows, cols, 1, Swizzle::None);
            if in_threads {
                b.threads(|b| b.scan_rows(t, s));
            } else {
                b.scan_rows(t, s);
            }
            fails(b, kind, msg);
        }
    }

    #[test]
    fn ldmatrix_and_cp_async_alignment() {
        // A's 32x32 window at column `col0` of a buffer `cols` wide: ldmatrix reads 16-byte aligned rows.
        for (cols, col0, msg) in [(40, 4, "16-byte aligned"), (36, 0, "rows of 72 bytes")] {
            let mut b = small();
            let acc = b.tile("acc", DType::F32, 32, 32, [2, 2]);
            let sa = b.shared("sa", DType::Bf16, 32, cols, 1, Swizzle::None);
            let sb = b.shared("sb", DType::Bf16, 32, 32, 1, Swizzle::None);
            let (ra, rb) = (b.window(sa, 0i64, 0, col0, 32, 32), b.slot(sb, 0i64));
            b.mma(acc, Operand::Shared { src: ra, transpose: false }, Operand::Shared { src: rb, transpose: true });
            fails(b, IrErrorKind::Layout, msg);
        }
        let mut b = KernelBuilder::new("t", 32);
        let x = b.tensor("x", DType::Bf16, &[Expr::Int(64)], Access::Read);
        let s = b.shared("s", DType::Bf16, 4, 12, 1, Swizzle::None);
        let d = b.window(s, 0i64, 0, 0, 4, 8);
        b.copy_async(d, view(x, 0i64, 8i64, 4i64, 8i64, 8));
        fails(b, IrErrorKind::Layout, "not a multiple of the copy's vec 8");
    }

    #[test]
    fn banded_operands() {
        // acc [64, 16] on [4, 1]: four 16-row bands, each with its own 16-row window of a [64, 32] buffer.
        let ok = |rows: u32, row0: u32| {
            let mut b = small();
            let acc = b.tile("acc", DType::F32, 64, 16, [4, 1]);
            let sa = b.shared("sa", DType::Bf16, 64, 32, 1, Swizzle::Xor16B);
            let sb = b.shared("sb", DType::Bf16, rows, 32, 1, Swizzle::Xor16B);
            let (ra, rb) = (b.slot(sa, 0i64), b.window(sb, 0i64, row0, 0, 16, 32));
            b.mma(acc, Operand::Shared { src: ra, transpose: false }, Operand::Banded { src: rb, transpose: true });
            b
        };
        ok(64, 0).finish().unwrap();
        fails(ok(64, 16), IrErrorKind::Shape, "outside shared `sb`");
        fails(ok(48, 0), IrErrorKind::Shape, "4 row bands of 16 rows");
        let mut b = small();
        let acc = b.tile("acc", DType::F32, 64, 16, [4, 1]);
        let sa = b.shared("sa", DType::Bf16, 64, 32, 1, Swizzle::Xor16B);
        let (ra, rb) = (b.slot(sa, 0i64), b.window(sa, 0i64, 0, 0, 16, 32));
        b.mma(acc, Operand::Banded { src: ra, transpose: false }, Operand::Banded { src: rb, transpose: true });
        fails(b, IrErrorKind::Layout, "only be the B operand");
    }

    #[test]
    fn kernels_without_arrays_field_deserialize() {
        let (b, _, _) = region_kernel();
        let k = b.finish().unwrap();
        let mut v: serde_json::Value = serde_json::to_value(&k).unwrap();
        v.as_object_mut().unwrap().remove("arrays");
        let back: Kernel = serde_json::from_value(v).unwrap();
        assert_eq!(back, k);
    }
}

mod wide {
    use crate::*;

    fn kernel(
        dtype: DType,
        lanes: u32,
        arr_ty: ScalarTy,
        len: u32,
        at: u32,
        index: impl Fn(Expr) -> Expr,
    ) -> Result<Kernel, IrError> {
        let mut b = KernelBuilder::new("wide", 32);
        let n = b.dim("N");
        let x = b.tensor("x", dtype, &[n], Access::ReadWrite);
        b.grid(1i64, 1i64, 1i64);
        b.threads(|b| {
            let a =
                b.let_array("a", len, arr_ty, if arr_ty == ScalarTy::Float { Expr::Float(0.0) } else { Expr::Int(0) });
            let i = index(Expr::thread_idx());
            b.load_wide(a, at, x, i.clone(), lanes);
            b.store_wide(x, i, a, at, lanes);
        });
        b.finish()
    }

    #[test]
    fn wide_accesses_check_size_type_array_and_provable_alignment() {
        let f = ScalarTy::Float;
        // Good: f32 x 4, bf16 x 8, f32 x 2 (8 bytes), u8 x 16 with a symbolic part.
        assert!(kernel(DType::F32, 4, f, 4, 0, |t| t * 4i64).is_ok());
        assert!(kernel(DType::Bf16, 8, f, 16, 8, |t| t * 8i64 + 64i64).is_ok());
        assert!(
            kernel(DType::F32, 2, f, 2, 0, |t| Expr::Bin(BinOp::Shl, Box::new(t), Box::new(Expr::Int(1))) + 6i64)
                .is_ok()
        );
        assert!(kernel(DType::U8, 16, ScalarTy::Int, 16, 0, |t| t * 32i64 - 16i64).is_ok());
        // Unknown residue (a loaded or symbolic index) is left to the runtime checks.
        assert!(kernel(DType::F32, 4, f, 4, 0, |t| t * 3i64).is_ok());
        let msg = |r: Result<Kernel, IrError>| r.unwrap_err().to_string();
        // Provably misaligned.
        assert!(msg(kernel(DType::F32, 4, f, 4, 0, |t| t * 4i64 + 2i64)).contains("is 2 modulo 4"));
        assert!(msg(kernel(DType::Bf16, 8, f, 8, 0, |t| t * 16i64 + 4i64)).contains("misaligned"));
        assert!(msg(kernel(DType::F32, 4, f, 4, 0, |_| Expr::Int(5))).contains("is 1 modulo 4"));
        // Sizes other than 8 or 16 bytes, unsupported dtypes, wrong array type, too short an array.
        assert!(msg(kernel(DType::F32, 3, f, 4, 0, |t| t * 4i64)).contains("not 8 or 16"));
        assert!(msg(kernel(DType::F32, 8, f, 8, 0, |t| t * 8i64)).contains("not 8 or 16"));
        assert!(msg(kernel(DType::E4m3, 16, f, 16, 0, |t| t * 16i64)).contains("cannot move wide"));
        assert!(msg(kernel(DType::I32, 4, f, 4, 0, |t| t * 4i64)).contains("holds float"));
        assert!(msg(kernel(DType::F32, 4, f, 6, 4, |t| t * 4i64)).contains("cannot hold elements 4..8"));
    }

    /// A shared buffer `s` of `dtype`, `cols` columns, accessed wide at (0, row = thread, `col`).
    fn shared_kernel(
        dtype: DType,
        cols: u32,
        lanes: u32,
        arr_ty: ScalarTy,
        len: u32,
        at: u32,
        col: impl Fn(Expr) -> Expr,
    ) -> Result<Kernel, IrError> {
        let mut b = KernelBuilder::new("wide_shared", 32);
        let s = b.shared("s", dtype, 32, cols, 1, Swizzle::None);
        b.grid(1i64, 1i64, 1i64);
        b.threads(|b| {
            let a =
                b.let_array("a", len, arr_ty, if arr_ty == ScalarTy::Float { Expr::Float(0.0) } else { Expr::Int(0) });
            let c = col(Expr::thread_idx());
            b.shared_load_wide(a, at, s, 0i64, Expr::thread_idx(), c.clone(), lanes);
            b.shared_store_wide(s, 0i64, Expr::thread_idx(), c, a, at, lanes);
        });
        b.finish()
    }

    #[test]
    fn wide_shared_accesses_check_size_rows_columns_and_array() {
        let f = ScalarTy::Float;
        // Good: f32 x 4 and bf16 x 8 at a constant or provably aligned column.
        assert!(shared_kernel(DType::F32, 16, 4, f, 4, 0, |_| Expr::Int(8)).is_ok());
        assert!(shared_kernel(DType::Bf16, 64, 8, f, 16, 8, |t| (t % 4i64) * 8i64).is_ok());
        let msg = |r: Result<Kernel, IrError>| r.unwrap_err().to_string();
        assert!(msg(shared_kernel(DType::F32, 16, 3, f, 4, 0, |_| Expr::Int(0))).contains("not 8 or 16"));
        assert!(
            msg(shared_kernel(DType::U8, 64, 16, ScalarTy::Int, 16, 0, |_| Expr::Int(0))).contains("cannot move wide")
        );
        assert!(msg(shared_kernel(DType::F32, 6, 2, f, 2, 0, |_| Expr::Int(0))).contains("not whole 16-byte chunks"));
        assert!(msg(shared_kernel(DType::F32, 16, 4, f, 4, 0, |_| Expr::Int(14))).contains("pass the row's 16"));
        let e = msg(shared_kernel(DType::F32, 16, 4, f, 4, 0, |t| (t % 2i64) * 4i64 + 2i64));
        assert!(e.contains("of shared `s`: column") && e.contains("is 2 modulo 4"), "{e}");
        assert!(
            msg(shared_kernel(DType::I32, 16, 4, f, 4, 0, |_| Expr::Int(0))).contains("holds float, shared `s` is i32")
        );
        assert!(msg(shared_kernel(DType::F32, 16, 4, f, 6, 4, |_| Expr::Int(0))).contains("cannot hold elements 4..8"));
    }

    #[test]
    fn wide_accesses_are_region_only() {
        let mut b = KernelBuilder::new("wide_block", 32);
        let x = b.tensor("x", DType::F32, &[Expr::Int(4)], Access::Read);
        b.grid(1i64, 1i64, 1i64);
        b.load_wide(ArrId(0), 0, x, 0i64, 4);
        let e = b.finish().unwrap_err().to_string();
        assert!(e.contains("only valid inside a threads region"), "{e}");
    }

    #[test]
    fn residues() {
        use super::provable_residue as r;
        let t = Expr::thread_idx();
        assert_eq!(r(&(t.clone() * 8i64 + 3i64), 4), Some(3));
        assert_eq!(r(&((t.clone() + 1i64) * 4i64), 4), Some(0));
        assert_eq!(r(&(t.clone() * 2i64), 4), None);
        assert_eq!(r(&(Expr::Bin(BinOp::Shl, Box::new(t.clone()), Box::new(Expr::Int(3))) - 1i64), 8), Some(7));
        assert_eq!(r(&(Expr::Int(6) * Expr::Int(3)), 4), Some(2));
    }
}
