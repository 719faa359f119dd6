//! Every prelude primitive, one small kernel each (see `common/cases.rs`):
//! - `<case>::interp`: the CPU interpreter's result equals a plain Rust computation;
//! - `<case>::compiles`: the kernel renders, compiles with NVRTC and assembles for sm_90a with no spills and
//!   no stack frame.

mod common;

use common::cases::{self, Case};

fn interp(c: Case) {
    let mut ts = c.tensors;
    common::interp(&c.kernel, &mut ts, &c.scalars);
    (c.check)(&ts);
}

fn compiles(c: Case) {
    let r = common::compiles(&c.kernel);
    eprintln!("{}: {r:?}", c.name);
    // Nothing lives in local memory: register arrays with unrolled indices stay in registers too.
    assert_eq!(r.stack_frame_bytes, 0, "{}: {r:?}", c.name);
}

macro_rules! primitive {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn interp() {
                    super::interp(super::cases::$name());
                }
                #[test]
                fn compiles() {
                    super::compiles(super::cases::$name());
                }
            }
        )*
    };
}

primitive!(
    map_f32,
    map_bf16,
    map_i32,
    unary_bits,
    shared_roundtrip,
    vectors,
    reduce_rows,
    mma_ss_bf16,
    mma_ss_f16_transposed_a,
    mma_rs,
    copy_async_vecs,
    copy_async_in_bounds_32,
    copy_async_in_bounds_64,
    copy_async_in_bounds_128,
    threads_divergent,
    shared_scatter_transpose,
    histogram_atomics,
    atomic_ops,
    arrays,
    scan_rows,
    scan_wide,
    scalar_store_conversions,
    byte_formats,
    mma_banded,
    warp_shuffles,
    scan_replicated,
    dequant_fp4,
    dequant_fp4_stream,
    mma_async_rs_bmn,
    mma_async_ss_then_rs,
    mma_async_replicated_and_banded,
    first_warpgroups_share_p,
    last_block_reduction,
    dequant_fp4_stream_prefetch,
    fp4_gemv,
    fp4_gemv_staged,
    exp2_ftz,
    tma_mbarrier,
    tma_multicast_cluster,
    wide_access,
    wide_tile_stores,
    shared_pairs_swizzle,
    mma_ss_e4m3,
    mma_ss_bf16_origins,
    mma_ss_f16_transposed_a_origins,
    mma_rs_origins,
    mma_banded_origins,
);

#[test]
fn every_case_is_listed() {
    // `cases::all` feeds the GPU run; keep it in step with the list above.
    assert_eq!(cases::all().len(), 47);
}

/// The wide accesses of `wide_access` are single vector instructions in the PTX: f32 x 4, bf16 x 8 and u8 x 16
/// as `.v4.u32`-class 16-byte accesses, i32 x 2 as one 8-byte `.v2` store.
#[test]
fn wide_accesses_are_vector_instructions() {
    let (ptx, [ld4, ldnc4, st4, st2]) =
        ptx_counts(&cases::wide_access().kernel, ["ld.global.v4", "ld.global.nc.v4", "st.global.v4", "st.global.v2"]);
    assert!(ld4 + ldnc4 >= 3, "three 16-byte loads expected:\n{ptx}");
    assert!(st4 >= 2 && st2 >= 1, "two 16-byte and one 8-byte store expected:\n{ptx}");
}

/// The tile stores of `wide_tile_stores` take the wide paths: 16-byte stores for `y` (vec 8, 8 fragments per
/// warp), 8-byte ones for `z` and `w` (2 fragments), with the quad's regrouping shuffles before them.
#[test]
fn wide_tile_stores_are_vector_instructions() {
    let (ptx, [st4, st2, shfl]) =
        ptx_counts(&cases::wide_tile_stores().kernel, ["st.global.v4", "st.global.v2", "shfl.sync"]);
    assert!(st4 >= 2, "16-byte stores expected for y:\n{ptx}");
    assert!(st2 >= 2, "8-byte stores expected for z and w:\n{ptx}");
    assert!(shfl >= 4, "the quad regrouping shuffles expected:\n{ptx}");
}

/// The PTX of `k` (NVRTC, checked by ptxas) and how many of its lines contain each of `patterns` (also printed).
fn ptx_counts<const N: usize>(k: &k3k_ir::Kernel, patterns: [&str; N]) -> (String, [usize; N]) {
    let m = k3k_codegen::build(k, k3k_codegen::BuildOptions { assemble: true }).unwrap();
    let counts = patterns.map(|pat| m.ptx.lines().filter(|l| l.contains(pat)).count());
    eprintln!("{:?}", patterns.iter().zip(counts).collect::<Vec<_>>());
    (m.ptx.clone(), counts)
}

/// A view whose offset or row stride breaks its `vec` promise is a typed error of the interpreter (naming the
/// tensor, the offset or stride and the promise), not a silent pass: on the GPU the wide stores would fault.
#[test]
fn a_broken_alignment_promise_is_an_error() {
    use k3k_codegen::cpu::interp::{InterpError, InterpOptions, run};
    use k3k_ir::*;
    for (off, stride, what) in [(4i64, 48i64, "offset"), (0, 44, "row stride")] {
        let mut b = KernelBuilder::new("p_bad_vec", 64);
        let y = b.tensor("y", DType::Bf16, &[Expr::Int(4096)], Access::Write);
        let t = b.tile("t", DType::F32, 32, 32, [2, 1]);
        b.map(t, Expr::RowIdx.to_float());
        b.store(t, Place::Global(view(y, off, stride, 32i64, 32i64, 8)));
        let k = b.finish().unwrap();
        let mut ts = vec![HostTensor::zeros(DType::Bf16, &[4096])];
        let e = run(&k, &mut ts, &[], InterpOptions::default()).unwrap_err();
        assert!(
            matches!(&e, InterpError::ViewAlignment { tensor, what: w, vec: 8, .. } if tensor == "y" && *w == what),
            "{e}"
        );
        let msg = e.to_string();
        assert!(msg.contains("`y`") && msg.contains("8-element alignment") && msg.contains(what), "{msg}");
    }
}
