//! What a model crate needs of k3k-build, checked without a GPU: run-time shapes (a launcher built at one token
//! count takes others, and the same kernel computes them right on the CPU interpreter), fixed dims refused with
//! the argument named, names that do not change with knobs, kernels that are right for every MXFP4 scale byte
//! unless the request assumes otherwise, and typos in a request refused at build time.

use k3k_build::rt::{self, ArgRef, DType, HostTensor};
use k3k_build::{BuildError, Builder, Report};
use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_ir::{Kernel, stable_hash};
use k3k_ops::op::Preset;
use std::path::Path;

/// Build `b` into a fresh folder with run-time NVRTC (so the test needs no NVRTC) and no results.
fn build(b: Builder, out: &Path) -> Result<Report, BuildError> {
    b.gpu("nvidia-h200")
        .results_dir(out.join("no-results"))
        .out_dir(out)
        .runtime_nvrtc(true)
        .cargo_output(false)
        .build()
}

/// The registered operator of this name.
fn op_named(name: &str) -> Box<dyn k3k_ops::op::Operator> {
    k3k_ops::registry::all().into_iter().find(|o| o.name() == name).unwrap()
}

/// A small grouped GEMM request.
fn small_gemm() -> Builder {
    Builder::new().op("latent_moe_gemm").alias("g").dims(&[("G", 2), ("mean", 32), ("K", 256), ("N", 512)])
}

/// The error of a request that must not build.
fn build_error(b: Builder) -> String {
    let out = tempfile::tempdir().unwrap();
    match build(b, out.path()) {
        Ok(_) => panic!("the request built; a build error was expected"),
        Err(e) => e.to_string(),
    }
}

fn generated(r: &Report) -> String {
    std::fs::read_to_string(&r.rust_file).unwrap()
}

/// The `PINS` constant of a generated type, as written.
fn pins_of(src: &str, ty: &str) -> String {
    let at = src.find(&format!("pub struct {ty} ")).unwrap_or_else(|| panic!("no struct {ty}:\n{src}"));
    let rest = &src[at..];
    let p = rest.find("pub const PINS").expect("PINS");
    rest[p..].lines().next().unwrap().to_string()
}

/// The struct names a generated file defines (launchers, plans).
fn struct_names(src: &str) -> Vec<String> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("pub struct "))
        .map(|l| l.split([' ', '<', '{']).next().unwrap().to_string())
        .collect()
}

fn arg<'a>(dtype: DType, shape: &'a [usize]) -> ArgRef<'a> {
    // SAFETY: these arguments are only checked, never launched.
    unsafe { ArgRef::new(0x1000, dtype, shape) }
}

