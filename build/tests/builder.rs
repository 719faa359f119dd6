//! The builder end to end, without a GPU: files in a temporary OUT_DIR, generated Rust that parses, the
//! results lookup and its fallback warning, plans, and usage errors.

use k3k_build::{BuildError, Builder, KnobSource};
use std::path::Path;

fn gemm(b: Builder) -> Builder {
    b.op("latent_moe_gemm").alias("moe_up").dims(&[("G", 4), ("mean", 32), ("K", 256), ("N", 512), ("epilogue", 1)])
}

fn parse(path: &Path) -> syn::File {
    let src = std::fs::read_to_string(path).unwrap();
    syn::parse_file(&src).unwrap_or_else(|e| panic!("generated Rust does not parse: {e}\n{src}"))
}

/// The plan module that `k3k-build` writes into `out` for `op` (as `alias`) at `dims`, with no tuning records: the
/// report and the generated Rust (which must parse).
fn plan_of(out: &Path, op: &str, alias: &str, dims: &[(&str, i64)]) -> (k3k_build::Report, String) {
    let report = Builder::new()
        .op(op)
        .alias(alias)
        .dims(dims)
        .plan(true)
        .results_dir(out.join("none"))
        .out_dir(out)
        .cargo_output(false)
        .build()
        .unwrap();
    parse(&report.rust_file);
    let src = std::fs::read_to_string(&report.rust_file).unwrap();
    (report, src)
}

