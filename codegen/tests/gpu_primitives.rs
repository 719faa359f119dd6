//! Every primitive case of `common/cases.rs` on a real GPU, checked like the interpreter's result. Runs only
//! with `K3K_GPU=1` (the test passes trivially elsewhere, so `cargo test` stays green without a GPU);
//! `K3K_GPU_CASES=name,...` runs only the cases whose names contain one of the given strings.
//!
//! A self-contained launcher (cudarc's driver API): PTX from NVRTC, JIT-loaded by the driver; tensors in
//! kernel order as device pointers, then one `long long` or `float` per symbol, as the renderer declares them.

mod common;

use common::cases::{self, Case};
use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaContext, CudaSlice, LaunchConfig, PushKernelArg};
use k3k_codegen::{BuildOptions, build};
use k3k_ir::*;
use std::sync::Arc;

/// A symbol value as the kernel parameter it becomes.
enum Arg {
    I(i64),
    F(f32),
}

fn run_on_gpu(ctx: &Arc<CudaContext>, c: &Case) -> Result<Vec<HostTensor>, String> {
    let k = &c.kernel;
    let stream = ctx.default_stream();
    let m = build(k, BuildOptions { assemble: false }).map_err(|e| e.to_string())?;
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_src(m.ptx.clone())).map_err(|e| format!("{e:?}"))?;
    let f = module.load_function(&k.name).map_err(|e| format!("{e:?}"))?;
    f.set_attribute(
        CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        k.shared_bytes() as i32,
    )
    .map_err(|e| format!("{e:?}"))?;
    let shapes: Vec<TensorShape<'_>> =
        c.tensors.iter().map(|t| TensorShape { dtype: t.dtype, shape: &t.shape }).collect();
    let scalars: Vec<(&str, SymValue)> = c.scalars.iter().map(|(n, v)| (*n, *v)).collect();
    let syms = bind(k, &shapes, &scalars, 132).map_err(|e| e.to_string())?;
    let grid = eval_grid(k, &syms).map_err(|e| e.to_string())?.expect("non-empty grid");
    let bufs: Vec<CudaSlice<u8>> = c
        .tensors
        .iter()
        .map(|t| if t.data.is_empty() { stream.alloc_zeros::<u8>(16) } else { stream.clone_htod(&t.data) })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{e:?}"))?;
    let args: Vec<Arg> = k
        .syms
        .iter()
        .zip(&syms)
        .map(|(d, v)| match (d.kind, v) {
            (SymKind::Float, SymValue::Float(f)) => Arg::F(*f),
            (_, v) => Arg::I(v.as_int()),
        })
        .collect();
    let addrs: Vec<u64> = bufs
        .iter()
        .map(|b| {
            use cudarc::driver::DevicePtr;
            b.device_ptr(&stream).0
        })
        .collect();
    let shapes: Vec<&[usize]> = c.tensors.iter().map(|t| t.shape.as_slice()).collect();
    let maps = k3k_codegen::tensor_map::encode(k, &shapes, &addrs).map_err(|e| e.to_string())?;
    let mut lb = stream.launch_builder(&f);
    for b in &bufs {
        lb.arg(b);
    }
    for a in &args {
        match a {
            Arg::I(v) => lb.arg(v),
            Arg::F(v) => lb.arg(v),
        };
    }
    for m in &maps {
        lb.arg(m);
    }
    let cfg = LaunchConfig {
        grid_dim: (grid[0], grid[1], grid[2]),
        block_dim: (k.threads, 1, 1),
        shared_mem_bytes: k.shared_bytes() as u32,
    };
    // SAFETY: the arguments match the rendered signature (tensor pointers, then one scalar per symbol, then the tensor maps), and
    // every buffer holds its whole tensor.
    unsafe { lb.launch(cfg) }.map_err(|e| format!("launch: {e:?}"))?;
    stream.synchronize().map_err(|e| format!("synchronize: {e:?}"))?;
    c.tensors
        .iter()
        .zip(&bufs)
        .map(|(t, b)| {
            let mut data = stream.clone_dtoh(b).map_err(|e| format!("{e:?}"))?;
            data.truncate(t.data.len());
            Ok(HostTensor { dtype: t.dtype, shape: t.shape.clone(), data })
        })
        .collect()
}

#[test]
fn primitives_on_gpu() {
    if std::env::var("K3K_GPU").as_deref() != Ok("1") {
        eprintln!("skipped: set K3K_GPU=1 to run the primitive kernels on a GPU");
        return;
    }
    let ctx = CudaContext::new(0).expect("a CUDA device");
    let mut failed = vec![];
    // `K3K_GPU_CASES=a,b`: only the cases whose names contain one of these (e.g. `tma` for `tma_mbarrier`).
    let only: Option<Vec<String>> =
        std::env::var("K3K_GPU_CASES").ok().map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    for c in cases::all() {
        let name = c.name;
        if only.as_ref().is_some_and(|o| !o.iter().any(|f| name.contains(f.as_str()))) {
            continue;
        }
        let result = run_on_gpu(&ctx, &c).and_then(|out| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (c.check)(&out))).map_err(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            })
        });
        match result {
            Ok(()) => eprintln!("gpu ok: {name}"),
            Err(e) => {
                eprintln!("gpu FAILED: {name}: {e}");
                failed.push(name);
            }
        }
    }
    assert!(failed.is_empty(), "failed on the GPU: {failed:?}");
}
