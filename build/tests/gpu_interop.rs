//! The caller's CUDA world on GPU 0, only with `K3K_GPU=1` (no-ops otherwise): kernels loaded once per context
//! the caller created, launched on the caller's stream on cudarc buffers and raw device pointers, at token counts
//! other than the build's, then captured into a CUDA graph and replayed; every result checked against the f64
//! reference, outputs poisoned before each run.
//!
//! `K3K_GPU=1 cargo test --release -p k3k-build --test gpu_interop -- --nocapture --test-threads 1`

use k3k_build::rt::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, sys};
use k3k_build::rt::{self, Bf16, DType, HostTensor, KernelImage, View, ViewMut};
use std::sync::Arc;

fn gpu_on() -> bool {
    if !std::env::var("K3K_GPU").is_ok_and(|v| v == "1") {
        eprintln!("K3K_GPU is not 1: skipped");
        return false;
    }
    true
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The dense GEMM `y[M, N] = x[M, K] w[N, K]^T` of `latent_moe_gemm`, built at M = 64 as a model crate's
/// build.rs would, its image as the generated code embeds it.
fn gemm_image(k: usize, n: usize) -> &'static [KernelImage] {
    let out = tempfile::tempdir().unwrap();
    let r = k3k_build::Builder::new()
        .op("latent_moe_gemm")
        .dims(&[("M", 64), ("K", k as i64), ("N", n as i64)])
        .gpu("nvidia-h200")
        .results_dir(out.path().join("none"))
        .out_dir(out.path())
        .cargo_output(false)
        .build()
        .unwrap();
    let e = &r.kernels[0];
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    let image = KernelImage {
        gpu: "nvidia-h200",
        name: leak(e.name.clone()),
        knobs: "",
        knobs_source: "",
        ir_json: leak(read(&e.ir)),
        ptx: Some(leak(read(e.ptx.as_ref().unwrap()))),
        cubin: e.cubin.as_ref().map(|p| &*Box::leak(std::fs::read(p).unwrap().into_boxed_slice())),
        cuda: None,
    };
    Box::leak(Box::new([image]))
}

fn upload(stream: &Arc<CudaStream>, t: &HostTensor) -> CudaSlice<u8> {
    stream.clone_htod(&t.data).unwrap()
}

fn poison(stream: &CudaStream, buf: &CudaSlice<u8>) {
    let (ptr, _g) = buf.device_ptr(stream);
    // SAFETY: the whole allocation, ordered on `stream`.
    unsafe { k3k_build::rt::cudarc::driver::result::memset_d8_async(ptr, 0xff, buf.len(), stream.cu_stream()) }
        .unwrap();
}

fn check(stream: &Arc<CudaStream>, y: &CudaSlice<u8>, m: usize, n: usize, want: &[f64], what: &str) {
    let bytes = stream.clone_dtoh(y).unwrap();
    let t = HostTensor::from_bytes(DType::Bf16, &[m, n], bytes);
    let got: Vec<f64> = (0..m * n).map(|i| t.get_f32(i) as f64).collect();
    assert!(got.iter().all(|v| v.is_finite()), "{what}: an output was not written");
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    let err = (num / den).sqrt();
    println!("{what}: relative error {err:.2e}");
    assert!(err < 5e-3, "{what}: relative error {err}");
}