fn fn_params(f: &syn::File, module: &str, ty: &str, func: &str) -> Vec<String> {
    use quote_free::*;
    let m = f
        .items
        .iter()
        .find_map(|i| match i {
            syn::Item::Mod(m) if m.ident == module => m.content.as_ref().map(|c| &c.1),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no module {module}"));
    let imp = m
        .iter()
        .find_map(|i| match i {
            syn::Item::Impl(im) if type_name(&im.self_ty) == ty => Some(im),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no impl {ty}"));
    let f = imp
        .items
        .iter()
        .find_map(|i| match i {
            syn::ImplItem::Fn(f) if f.sig.ident == func => Some(f),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no fn {func}"));
    f.sig
        .inputs
        .iter()
        .map(|a| match a {
            syn::FnArg::Receiver(_) => "self".into(),
            syn::FnArg::Typed(p) => format!("{}: {}", pat_name(&p.pat), type_name(&p.ty)),
        })
        .collect()
}

/// Tiny printers for the bits of syntax the assertions look at.
mod quote_free {
    pub fn type_name(t: &syn::Type) -> String {
        match t {
            syn::Type::Path(p) => path_name(&p.path),
            syn::Type::Reference(r) => {
                format!("&{}{}", if r.mutability.is_some() { "mut " } else { "" }, type_name(&r.elem))
            }
            syn::Type::TraitObject(t) => format!("dyn {}", bounds(&t.bounds)),
            syn::Type::ImplTrait(t) => format!("impl {}", bounds(&t.bounds)),
            syn::Type::Paren(p) => format!("({})", type_name(&p.elem)),
            _ => "?".into(),
        }
    }
    fn path_name(p: &syn::Path) -> String {
        p.segments
            .iter()
            .map(|s| {
                let args = match &s.arguments {
                    syn::PathArguments::AngleBracketed(a) => format!(
                        "<{}>",
                        a.args
                            .iter()
                            .map(|g| match g {
                                syn::GenericArgument::Type(t) => type_name(t),
                                _ => "_".into(),
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    _ => String::new(),
                };
                format!("{}{args}", s.ident)
            })
            .collect::<Vec<_>>()
            .join("::")
    }
    fn bounds(b: &syn::punctuated::Punctuated<syn::TypeParamBound, syn::Token![+]>) -> String {
        b.iter()
            .map(|b| match b {
                syn::TypeParamBound::Trait(t) => {
                    let q = if matches!(t.modifier, syn::TraitBoundModifier::Maybe(_)) { "?" } else { "" };
                    format!("{q}{}", path_name(&t.path))
                }
                _ => "_".into(),
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }
    pub fn pat_name(p: &syn::Pat) -> String {
        match p {
            syn::Pat::Ident(i) => i.ident.to_string(),
            _ => "?".into(),
        }
    }
}

#[test]
fn emits_ptx_and_typed_launchers_with_default_knob_warning() {
    let out = tempfile::tempdir().unwrap();
    let results = tempfile::tempdir().unwrap();
    let report = gemm(Builder::new())
        .gpu("nvidia-h200")
        .results_dir(results.path())
        .out_dir(out.path())
        .cargo_output(false)
        .build()
        .unwrap();

    // Files: PTX + IR (+ CUBIN when ptxas is here), and the Rust module.
    assert_eq!(report.kernels.len(), 1);
    let k = &report.kernels[0];
    assert!(k.name.starts_with("k3k_gemm_grouped_situ_glu_in8_out8"), "{}", k.name);
    assert!(k.ir.starts_with(out.path().join("k3k")));
    let ptx = std::fs::read_to_string(k.ptx.as_ref().unwrap()).unwrap();
    assert!(ptx.contains(&format!(".entry {}", k.name)));
    assert!(ptx.contains(".target sm_90a"));
    if k3k_codegen_ptxas_present() {
        let cubin = std::fs::read(k.cubin.as_ref().expect("cubin with ptxas present")).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF");
    }

    // The fallback: no results file, default knobs, and a warning that says so.
    assert_eq!(report.requests.len(), 1);
    assert!(matches!(&report.requests[0].source, KnobSource::Default { why } if why.contains("does not exist")));
    assert!(report.warnings.iter().any(|w| w.contains("latent_moe_gemm") && w.contains("using the default knobs")));

    // The Rust: parses, names the arguments after the kernel's tensors, types them, pins K and N and G.
    let file = parse(&report.rust_file);
    let params = fn_params(&file, "moe_up", "GemmGroupedSituGluIn8Out8", "launch");
    assert_eq!(
        params,
        [
            "self",
            "stream: &(impl rt::AsStream + ?Sized)",
            "x: &dyn rt::In<rt::Bf16>",
            "w: &dyn rt::In<rt::Bf16>",
            "offs: &dyn rt::In<rt::I32>",
            "y: &mut dyn rt::Out<rt::Bf16>"
        ]
    );
    let src = std::fs::read_to_string(&report.rust_file).unwrap();
    assert!(src.contains(r#"&[("K", 256), ("N", 512), ("G", 4)]"#), "pins:\n{src}");
    assert!(src.contains("include_str!("), "PTX and IR are embedded");
    assert!(src.contains("pub fn verify_embedded()"));
}

fn k3k_codegen_ptxas_present() -> bool {
    k3k_codegen::toolchain::find_ptxas().is_ok()
}

#[test]
fn tuned_record_is_used_and_named() {
    use k3k_tuner::{CandidateResult, CheckRecord, GpuKey, Outcome, ResultsFile, ResultsStore, TimingStats};
    let results = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    // A record for the request's bucket, as `k3k tune` would write it.
    let op = k3k_build::ops::registry::select("latent_moe_gemm").pop().unwrap();
    let p = k3k_build::ops::op::Preset::new("t", &[("G", 4), ("mean", 32), ("K", 256), ("N", 512), ("epilogue", 1)]);
    let gpu = GpuKey::new("NVIDIA H200", (9, 0), 132);
    let mut f = ResultsFile::new("latent_moe_gemm", gpu.clone());
    let nvrtc = k3k_codegen::toolchain::nvrtc_version().unwrap();
    let key = k3k_build::lookup::tune_key(op.as_ref(), &p, &gpu, Some(&nvrtc)).unwrap();
    let e = f.entry_mut(&key);
    let knobs =
        serde_json::json!({"BM": 64, "BN": 128, "BK": 32, "STAGES": 3, "WM": 2, "WN": 2, "RASTER": "n", "MMA": "sync"});
    let map = knobs.as_object().unwrap().clone().into_iter().collect();
    e.upsert_candidate(CandidateResult::new("w", map, Outcome::Timed(TimingStats::from_samples(&[1.0]).unwrap())));
    e.set_check("w", CheckRecord { max_rel_err: 1e-3, passed: true });
    ResultsStore::open(results.path()).unwrap().save(&f).unwrap();

    let report =
        gemm(Builder::new()).results_dir(results.path()).out_dir(out.path()).cargo_output(false).build().unwrap();
    let r = &report.requests[0];
    assert!(matches!(r.source, KnobSource::Tuned { exact: true, .. }), "{}", r.source);
    assert_eq!(r.knobs.str("RASTER").unwrap(), "n");
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert!(report.kernels[0].name.contains("bm64"), "{}", report.kernels[0].name);
    let src = std::fs::read_to_string(&report.rust_file).unwrap();
    assert!(src.contains("tuned: "), "the module docs name the record");
}

#[test]
fn plan_records_tables_scalars_and_io() {
    let out = tempfile::tempdir().unwrap();
    let (report, src) =
        plan_of(out.path(), "hist_quantile.qb", "router_qb", &[("T", 300), ("E", 16), ("k", 4), ("B", 256)]);
    let file = parse(&report.rust_file);
    // Inputs s and b are data (they differ between seeds); outputs alpha, counts, bias.
    assert!(src.contains("pub struct Inputs<'a>"));
    assert!(src.contains("pub s: &'a dyn rt::In<rt::F32>,"), "{src}");
    assert!(src.contains("pub b: &'a dyn rt::In<rt::F32>,"));
    assert!(src.contains("pub bias: rt::Tensor<rt::F32>,"));
    assert!(src.contains("rt::BufRole::Scratch"), "partials are scratch");
    assert!(src.contains(r#"("tceil", rt::SymValue::Int("#), "scalars recorded");
    // Every embedded launch interface parses back (the IR's -inf constants live in the body, which is left out).
    for k in &report.kernels {
        let json = std::fs::read_to_string(&k.ir).unwrap();
        let back: k3k_ir::Kernel = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(back.name, k.name);
        assert!(back.body.is_empty() && !back.tensors.is_empty());
    }
    let run = fn_params(&file, "router_qb", "Plan", "run");
    assert_eq!(run, ["self", "stream: &(impl rt::AsStream + ?Sized)", "inputs: &Inputs<_>", "outputs: &mut Outputs"]);
}

#[test]
fn kda_plan_embeds_shape_only_tables() {
    let out = tempfile::tempdir().unwrap();
    let (_, src) = plan_of(
        out.path(),
        "kda",
        "kda_prefill",
        &[("B", 1), ("T", 70), ("H", 2), ("K", 64), ("V", 64), ("safe", 1), ("h0", 1)],
    );
    assert!(src.contains(r#"name: "ctab", role: rt::BufRole::Const"#), "{src}");
    assert!(src.contains(r#"name: "q", role: rt::BufRole::Input"#));
    assert!(src.contains(r#"name: "h0", role: rt::BufRole::Input"#));
    assert!(src.contains("pub ht: rt::Tensor<rt::F32>,"));
    assert!(out.path().join("k3k/kda_prefill.nvidia-h200.ctab.bin").is_file());
}

#[test]
fn usage_errors_say_what_to_change() {
    let out = tempfile::tempdir().unwrap();
    let err = |b: Builder| b.out_dir(out.path()).cargo_output(false).build().unwrap_err().to_string();
    let e = err(Builder::new().op("no_such_op").dims(&[("M", 1)]));
    assert!(e.contains("unknown operator `no_such_op`") && e.contains("latent_moe_gemm"), "{e}");
    let e = err(Builder::new().op("latent_moe_gemm").preset("nope"));
    assert!(e.contains("no preset `nope`") && e.contains("G28 mean256 K3584 N6144"), "{e}");
    let e = err(Builder::new().dims(&[("M", 1)]).op("latent_moe_gemm"));
    assert!(e.contains("`dims` was called before any"), "{e}");
    let e = err(gemm(Builder::new()).gpu("NVIDIA H200"));
    assert!(e.contains("use `nvidia-h200`"), "{e}");
    let e =
        err(Builder::new().op("latent_moe_gemm").dims(&[("G", 2), ("mean", 8), ("K", 64), ("N", 63), ("epilogue", 1)]));
    assert!(e.contains("even N"), "{e}");
    assert!(matches!(
        gemm(Builder::new()).knobs("BM").out_dir(out.path()).cargo_output(false).build(),
        Err(BuildError::Usage(_))
    ));
}

#[test]
fn two_gpus_share_launchers_and_kernels() {
    let out = tempfile::tempdir().unwrap();
    let report = gemm(Builder::new())
        .gpu("nvidia-h200")
        .gpu("nvidia-h100-80gb-hbm3")
        .results_dir(out.path().join("none"))
        .out_dir(out.path())
        .emit_cubin(false)
        .cargo_output(false)
        .build()
        .unwrap();
    // Same default knobs on both: one kernel, serving both GPUs; two images in the launcher.
    assert_eq!(report.kernels.len(), 1);
    assert_eq!(report.kernels[0].gpus, ["nvidia-h200", "nvidia-h100-80gb-hbm3"]);
    assert!(report.kernels[0].cubin.is_none());
    let src = std::fs::read_to_string(&report.rust_file).unwrap();
    assert!(src.contains("pub static GEMM_GROUPED_SITU_GLU_IN8_OUT8_IMAGES: [rt::KernelImage; 2]"), "{src}");
    parse(&report.rust_file);
}

#[test]
fn raw_ir_kernels_get_launchers() {
    use k3k_build::ops::latent_moe_gemm::{Epilogue, GemmSpec, build_kernel, default_knobs};
    let out = tempfile::tempdir().unwrap();
    let k = build_kernel(&GemmSpec::for_shape(false, Epilogue::None, true, 64, 32), &default_knobs()).unwrap();
    let report = Builder::new()
        .kernels("custom", vec![k.clone(), k.clone()])
        .roles(&["Scaled"])
        .pin("K", 64)
        .out_dir(out.path())
        .cargo_output(false)
        .build()
        .unwrap();
    assert_eq!(report.kernels.len(), 1, "duplicates are built once");
    assert!(report.requests.is_empty(), "no operator, no knob lookup");
    let file = parse(&report.rust_file);
    let params = fn_params(&file, "custom", "Scaled", "launch");
    assert_eq!(
        params[2..],
        [
            "x: &dyn rt::In<rt::Bf16>",
            "w: &dyn rt::In<rt::Bf16>",
            "p: &dyn rt::In<rt::F32>",
            "y: &mut dyn rt::Out<rt::Bf16>"
        ]
    );
    let src = std::fs::read_to_string(&report.rust_file).unwrap();
    assert!(src.contains(r#"PINS: &'static [(&'static str, i64)] = &[("K", 64)];"#), "{src}");
}

/// The MXFP4 decode with MXFP8 activations records two launches (the activation dequant into the `xd` scratch,
/// then the gemv kernel), though the operator lists its main kernel first.
#[test]
fn mxfp8_decode_plan_launches_the_activation_dequant_first() {
    let out = tempfile::tempdir().unwrap();
    let (report, src) = plan_of(
        out.path(),
        "mxfp4_matmul",
        "expert_up",
        &[("G", 3), ("per", 4), ("K", 256), ("N", 64), ("packed", 1), ("act", 1)],
    );
    assert!(src.contains(r#"name: "xq", role: rt::BufRole::Input"#), "{src}");
    assert!(src.contains(r#"name: "xd", role: rt::BufRole::Scratch"#), "{src}");
    let names: Vec<&str> = report.kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    // The recorded launches in order, by kernel name: the dequant, then the gemv kernel.
    let launched: Vec<&str> = src
        .split("rt::StepSpec { kernel: ")
        .skip(1)
        .map(|rest| names[rest[..rest.find(',').unwrap()].parse::<usize>().unwrap()])
        .collect();
    assert_eq!(launched.len(), 2, "{src}");
    assert!(launched[0].contains("dequant") && launched[1].contains("pathgemv"), "{launched:?}");
}