/// A deterministic draw in [-1, 1) (never zeros).
fn draw(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn rel_l2(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

#[test]
fn a_dense_gemm_built_at_one_token_count_runs_at_others() {
    let out = tempfile::tempdir().unwrap();
    let (k, n) = (256usize, 128usize);
    let r = build(
        Builder::new().op("latent_moe_gemm").alias("proj").dims(&[("M", 64), ("K", k as i64), ("N", n as i64)]),
        out.path(),
    )
    .unwrap();
    assert_eq!(r.kernels.len(), 1);
    let kern: &Kernel = &r.kernels[0].kernel;
    let src = generated(&r);
    let ty = struct_names(&src).into_iter().find(|s| s != "Plan").unwrap();
    // M is a run-time dim: not pinned; K and N are fixed by the model.
    let pins = pins_of(&src, &ty);
    assert!(pins.contains(r#"("K", 256)"#) && pins.contains(r#"("N", 128)"#), "{pins}");
    assert!(!pins.contains(r#""M""#), "M must not be pinned: {pins}");
    let pins: &[(&str, i64)] = &[("K", k as i64), ("N", n as i64)];

    // The launch check takes other token counts ...
    for m in [1usize, 17, 64, 300, 4096] {
        let (x, w, y) = ([m, k], [n, k], [m, n]);
        let args = [arg(DType::Bf16, &x), arg(DType::Bf16, &w), arg(DType::Bf16, &y)];
        rt::check_launch(kern, pins, &args, &[], 132).unwrap_or_else(|e| panic!("M = {m}: {e}"));
    }
    // ... and refuses a changed fixed dim, naming the argument and the dim.
    let (x, w, y) = ([17, 128], [n, 128], [17, n]);
    let e = rt::check_launch(kern, pins, &[arg(DType::Bf16, &x), arg(DType::Bf16, &w), arg(DType::Bf16, &y)], &[], 132)
        .unwrap_err();
    assert!(matches!(&e, rt::Error::Pinned { sym, expected: 256, got: 128, .. } if sym == "K"), "{e}");
    assert!(e.to_string().contains("argument `x`"), "{e}");
    // A wrong dtype is refused too.
    let (x, w, y) = ([17, k], [n, k], [17, n]);
    assert!(
        rt::check_launch(kern, pins, &[arg(DType::F32, &x), arg(DType::Bf16, &w), arg(DType::Bf16, &y)], &[], 132)
            .is_err()
    );

    // The very kernel that was built for M = 64 computes M = 17 and M = 130 right (CPU interpreter vs f64).
    for m in [17usize, 130] {
        let xv = draw(m * k, 1 + m as u64);
        let wv: Vec<f32> = draw(n * k, 7).iter().map(|v| v / 16.0).collect();
        let mut ts = vec![
            HostTensor::from_f32(DType::Bf16, &[m, k], &xv),
            HostTensor::from_f32(DType::Bf16, &[n, k], &wv),
            HostTensor::from_f32(DType::Bf16, &[m, n], &vec![f32::NAN; m * n]),
        ];
        // The reference sees the bf16-rounded inputs the kernel sees.
        let xr: Vec<f32> = (0..m * k).map(|i| ts[0].get_f32(i)).collect();
        let wr: Vec<f32> = (0..n * k).map(|i| ts[1].get_f32(i)).collect();
        interp::run(kern, &mut ts, &[], InterpOptions::default()).unwrap();
        let got: Vec<f32> = (0..m * n).map(|i| ts[2].get_f32(i)).collect();
        let want = k3k_reference::gemm::matmul_nt(&xr, m, k, &wr, n).unwrap();
        let err = rel_l2(&got, &want);
        assert!(err < 5e-3, "M = {m}: relative error {err}");
    }
}

fn mxfp4(b: Builder, dims: &[(&str, i64)]) -> Builder {
    b.op("mxfp4_matmul").alias("expert").dims(dims)
}

/// Run `inst`'s plan on the CPU interpreter with each step's kernel replaced by the emitted kernel of the same
/// position among the plan's distinct kernels, and return the check.
fn run_with(inst: &dyn k3k_ops::op::Instance, knobs: &k3k_ir::Knobs, emitted: &[Kernel]) -> k3k_ops::op::CheckReport {
    let plan = inst.plan(knobs).unwrap();
    let mut order: Vec<String> = vec![];
    for s in &plan.steps {
        let h = stable_hash(&s.kernel);
        if !order.contains(&h) {
            order.push(h);
        }
    }
    assert_eq!(order.len(), emitted.len(), "the plan and the build have the same kernels");
    let bufs = plan
        .run_host(|k, args, scalars| {
            let i = order.iter().position(|h| *h == stable_hash(k)).unwrap();
            interp::run(&emitted[i], args, scalars, InterpOptions::default())?;
            Ok(())
        })
        .unwrap();
    inst.check(&plan.outputs(bufs)).unwrap()
}

#[test]
fn the_default_mxfp4_launcher_is_right_for_every_scale_byte() {
    let op = op_named("mxfp4_matmul");
    for dims in
        [&[("M", 4), ("N", 64), ("K", 256)][..], &[("G", 3), ("per", 5), ("N", 64), ("K", 128), ("epilogue", 1)]]
    {
        let out = tempfile::tempdir().unwrap();
        let r = build(mxfp4(Builder::new(), dims), out.path()).unwrap();
        let knobs = r.requests[0].knobs.clone();
        let emitted: Vec<Kernel> = r.kernels.iter().map(|k| k.kernel.clone()).collect();
        // Weights whose scale bytes span 0..=20, 129..=160 and 255 (NaN blocks): valid MX, past what folding takes.
        let mut p = Preset::new("wide", dims);
        p.dims.insert("wide".into(), 1);
        let inst = op.instance(&p, 11).unwrap();
        // The kernels the operator picks for these weights are exactly the ones k3k-build emitted by default ...
        let plan = inst.plan(&knobs).unwrap();
        for s in &plan.steps {
            assert!(
                emitted.iter().any(|k| stable_hash(k) == stable_hash(&s.kernel)),
                "{dims:?}: the plan for wide scales uses `{}`, which the default build did not emit",
                s.kernel.name
            );
        }
        // ... and they match the f64 reference there (NaN rows included).
        let rep = run_with(inst.as_ref(), &knobs, &emitted);
        assert!(rep.passed, "{dims:?}: {} ({})", rep.detail, rep.max_rel_err);

        // The folded-scale kernels, built only when the request assumes them, are wrong on these weights: the
        // check above can fail, and the assumption is in the launcher's signature.
        let out2 = tempfile::tempdir().unwrap();
        let r2 = build(mxfp4(Builder::new(), dims).assume_folded_scales(), out2.path()).unwrap();
        let folded: Vec<Kernel> = r2.kernels.iter().map(|k| k.kernel.clone()).collect();
        assert_ne!(
            folded.iter().map(stable_hash).collect::<Vec<_>>(),
            emitted.iter().map(stable_hash).collect::<Vec<_>>()
        );
        let bad = run_with(inst.as_ref(), &r2.requests[0].knobs, &folded);
        assert!(!bad.passed, "{dims:?}: folded-scale kernels must fail on wide scales");
        let src = generated(&r2);
        assert!(src.contains("_scales: rt::FoldedScales"), "the assumption shows in the signature");
        assert!(!generated(&r).contains("FoldedScales"));
    }
}

#[test]
fn generated_names_do_not_change_with_knobs() {
    let names = |knobs: &str| {
        let out = tempfile::tempdir().unwrap();
        let mut b = Builder::new().op("kda.decode").alias("decode").dims(&[
            ("N", 2),
            ("T", 1),
            ("H", 2),
            ("K", 128),
            ("V", 128),
            ("safe", 1),
        ]);
        if !knobs.is_empty() {
            b = b.knobs(knobs);
        }
        let r = build(b, out.path()).unwrap();
        let src = generated(&r);
        let kernels: Vec<String> = r.kernels.iter().map(|k| k.name.clone()).collect();
        (struct_names(&src), kernels)
    };
    let (a, ka) = names("");
    let (b, kb) = names("KL=8,VPL=2");
    assert_ne!(ka, kb, "the knobs change the kernels");
    assert_eq!(a, b, "but not the generated names");
    for n in &a {
        for knob_text in ["Kl4", "Kl8", "Vpl", "W2"] {
            assert!(!n.contains(knob_text), "`{n}` carries a knob value");
        }
    }
    // The GEMM too: another tile shape, the same launcher.
    let gemm = |knobs: &str| {
        let out = tempfile::tempdir().unwrap();
        let mut b = Builder::new().op("latent_moe_gemm").dims(&[("G", 4), ("mean", 32), ("K", 256), ("N", 512)]);
        if !knobs.is_empty() {
            b = b.knobs(knobs);
        }
        struct_names(&generated(&build(b, out.path()).unwrap()))
    };
    assert_eq!(gemm(""), gemm("BN=128"));
}

#[test]
fn typos_in_a_request_are_build_errors() {
    let e = build_error(small_gemm().knobs("bm=64"));
    assert!(e.contains("unknown knob `bm`") && e.contains("`BM`"), "{e}");
    let e = build_error(small_gemm().knobs("MMA=tensor"));
    assert!(e.contains("`MMA`") && e.contains("tensor"), "{e}");
    let e = build_error(small_gemm().knobs("FOO=1"));
    assert!(e.contains("`FOO`"), "{e}");
    let e = build_error(small_gemm().pin("NX", 3));
    assert!(e.contains("`.pin(..)` names `NX`") && e.contains("`K`"), "{e}");
    let e = build_error(small_gemm().free_dims(&["MM"]));
    assert!(e.contains("`.free_dims(..)` names `MM`"), "{e}");
    let e = build_error(small_gemm().roles(&["A", "B"]));
    assert!(e.contains("`.roles(..)` names 2 kernels"), "{e}");
    let e = build_error(small_gemm().op("latent_moe_gemm").alias("g").dims(&[("M", 4), ("K", 256), ("N", 512)]));
    assert!(e.contains("alias `g` names two requests"), "{e}");
    let e = build_error(small_gemm().assume_folded_scales());
    assert!(e.contains("`assume_folded_scales()` applies to `mxfp4_matmul` only"), "{e}");
}

/// The `PINS` of every generated launcher, as (struct, pinned dim names).
fn all_pins(src: &str) -> Vec<(String, String)> {
    struct_names(src)
        .into_iter()
        .filter(|s| !["Plan", "Inputs", "Outputs", "Dispatch", "Varlen"].contains(&s.as_str()))
        .map(|s| (pins_of(src, &s), s))
        .collect()
}

#[test]
fn run_time_dims_are_free_exactly_where_the_operator_builds_the_same_kernels() {
    let ops = k3k_ops::registry::all();
    let cases: &[(&str, &[(&str, i64)])] = &[
        ("latent_moe_gemm", &[("M", 64), ("K", 256), ("N", 128)]),
        ("mxfp4_matmul", &[("M", 4), ("N", 64), ("K", 256)]),
        ("mxfp4_matmul", &[("M", 512), ("N", 256), ("K", 256)]),
        ("kda.decode", &[("N", 2), ("T", 1), ("H", 2), ("K", 128), ("V", 128), ("safe", 1)]),
        ("gated_mla.decode", &[("B", 2), ("SQ", 1), ("H", 4), ("S", 100)]),
        ("gated_mla.gate", &[("T", 3), ("H", 4), ("gate", 1)]),
        ("gated_mla.prefill", &[("T", 64), ("S", 64), ("H", 2), ("causal", 1), ("gate", 1)]),
    ];
    let mut free_seen = 0;
    for (name, dims) in cases {
        let op = ops.iter().find(|o| o.name() == *name).unwrap();
        let out = tempfile::tempdir().unwrap();
        let r = build(Builder::new().op(name).dims(dims), out.path()).unwrap();
        let knobs = &r.requests[0].knobs;
        let emitted: Vec<String> = r.kernels.iter().map(|k| stable_hash(&k.kernel)).collect();
        let pins = all_pins(&generated(&r));
        for d in k3k_build::runtime_dims(name) {
            let Some(&v) = dims.iter().find(|(n, _)| n == d).map(|(_, v)| v) else { continue };
            // Only a dim the kernels take as a shape can be checked at a launch (a decode's cache length, say,
            // comes as data, in a lengths tensor).
            if !r.kernels.iter().any(|k| k.kernel.syms.iter().any(|s| s.name == *d && s.kind == k3k_ir::SymKind::Dim)) {
                continue;
            }
            let pinned = pins.iter().any(|(p, _)| p.contains(&format!("(\"{d}\", {v})")));
            // What the operator builds at other values of the dim (as k3k-build builds it: MXFP4 for any scale).
            let same_at = |x: i64| {
                let mut q = Preset::new("other", dims);
                q.dims.insert(d.to_string(), x);
                if *name == "mxfp4_matmul" {
                    q.dims.insert("wide".into(), 1);
                }
                if op.check_dims(&q).is_err() {
                    return true; // past the operator's bounds: no shape it takes
                }
                op.kernels(&q, knobs).is_ok_and(|ks| {
                    let mut seen = std::collections::HashSet::new();
                    ks.iter().map(stable_hash).filter(|h| seen.insert(h.clone())).collect::<Vec<_>>() == emitted
                })
            };
            let probes = [1, v + 1, 2 * v + 3, 3 * v + 5, 1000, 4097, 65539, 300_001];
            let differing: Vec<i64> = probes.into_iter().filter(|&x| !same_at(x)).collect();
            let same = differing.is_empty();
            if !same {
                println!("{name} {dims:?}: {d}: other kernels at {differing:?}");
            }
            println!("{name} {dims:?}: {d} {}", if pinned { "pinned" } else { "free" });
            assert_eq!(
                !pinned,
                same,
                "{name} {dims:?}: `{d}` is {} but the operator's kernels at other values are {}",
                if pinned { "pinned" } else { "free" },
                if same { "the same" } else { "others" }
            );
            free_seen += usize::from(!pinned);
        }
    }
    assert!(free_seen >= 3, "the token counts of the GEMMs and the decode batches are run-time dims");

    // A kda.decode launcher built for 2 sequences takes 5 at run time.
    let out = tempfile::tempdir().unwrap();
    let r = build(
        Builder::new().op("kda.decode").dims(&[("N", 2), ("T", 1), ("H", 2), ("K", 128), ("V", 128), ("safe", 1)]),
        out.path(),
    )
    .unwrap();
    let src = generated(&r);
    if !all_pins(&src).iter().any(|(p, _)| p.contains(r#"("N", 2)"#)) {
        assert!(src.contains("Run-time dims, any value at each launch"), "the docs say which dims are free");
    }
}

/// A `KdaVarlenSpec` for layout arithmetic (its kernel images are never loaded).
fn varlen_spec(chunk: usize, hv: usize, dk: usize, dv: usize, max_tokens: usize, max_seqs: usize) -> rt::KdaVarlenSpec {
    let img: &'static rt::KernelImage = Box::leak(Box::new(rt::KernelImage {
        gpu: "nvidia-h200",
        name: "none",
        knobs: "",
        knobs_source: "",
        ir_json: "",
        ptx: None,
        cubin: None,
        cuda: None,
    }));
    rt::KdaVarlenSpec {
        name: "t",
        gpu: "nvidia-h200",
        chunk,
        hv,
        dk,
        dv,
        op_dt: DType::F16,
        max_tokens,
        max_seqs,
        token_inputs: 5,
        intra: img,
        state: img,
        state_h0: img,
        scalars: &[],
    }
}

#[test]
fn a_varlen_kda_request_serves_batches_of_any_lengths() {
    let op = op_named("kda");
    let dims = [("H", 2), ("K", 64), ("V", 64), ("safe", 1), ("gate", 1), ("l2norm", 1), ("bsig", 1)];
    let out = tempfile::tempdir().unwrap();
    let r = build(Builder::new().op("kda").alias("attn").dims(&dims).varlen(4096, 8), out.path()).unwrap();
    let src = generated(&r);
    for want in [
        "pub struct Varlen",
        "cu_seqlens: &[i32]",
        "h0: Option<&dyn rt::In<rt::F32>>",
        "workspace: &mut dyn rt::Out<rt::U8>",
        "pub struct Intra",
        "pub struct StateFromH0",
    ] {
        assert!(src.contains(want), "generated code lacks `{want}`:\n{src}");
    }
    let emitted: Vec<Kernel> = r.kernels.iter().map(|k| k.kernel.clone()).collect();
    assert_eq!(emitted.len(), 3, "intra, state from zeros, state from h0");
    let knobs = r.requests[0].knobs.clone();
    let chunk = knobs.u32("CHUNK").unwrap() as usize;
    assert_eq!(knobs.u32("TSPLIT").unwrap(), 1);
    let spec = varlen_spec(chunk, 2, 64, 64, 4096, 8);

    // Batches the build never saw: every launch is one of the emitted kernels on tables the run-time half
    // computes, and the batch matches the f64 recurrence on the CPU interpreter.
    for (lens, h0) in [(vec![37usize, 1, 130, 64], 0), (vec![300], 1), (vec![5, 0, 90, 16, 16], 1)] {
        let mut p = Preset::new("varlen", &dims);
        p.dims.insert("N".into(), lens.len() as i64);
        p.dims.insert("h0".into(), h0);
        for (i, l) in lens.iter().enumerate() {
            p.dims.insert(format!("L{i}"), *l as i64);
        }
        let inst = op.instance(&p, 5).unwrap();
        let plan = inst.plan(&knobs).unwrap();
        let cu: Vec<i32> = std::iter::once(0)
            .chain(lens.iter().scan(0i32, |s, &l| {
                *s += l as i32;
                Some(*s)
            }))
            .collect();
        let mut tables = vec![];
        let (nch, n) = rt::chunk_tables(&cu, chunk, &mut tables).unwrap();
        let buf =
            |name: &str| plan.buffers.iter().find(|b| b.name == name).unwrap_or_else(|| panic!("no buffer {name}"));
        let as_i32 = |t: &HostTensor| (0..t.len()).map(|i| t.get_f32(i) as i32).collect::<Vec<_>>();
        assert_eq!(as_i32(&buf("ctab").tensor), tables[..2 * nch], "{lens:?}: chunk table");
        assert_eq!(as_i32(&buf("stab").tensor), tables[2 * nch..], "{lens:?}: sequence table");
        assert_eq!(n, lens.len());
        let shapes = spec.scratch_shapes(nch);
        for (i, name) in ["wu", "qbar", "kbar", "p"].iter().enumerate() {
            assert_eq!(buf(name).tensor.shape, shapes[i], "{lens:?}: {name}");
        }
        assert_eq!(buf("gamma").tensor.shape, shapes[4][..3], "{lens:?}: gamma");
        assert!(spec.layout(nch, n).bytes <= spec.workspace_bytes());
        for s in &plan.steps {
            assert!(
                emitted.iter().any(|k| stable_hash(k) == stable_hash(&s.kernel)),
                "{lens:?}: the operator runs `{}`, which the varlen request did not emit",
                s.kernel.name
            );
        }
        let bufs = plan
            .run_host(|k, args, scalars| {
                let e = emitted.iter().find(|e| stable_hash(e) == stable_hash(k)).unwrap();
                interp::run(e, args, scalars, InterpOptions::default())?;
                Ok(())
            })
            .unwrap();
        let rep = inst.check(&plan.outputs(bufs)).unwrap();
        assert!(rep.passed, "{lens:?}: {} ({})", rep.detail, rep.max_rel_err);
    }

    // The workspace layout: aligned, disjoint, and within the bound for every batch within the limits.
    let l = spec.layout(40, 8);
    let offs = [l.ctab, l.stab, l.wu, l.qbar, l.kbar, l.p, l.gamma, l.bytes];
    assert!(offs.iter().all(|o| o % 256 == 0) && offs.windows(2).all(|w| w[0] < w[1]), "{l:?}");
    assert_eq!(spec.layout(spec.max_chunks(), 8).bytes, spec.workspace_bytes());
    // Bad offsets are refused with the entry named.
    let mut t = vec![];
    assert!(rt::chunk_tables(&[3, 4], chunk, &mut t).unwrap_err().to_string().contains("start with 0"));
    assert!(rt::chunk_tables(&[0, 9, 4], chunk, &mut t).unwrap_err().to_string().contains("entry 2 (4)"));

    // Varlen is for `kda` alone, and not with a recorded plan.
    let e =
        build(Builder::new().op("latent_moe_gemm").dims(&[("M", 4), ("K", 256), ("N", 64)]).varlen(64, 2), out.path())
            .err()
            .unwrap();
    assert!(e.to_string().contains("`varlen(..)` applies to `kda` only"), "{e}");
}

#[test]
fn unknown_or_negative_dims_are_build_errors() {
    // Dims the operator does not take, misspelt or unknown, name the dim.
    let e = build_error(small_gemm().dims(&[("FOO", 7)]));
    assert!(e.contains("FOO"), "{e}");
    let e = build_error(Builder::new().op("mxfp4_matmul").dims(&[("M", 4), ("N", 64), ("K", 256), ("pakced", 1)]));
    assert!(e.contains("pakced"), "{e}");
    let e = build_error(small_gemm().dims(&[("G", -1)]));
    assert!(e.contains("`G`") || e.contains("G"), "{e}");
}

#[test]
fn a_paged_mla_decode_built_for_one_cache_length_serves_others() {
    // The cache length comes as data (a lengths tensor), so no shape check can catch a launcher used past the
    // length it was built for. The launcher built for S = 100 is the one-split kernel (no combine); the
    // operator builds the very same kernel for the one-split plan at every length, and it is right there.
    let op = op_named("gated_mla.decode");
    let dims = [("B", 2), ("SQ", 1), ("H", 4), ("S", 100)];
    let out = tempfile::tempdir().unwrap();
    let r = build(Builder::new().op("gated_mla.decode").dims(&dims), out.path()).unwrap();
    let emitted: Vec<Kernel> = r.kernels.iter().map(|k| k.kernel.clone()).collect();
    assert_eq!(emitted.len(), 1, "one split at S = 100: one kernel");
    let mut knobs = r.requests[0].knobs.clone();
    knobs.set("NSPLIT", 1i64);
    for s in [1i64, 257, 1000, 4099] {
        let mut p = Preset::new("other", &dims);
        p.dims.insert("S".into(), s);
        let inst = op.instance(&p, 3).unwrap();
        let plan = inst.plan(&knobs).unwrap();
        assert!(plan.steps.iter().all(|st| stable_hash(&st.kernel) == stable_hash(&emitted[0])), "S = {s}");
        let bufs = plan
            .run_host(|k, args, scalars| {
                interp::run(k, args, scalars, InterpOptions::default())?;
                Ok(())
            })
            .unwrap();
        let rep = inst.check(&plan.outputs(bufs)).unwrap();
        assert!(rep.passed, "S = {s}: {} ({})", rep.detail, rep.max_rel_err);
    }
}

/// Run the single kernel `k` on the buffers of `plan` named like its arguments, with the scalars of the plan's
/// last launch, and return the plan's outputs.
fn run_by_name(k: &Kernel, plan: &k3k_ops::plan::Plan) -> k3k_ops::plan::Outputs {
    let scalars: Vec<(&str, k3k_ir::SymValue)> =
        plan.steps.last().map(|s| s.scalars.iter().map(|(n, v)| (n.as_str(), *v)).collect()).unwrap_or_default();
    let mut args: Vec<HostTensor> = k
        .tensors
        .iter()
        .map(|t| {
            let b = plan.buffers.iter().find(|b| b.name == t.name).unwrap_or_else(|| panic!("no buffer `{}`", t.name));
            let mut h = b.tensor.clone();
            if b.role != k3k_ops::plan::Role::Input {
                h.poison();
            }
            h
        })
        .collect();
    interp::run(k, &mut args, &scalars, InterpOptions::default()).unwrap();
    let mut out = k3k_ops::plan::Outputs::default();
    for (t, h) in k.tensors.iter().zip(args) {
        if plan.buffers.iter().any(|b| b.name == t.name && b.role == k3k_ops::plan::Role::Output) {
            out.0.insert(t.name.clone(), h);
        }
    }
    out
}

#[test]
fn a_grouped_mxfp4_launcher_built_for_few_rows_per_expert_is_right_for_more() {
    // Rows per expert come as data (offsets), so no shape check sees them: the kernel built for 4 rows per
    // expert (the decode-like path) must be right, if slower, for any count; the operator itself picks other
    // paths past it (checked here too: they differ).
    let op = op_named("mxfp4_matmul");
    let dims = [("G", 3), ("per", 4), ("N", 64), ("K", 128)];
    let out = tempfile::tempdir().unwrap();
    let r = build(Builder::new().op("mxfp4_matmul").dims(&dims), out.path()).unwrap();
    assert_eq!(r.kernels.len(), 1);
    let built = &r.kernels[0].kernel;
    let knobs = r.requests[0].knobs.clone();
    let mut other_paths = 0;
    for per in [0i64, 1, 17, 300] {
        let mut p = Preset::new("other", &dims);
        p.dims.insert("per".into(), per);
        p.dims.insert("wide".into(), 1);
        let inst = op.instance(&p, 9).unwrap();
        let plan = inst.plan(&knobs).unwrap();
        other_paths += usize::from(plan.steps.iter().any(|s| stable_hash(&s.kernel) != stable_hash(built)));
        let rep = inst.check(&run_by_name(built, &plan)).unwrap();
        assert!(rep.passed, "per = {per}: {} ({})", rep.detail, rep.max_rel_err);
    }
    assert!(other_paths >= 1, "the operator picks other kernels for many rows per expert");
}

#[test]
fn a_bucketed_mxfp4_launcher_picks_the_kernel_of_the_token_count() {
    assert_eq!([0, 1, 2, 5, 16, 17, 64, 1000].map(|v| rt::pick_bucket(&[1, 4, 16, 64], v)), [0, 0, 1, 2, 2, 3, 3, 3]);
    let op = op_named("mxfp4_matmul");
    let dims = [("M", 16), ("N", 64), ("K", 256)];
    let buckets = [1i64, 4, 16];
    let out = tempfile::tempdir().unwrap();
    let r =
        build(Builder::new().op("mxfp4_matmul").alias("mx").dims(&dims).buckets("M", &buckets), out.path()).unwrap();
    let src = generated(&r);
    assert!(src.contains("pub struct Dispatch"), "{src}");
    assert!(src.contains("pub const BUCKETS: &'static [i64] = &[1, 4, 16];"));
    for b in buckets {
        assert!(src.contains(&format!("pub struct M{b} ")), "a launcher per bucket");
    }
    assert!(all_pins(&src).iter().all(|(p, _)| !p.contains("\"M\"")), "M is free in every bucket's launcher");
    assert_eq!(r.requests.len(), buckets.len(), "one knob lookup per bucket");
    assert!(
        r.kernels.len() >= 2,
        "the buckets run different paths: {:?}",
        r.kernels.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    // Each bucket's kernel is the operator's own at that token count, and right at the counts it serves.
    for (i, b) in buckets.iter().enumerate() {
        let mut p = Preset::new("b", &dims);
        p.dims.insert("M".into(), *b);
        p.dims.insert("wide".into(), 1);
        let own = op.kernels(&p, &r.requests[i].knobs).unwrap();
        let built = r.kernels.iter().find(|k| k.name == r.requests[i].kernels[0]).unwrap();
        assert_eq!(stable_hash(&own[0]), stable_hash(&built.kernel), "bucket {b}");
        let lo = if i == 0 { 1 } else { buckets[i - 1] + 1 };
        for m in [lo, *b] {
            p.dims.insert("M".into(), m);
            let inst = op.instance(&p, 21).unwrap();
            let plan = inst.plan(&r.requests[i].knobs).unwrap();
            let rep = inst.check(&run_by_name(&built.kernel, &plan)).unwrap();
            assert!(rep.passed, "bucket {b} at M = {m}: {} ({})", rep.detail, rep.max_rel_err);
        }
    }
    // A bucket whose path needs several kernels (the prefill path at 4096) or other arguments (the split-K tile
    // path's partial sums at 32) is refused, naming it.
    let e = build(Builder::new().op("mxfp4_matmul").dims(&dims).buckets("M", &[16, 4096]), out.path()).err().unwrap();
    assert!(e.to_string().contains("at M = 4096") && e.to_string().contains("one-kernel path"), "{e}");
    let e = build(Builder::new().op("mxfp4_matmul").dims(&dims).buckets("M", &[16, 32]), out.path()).err().unwrap();
    assert!(e.to_string().contains("at M = 32 takes other arguments"), "{e}");
    let e = build(Builder::new().op("mxfp4_matmul").dims(&dims).buckets("K", &[16]), out.path()).err().unwrap();
    assert!(e.to_string().contains("no run-time dim"), "{e}");
}

#[test]
fn a_varlen_gated_mla_prefill_launcher_serves_other_batches() {
    // The kernel reads cu_seqlens from device memory: a launcher built for one batch takes any other (its
    // kernel is the operator's own for every varlen batch; H stays fixed).
    let op = op_named("gated_mla.prefill");
    let base = [("H", 2), ("causal", 1), ("gate", 1)];
    let out = tempfile::tempdir().unwrap();
    let mut dims: Vec<(&str, i64)> = base.to_vec();
    dims.extend([("N", 2), ("q0", 5), ("q1", 7), ("k0", 5), ("k1", 7)]);
    let r = build(Builder::new().op("gated_mla.prefill").alias("mla").dims(&dims), out.path()).unwrap();
    assert_eq!(r.kernels.len(), 1);
    let built = &r.kernels[0].kernel;
    let pins = all_pins(&generated(&r));
    assert!(pins.iter().all(|(p, _)| p.contains(r#"("H", 2)"#) && !p.contains("TQ") && !p.contains("N1")), "{pins:?}");
    let knobs = r.requests[0].knobs.clone();
    for lens in [vec![3i64, 40, 1], vec![130]] {
        let mut p = Preset::new("other", &base);
        p.dims.insert("N".into(), lens.len() as i64);
        for (i, l) in lens.iter().enumerate() {
            p.dims.insert(format!("q{i}"), *l);
            p.dims.insert(format!("k{i}"), *l);
        }
        let inst = op.instance(&p, 4).unwrap();
        let plan = inst.plan(&knobs).unwrap();
        assert!(plan.steps.iter().all(|s| stable_hash(&s.kernel) == stable_hash(built)), "{lens:?}");
        let rep = inst.check(&run_by_name(built, &plan)).unwrap();
        assert!(rep.passed, "{lens:?}: {} ({})", rep.detail, rep.max_rel_err);
    }
}