#[test]
fn launches_on_the_callers_stream_and_memory_and_replays_as_a_graph() {
    if !gpu_on() {
        return;
    }
    let (k, n) = (512usize, 256usize);
    let images = gemm_image(k, n);
    let pins: &'static [(&'static str, i64)] = &[("K", 512), ("N", 256)];

    // The caller's world: its own context handle and stream; cudarc's per-buffer events off, as an engine that
    // captures graphs runs it.
    let ctx = CudaContext::new(0).unwrap();
    // SAFETY: every buffer of this test is used on `stream` alone.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    let gemm = rt::Loaded::load(&stream, images, pins).unwrap();
    let again = rt::Loaded::load(&ctx, images, pins).unwrap();
    assert!(gemm.shares_module_with(&again), "a kernel loads once per context");

    let mut seed = 3u64;
    let mut draw = |len: usize, scale: f32| -> Vec<f32> {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale
            })
            .collect()
    };
    let wt = HostTensor::from_f32(DType::Bf16, &[n, k], &draw(n * k, 0.05));
    let w = upload(&stream, &wt);
    let wf: Vec<f32> = (0..n * k).map(|i| wt.get_f32(i)).collect();

    // Token counts other than the build's 64, on cudarc buffers and on raw pointers.
    for m in [1usize, 37, 300] {
        let xt = HostTensor::from_f32(DType::Bf16, &[m, k], &draw(m * k, 1.0));
        let x = upload(&stream, &xt);
        let mut y: CudaSlice<u8> = stream.alloc_zeros(m * n * 2).unwrap();
        let xf: Vec<f32> = (0..m * k).map(|i| xt.get_f32(i)).collect();
        let want = k3k_reference::gemm::matmul_nt(&xf, m, k, &wf, n).unwrap();

        poison(&stream, &y);
        {
            let xv = View::<Bf16>::of(&x, &stream, &[m, k]).unwrap();
            let wv = View::<Bf16>::of(&w, &stream, &[n, k]).unwrap();
            let yv = ViewMut::<Bf16>::of(&mut y, &stream, &[m, n]).unwrap();
            gemm.launch(&stream, &[xv.arg(), wv.arg(), yv.arg()], &[]).unwrap();
        }
        check(&stream, &y, m, n, &want, &format!("M={m}, cudarc views"));

        poison(&stream, &y);
        let (xp, wp, yp) = (x.device_ptr(&stream).0, w.device_ptr(&stream).0, y.device_ptr(&stream).0);
        // SAFETY: the buffers above, alive and sized for these shapes, in this context.
        let (xv, wv, yv) = unsafe {
            (
                View::<Bf16>::from_raw_strided(xp, &[m, k], &[k, 1]).unwrap(),
                View::<Bf16>::from_raw(wp, &[n, k]).unwrap(),
                ViewMut::<Bf16>::from_raw(yp, &[m, n]).unwrap(),
            )
        };
        // A raw CUstream handle, as another library would hand it over.
        // SAFETY: `stream` outlives the launch.
        let raw = unsafe { rt::RawStream::new(stream.cu_stream()) };
        gemm.launch(&raw, &[xv.arg(), wv.arg(), yv.arg()], &[]).unwrap();
        check(&stream, &y, m, n, &want, &format!("M={m}, raw pointers, raw stream"));

        // A changed fixed dim is refused before anything is enqueued.
        let e =
            gemm.launch(&stream, &[xv.arg(), View::<Bf16>::of(&w, &stream, &[n / 2, k]).unwrap().arg(), yv.arg()], &[]);
        assert!(matches!(e, Err(rt::Error::Runtime(_)) | Err(rt::Error::Pinned { .. })), "{e:?}");
    }

    // Capture two launches (two token counts) into a graph, then replay it on fresh data of the same buffers.
    let (m1, m2) = (5usize, 129usize);
    let mut x1: CudaSlice<u8> = stream.alloc_zeros(m1 * k * 2).unwrap();
    let mut x2: CudaSlice<u8> = stream.alloc_zeros(m2 * k * 2).unwrap();
    let mut y1: CudaSlice<u8> = stream.alloc_zeros(m1 * n * 2).unwrap();
    let mut y2: CudaSlice<u8> = stream.alloc_zeros(m2 * n * 2).unwrap();
    stream.synchronize().unwrap();
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    {
        let wv = View::<Bf16>::of(&w, &stream, &[n, k]).unwrap();
        let (x1v, y1v) = (
            View::<Bf16>::of(&x1, &stream, &[m1, k]).unwrap(),
            ViewMut::<Bf16>::of(&mut y1, &stream, &[m1, n]).unwrap(),
        );
        gemm.launch(&stream, &[x1v.arg(), wv.arg(), y1v.arg()], &[]).unwrap();
        let (x2v, y2v) = (
            View::<Bf16>::of(&x2, &stream, &[m2, k]).unwrap(),
            ViewMut::<Bf16>::of(&mut y2, &stream, &[m2, n]).unwrap(),
        );
        gemm.launch(&stream, &[x2v.arg(), wv.arg(), y2v.arg()], &[]).unwrap();
    }
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0)).unwrap().expect("a graph was captured");
    for replay in 0..3 {
        let (a, b) = (
            HostTensor::from_f32(DType::Bf16, &[m1, k], &draw(m1 * k, 1.0)),
            HostTensor::from_f32(DType::Bf16, &[m2, k], &draw(m2 * k, 1.0)),
        );
        stream.memcpy_htod(&a.data, &mut x1).unwrap();
        stream.memcpy_htod(&b.data, &mut x2).unwrap();
        poison(&stream, &y1);
        poison(&stream, &y2);
        graph.launch().unwrap();
        let af: Vec<f32> = (0..m1 * k).map(|i| a.get_f32(i)).collect();
        let bf: Vec<f32> = (0..m2 * k).map(|i| b.get_f32(i)).collect();
        check(
            &stream,
            &y1,
            m1,
            n,
            &k3k_reference::gemm::matmul_nt(&af, m1, k, &wf, n).unwrap(),
            &format!("graph replay {replay}, M={m1}"),
        );
        check(
            &stream,
            &y2,
            m2,
            n,
            &k3k_reference::gemm::matmul_nt(&bf, m2, k, &wf, n).unwrap(),
            &format!("graph replay {replay}, M={m2}"),
        );
    }
}
