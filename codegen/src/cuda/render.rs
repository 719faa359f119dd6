//! IR -> self-contained CUDA C. Every statement maps onto one generic primitive of the device prelude
//! (`prelude/*.cuh`); no per-operator CUDA exists anywhere.
//!
//! This module renders the kernel signature, declarations, control flow and the block-level tile statements;
//! `expr` renders expressions and `threads` the statements of threads regions (plain per-thread C).

mod expr;
mod threads;
mod wgmma;
mod wgmma_fp8;

use k3k_ir::*;
use std::fmt::Write;

/// Version of the renderer + prelude; part of every cache and tuning key. Bump on any change of output.
pub const CODEGEN_VERSION: u32 = 9;

/// Kernels with at least this many threads keep the 64-bit `cvta.to.shared` form of shared addresses (prelude
/// `smem_u32`): with folded addresses a 384-thread gated-MLA prefill kernel spilled 72 bytes under its 168-register
/// cap (ptxas 13.0, sm_90a); every smaller kernel of the ops assembles without spills either way.
pub const SMEM_ASM_CVTA_THREADS: u32 = 384;

/// Whether a kernel keeps the asm `cvta.to.shared` form of shared addresses (`K3K_SMEM_ASM_CVTA` in the prelude)
/// instead of the folded 32-bit form: kernels of [`SMEM_ASM_CVTA_THREADS`] threads or more (spills), and wgmma
/// kernels, where folding bought nothing and cost the gated-MLA prefill 1.8% (H200, 2026-12-02, same run:
/// causal T8192 H96 4.2284 -> 4.3058 ms; latent GEMM and the MXFP4 M4096 dq_gemm within 0.5%). Elsewhere folding
/// won: kda B1 T65536 H32 4.935 -> 4.664 ms (with the state pass's carried chunk length), gated_mla.decode H96
/// 0.579 -> 0.537.
pub fn smem_asm_cvta(k: &Kernel) -> bool {
    k.threads >= SMEM_ASM_CVTA_THREADS || !wgmma::shapes(k).is_empty()
}

/// The device prelude, concatenated.
pub const PRELUDE: &str = concat!(
    include_str!("../../prelude/core.cuh"),
    "\n",
    include_str!("../../prelude/tiles.cuh"),
    "\n",
    include_str!("../../prelude/simt.cuh")
);

/// The barrier and bulk-tensor-copy primitives, appended to the prelude only for kernels that use them (so
/// every other kernel's source, and its cache key, is unchanged).
pub const PRELUDE_TMA: &str = include_str!("../../prelude/tma.cuh");

/// The cluster primitives (cluster barrier, remote arrivals, multicast copies), appended after
/// [`PRELUDE_TMA`] only for kernels that use them.
pub const PRELUDE_CLUSTER: &str = include_str!("../../prelude/cluster.cuh");

/// True when a kernel declares barriers or tensor maps (or uses the cluster primitives, which build on them).
pub fn uses_tma(k: &Kernel) -> bool {
    !k.mbarriers.is_empty() || !k.tensor_maps.is_empty() || uses_cluster(k)
}

/// True when a kernel has a cluster shape or a cluster barrier. (Without a cluster, a per-warp arrival on CTA 0
/// is an arrival on the block's own barrier, rendered from [`PRELUDE_TMA`].)
pub fn uses_cluster(k: &Kernel) -> bool {
    k.cluster_size() > 1 || k.any_stmt(|s| matches!(s, Stmt::ClusterSync))
}

/// The C type of a dtype in generated code.
pub fn c_type(d: DType) -> &'static str {
    match d {
        DType::Bf16 => "k3k::bf16",
        DType::F16 => "k3k::f16",
        DType::F32 => "float",
        DType::E4m3 => "k3k::e4m3",
        DType::E8m0 => "k3k::e8m0",
        DType::E2m1 | DType::U8 => "unsigned char",
        DType::I32 => "int",
        DType::U32 => "unsigned",
        DType::I64 => "long long",
        DType::U64 => "unsigned long long",
    }
}

/// The C type of an expression type in generated code.
fn scalar_c_type(t: ScalarTy) -> &'static str {
    match t {
        ScalarTy::Int => "long long",
        ScalarTy::Float => "float",
        ScalarTy::Bool => "bool",
    }
}

/// Name of the kernel argument that carries a symbol.
pub fn sym_arg(k: &Kernel, s: SymId) -> String {
    format!("a_{}", k.syms[s.0 as usize].name)
}

fn tensor_arg(k: &Kernel, t: TensorId) -> String {
    format!("p_{}", k.tensors[t.0 as usize].name)
}

/// Which element-loop context an expression is rendered in.
#[derive(Clone, Copy)]
enum Ctx {
    Scalar,
    Row,
    Elem,
}

struct Renderer<'a> {
    k: &'a Kernel,
    var_types: Vec<Option<ScalarTy>>,
    out: String,
    depth: usize,
    /// For the `MmaWait` being rendered: the register tiles of the products it leaves in flight, when known.
    wait_pending: Option<std::collections::BTreeSet<u32>>,
    /// Loops and conditionals around the statement being rendered (a producer-warp kernel's barriers inside
    /// them synchronize the consumer threads only).
    nest: usize,
    /// A producer-warp kernel's body is rendered twice, once per role (see [`Stmt::Producer`]).
    view: View,
}

/// Which statements of the body are rendered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    /// All (kernels without a producer warp).
    All,
    /// The producer warpgroup's: the skeleton and the producer bodies.
    Producer,
    /// The consumers': the skeleton and everything but the producer bodies.
    Consumer,
}

/// Registers per thread of a producer-warp kernel after `setmaxnreg`: the producer warpgroup's (40, as CUTLASS's
/// warp-specialized kernels) and the consumers' (a multiple of 8, at most 256). `setmaxnreg.inc` takes registers
/// from the CTA's own pool and blocks until they are there, so the consumers ask for no more than the producer
/// gives back from the launch allocation: ptxas allocates a kernel that uses `setmaxnreg` the launch bounds'
/// whole per-thread budget (`R`, 168 at 384 threads; the compile tests check it), and the consumers get
/// `R + (R - 40) x 128 / threads` (232 for two consumer warpgroups).
pub fn producer_registers(k: &Kernel) -> (u32, u32) {
    const PRODUCER: u32 = 40;
    let per_block = 65536 / k.min_blocks_per_sm.max(1);
    let launch = (per_block / k.launch_threads() / 8 * 8).min(248);
    let consumer = ((launch + (launch - PRODUCER) * PRODUCER_THREADS / k.threads.max(1)) / 8 * 8).min(256);
    (PRODUCER, consumer)
}

/// In a producer-warp kernel (see [`Stmt::Producer`]): whether only the consumer threads run `s`, which is
/// `nest` loops or conditionals deep. Both role slices hold the scalar control and the top-level barriers,
/// barrier initializations and cluster barriers; the producer bodies are the producer slice's only.
fn consumer_only(s: &Stmt, nest: usize) -> bool {
    match s {
        Stmt::Let { .. }
        | Stmt::Assign { .. }
        | Stmt::For { .. }
        | Stmt::If { .. }
        | Stmt::Producer { .. }
        | Stmt::MbarInit { .. }
        | Stmt::ClusterSync => false,
        Stmt::Barrier => nest > 0,
        _ => true,
    }
}

/// The register tiles an `MmaAsync` writes (its accumulator) or reads (a register A operand).
fn mma_async_regs(s: &Stmt) -> Vec<u32> {
    match s {
        Stmt::MmaAsync { acc, a: Operand::Reg(t), .. } => vec![acc.0, t.0],
        Stmt::MmaAsync { acc, .. } => vec![acc.0],
        _ => vec![],
    }
}

/// Visit statements and their nested bodies, parents first.
fn visit(body: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    body.iter().for_each(|s| s.visit(f));
}

/// Render a validated kernel to CUDA C (prelude included).
pub fn render(k: &Kernel) -> Result<String, IrError> {
    let var_types = var_types(k)?;
    let mut r = Renderer { k, var_types, out: String::new(), depth: 1, wait_pending: None, nest: 0, view: View::All };
    r.kernel();
    let wrappers: String = wgmma::shapes(k).iter().map(|s| wgmma::wrapper(*s)).collect();
    let mut tma = if uses_tma(k) { format!("\n{PRELUDE_TMA}") } else { String::new() };
    if uses_cluster(k) {
        tma.push_str(&format!("\n{PRELUDE_CLUSTER}"));
    }
    let mut smem = if smem_asm_cvta(k) { "#define K3K_SMEM_ASM_CVTA\n".to_string() } else { String::new() };
    if k.producer_warp {
        // The producer warp follows the consumer threads: its lane 0 issues the single-thread operations, and
        // the block barriers of the consumers' code count the consumer threads only (see `Stmt::Producer`).
        smem.push_str(&format!("#define K3K_ELECTED_TID {t}\n#define K3K_CONSUMER_THREADS {t}\n", t = k.threads));
    } else if k.elected_warpgroup > 0 {
        // The first thread of another warpgroup issues the single-thread operations (`Kernel::elected_warpgroup`).
        smem.push_str(&format!("#define K3K_ELECTED_TID {}\n", 128 * k.elected_warpgroup));
    }
    Ok(format!(
        "// Generated by k3k-codegen v{CODEGEN_VERSION} from kernel `{}` (ir {}). Do not edit.\n{smem}{PRELUDE}{tma}\n{wrappers}{}",
        k.name,
        stable_hash(k),
        r.out
    ))
}

fn float_lit(v: f64) -> String {
    let f = v as f32;
    if f.is_nan() {
        return "k3k::nan_f32()".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "k3k::inf_f32()".into() } else { "(-k3k::inf_f32())".into() };
    }
    let s = format!("{f:?}");
    let s = if s.contains('.') || s.contains('e') { s } else { format!("{s}.0") };
    format!("{s}f")
}

impl<'a> Renderer<'a> {
    /// `header`, then `body` one level deeper, then the closing brace (a loop's or a guard's block).
    fn nested(&mut self, header: &str, body: &[Stmt]) {
        self.line(header);
        self.depth += 1;
        self.nest += 1;
        self.body(body);
        self.nest -= 1;
        self.depth -= 1;
        self.line("}");
    }

    fn line(&mut self, s: &str) {
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn tile_ty(&self, t: TileId) -> String {
        format!("T{}_t", t.0)
    }
    fn shared_layout(&self, s: SharedId) -> String {
        format!("SL{}", s.0)
    }

    fn kernel(&mut self) {
        let k = self.k;
        let mut params: Vec<String> = k
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let c = if t.access == Access::Read { "const " } else { "" };
                format!("{c}{}* __restrict__ {}", c_type(t.dtype), tensor_arg(k, TensorId(i as u32)))
            })
            .collect();
        for (i, s) in k.syms.iter().enumerate() {
            let ty = if s.kind == SymKind::Float { "float" } else { "long long" };
            params.push(format!("{ty} {}", sym_arg(k, SymId(i as u32))));
        }
        for i in 0..k.tensor_maps.len() {
            params.push(format!("const __grid_constant__ k3k::TensorMap tm{i}"));
        }
        let bounds = if k.min_blocks_per_sm > 0 {
            format!("{}, {}", k.launch_threads(), k.min_blocks_per_sm)
        } else {
            k.launch_threads().to_string()
        };
        let cluster = if k.cluster_size() > 1 {
            format!("__cluster_dims__({}, {}, {}) ", k.cluster[0], k.cluster[1], k.cluster[2])
        } else {
            String::new()
        };
        let _ = writeln!(
            self.out,
            "extern \"C\" __global__ void {cluster}__launch_bounds__({bounds}) {}({}) {{",
            k.name,
            params.join(", ")
        );
        self.line("extern __shared__ __align__(128) unsigned char k3k_smem[];");
        let (offsets, _) = k.shared_layout();
        for (i, s) in k.shared.iter().enumerate() {
            let swz = match s.swizzle {
                Swizzle::None => 0u8,
                Swizzle::Xor16B => 1,
                Swizzle::Xor16BPairs => 2,
            };
            self.line(&format!(
                "typedef k3k::SL<{}, {}, {}, {swz}> SL{i};  // {}",
                c_type(s.dtype),
                s.rows,
                s.cols,
                s.name
            ));
            self.line(&format!("unsigned char* const s{i} = k3k_smem + {};", offsets[i]));
        }
        for (i, (m, off)) in k.mbarriers.iter().zip(k.mbar_layout()).enumerate() {
            self.line(&format!("unsigned char* const mb{i} = k3k_smem + {off};  // {}[{}]", m.name, m.count));
        }
        for (i, t) in k.tiles.iter().enumerate() {
            let elem = match t.dtype {
                DType::I32 => "int",
                other => c_type(other),
            };
            self.line(&format!(
                "typedef k3k::RT<{elem}, {}, {}, {}, {}> T{i}_t;  // {}",
                t.rows, t.cols, t.warps[0], t.warps[1], t.name
            ));
            self.line(&format!("T{i}_t t{i};"));
        }
        for (i, v) in k.vecs.iter().enumerate() {
            self.line(&format!("k3k::RV<{}, {}, {}> v{i};  // {}", v.rows, v.warps[0], v.warps[1], v.name));
        }
        // The raw-word registers of prefetching stream decodes: one per (tile, layout), alive across loops.
        let mut bufs = std::collections::BTreeSet::new();
        k.visit_stmts(&mut |s| {
            if let Stmt::DequantFp4Stream { tile, packed, prefetch: Some(_), .. } = s {
                bufs.insert((tile.0, *packed));
            }
        });
        for (t, packed) in bufs {
            self.line(&format!("k3k::Fp4StreamRaw<T{t}_t> {};", prefetch_buf(TileId(t), packed)));
        }
        let body = k.body.clone();
        if k.producer_warp {
            // Warp specialization: the body once per role, each slice the skeleton plus its role's statements
            // (their top-level barriers meet). The producer warpgroup first gives registers back to the consumer
            // warpgroups (`setmaxnreg`, per warpgroup; ptxas allocates a wgmma kernel's registers for whole
            // warpgroups, and each slice is compiled to the budget its `setmaxnreg` sets).
            let (p, c) = producer_registers(k);
            self.line(&format!("if (threadIdx.x >= {}) {{  // the producer warpgroup", k.threads));
            self.depth += 1;
            self.line(&format!("asm volatile(\"setmaxnreg.dec.sync.aligned.u32 {p};\\n\");"));
            self.view = View::Producer;
            self.body(&body);
            self.depth -= 1;
            self.line("} else {  // the consumer warpgroups");
            self.depth += 1;
            self.line(&format!("asm volatile(\"setmaxnreg.inc.sync.aligned.u32 {c};\\n\");"));
            self.turn_start();
            self.view = View::Consumer;
            self.body(&body);
            self.store_drain();
            self.depth -= 1;
            self.line("}");
            self.view = View::All;
        } else {
            self.turn_start();
            self.body(&body);
            self.store_drain();
        }
        self.out.push_str("}\n");
    }

    /// Kernels with [`Stmt::TmaStore`]: thread 0 waits for every bulk store to complete before the block exits.
    fn store_drain(&mut self) {
        if self.k.any_stmt(|s| matches!(s, Stmt::TmaStore(_))) {
            self.line("k3k::tma_store_drain();");
        }
    }

    /// Kernels with [`Stmt::InTurn`]: consumer warpgroup 0 takes the first turn.
    fn turn_start(&mut self) {
        if self.k.any_stmt(|s| matches!(s, Stmt::InTurn { .. })) {
            self.line("k3k::turn_start();");
        }
    }

    fn body(&mut self, b: &[Stmt]) {
        // The asynchronous products started earlier in this statement list, in order (None once a nested
        // statement may have started one: then which ones a wait leaves pending is not known here).
        let mut started: Option<Vec<&Stmt>> = Some(vec![]);
        for s in b {
            // Producer-warp kernels: each role's slice.
            let skip = match self.view {
                View::All => false,
                View::Producer => consumer_only(s, self.nest),
                View::Consumer => matches!(s, Stmt::Producer { .. }),
            };
            if skip {
                continue;
            }
            match s {
                Stmt::MmaWait { pending } => {
                    self.wait_pending = started.as_ref().and_then(|v| {
                        let n = *pending as usize;
                        (v.len() >= n).then(|| v[v.len() - n..].iter().flat_map(|s| mma_async_regs(s)).collect())
                    });
                    self.stmt(s);
                    self.wait_pending = None;
                    // Whatever was pending may still be; what completed no longer matters.
                    if let Some(v) = started.as_mut() {
                        let keep = (*pending as usize).min(v.len());
                        v.drain(..v.len() - keep);
                    }
                }
                Stmt::MmaAsync { .. } => {
                    if let Some(v) = started.as_mut() {
                        v.push(s);
                    }
                    self.stmt(s);
                }
                // A turn body is straight-line code of this list: its products count as started here when none
                // of them is nested deeper.
                Stmt::InTurn { body } => {
                    let mut nested = false;
                    for t in body.iter().filter(|t| !matches!(t, Stmt::MmaAsync { .. })) {
                        visit(std::slice::from_ref(t), &mut |u| nested |= matches!(u, Stmt::MmaAsync { .. }));
                    }
                    match started.as_mut() {
                        Some(v) if !nested => v.extend(body.iter().filter(|t| matches!(t, Stmt::MmaAsync { .. }))),
                        _ => started = None,
                    }
                    self.stmt(s);
                }
                _ => {
                    let mut nested = false;
                    if matches!(s, Stmt::For { .. } | Stmt::If { .. } | Stmt::FirstWarpgroups { .. }) {
                        let one = std::slice::from_ref(s);
                        visit(one, &mut |t| nested |= matches!(t, Stmt::MmaAsync { .. }));
                    }
                    if nested {
                        started = None;
                    }
                    self.stmt(s);
                }
            }
        }
    }

    fn shared_ptr(&self, r: &SharedRef) -> String {
        format!("(s{} + (int)({}) * {}::TILE_BYTES)", r.buf.0, self.e(&r.index, Ctx::Scalar), self.shared_layout(r.buf))
    }

    fn mbar_ptr(&self, r: &MbarRef) -> String {
        format!("(mb{} + 8 * (int)({}))", r.bar.0, self.e(&r.index, Ctx::Scalar))
    }

    fn view_args(&self, v: &GlobalView) -> String {
        format!(
            "{}, {}, {}, {}, {}",
            tensor_arg(self.k, v.tensor),
            self.e(&v.offset, Ctx::Scalar),
            self.e(&v.row_stride, Ctx::Scalar),
            self.e(&v.rows, Ctx::Scalar),
            self.e(&v.cols, Ctx::Scalar)
        )
    }

    fn stmt(&mut self, s: &Stmt) {
        let k = self.k;
        match s {
            Stmt::Let { var, value } => {
                let ty = self.var_types[var.0 as usize].expect("validated");
                let line = format!(
                    "{} x{} = {};  // {}",
                    scalar_c_type(ty),
                    var.0,
                    self.e(value, Ctx::Scalar),
                    k.vars[var.0 as usize].name
                );
                self.line(&line);
            }
            Stmt::Assign { var, value } => {
                let line = format!("x{} = {};", var.0, self.e(value, Ctx::Scalar));
                self.line(&line);
            }
            Stmt::For { var, start, end, step, body, unroll } => {
                if *unroll {
                    self.line("#pragma unroll");
                } else {
                    self.line("#pragma unroll 1");
                }
                let line = format!(
                    "for (long long x{v} = {}; x{v} < {}; x{v} += {}) {{  // {}",
                    self.e(start, Ctx::Scalar),
                    self.e(end, Ctx::Scalar),
                    self.e(step, Ctx::Scalar),
                    k.vars[var.0 as usize].name,
                    v = var.0
                );
                self.nested(&line, body);
            }
            Stmt::If { cond, then_body, else_body } => {
                let line = format!("if ({}) {{", self.e(cond, Ctx::Scalar));
                self.line(&line);
                self.depth += 1;
                self.nest += 1;
                self.body(then_body);
                if !else_body.is_empty() {
                    self.depth -= 1;
                    self.line("} else {");
                    self.depth += 1;
                    self.body(else_body);
                }
                self.nest -= 1;
                self.depth -= 1;
                self.line("}");
            }
            // The consumer warpgroups take turns (named barriers, see `Stmt::InTurn` and the prelude's
            // `turn_take`); the producer warpgroup runs the body's skeleton without them.
            Stmt::InTurn { body } => {
                let wgs = k.threads / 128;
                self.line("{  // in turn");
                self.depth += 1;
                self.nest += 1;
                if self.view != View::Producer {
                    self.line(&format!("k3k::turn_take<{wgs}>();"));
                }
                self.body(body);
                if self.view != View::Producer {
                    self.line(&format!("k3k::turn_pass<{wgs}>();"));
                }
                self.nest -= 1;
                self.depth -= 1;
                self.line("}");
            }
            Stmt::FirstWarpgroups { count, body } => {
                self.nested(&format!("if (threadIdx.x < {}) {{  // first {count} warpgroups", 128 * count), body);
            }
            // (Rendered in the producer's slice only, every statement of it.)
            Stmt::Producer { body } => {
                let view = std::mem::replace(&mut self.view, View::All);
                self.body(body);
                self.view = view;
            }
            // With a producer warp, a barrier inside loops or conditionals is the consumers' (named barrier 1);
            // at the top level every thread meets (see `Stmt::Producer`).
            Stmt::Barrier if k.producer_warp && self.nest > 0 => self.line("k3k::barrier();"),
            Stmt::Barrier => self.line("__syncthreads();"),
            Stmt::AsyncCommit => self.line("k3k::async_commit();"),
            Stmt::MbarInit { bar, count } => {
                let n = k.mbarriers[bar.0 as usize].count;
                self.line(&format!("k3k::mbar_init(mb{}, {n}, {count}u);", bar.0));
            }
            Stmt::MbarArriveExpectTx { bar, bytes } => {
                let line = format!("k3k::mbar_arrive_expect_tx({}, {bytes}u);", self.mbar_ptr(bar));
                self.line(&line);
            }
            Stmt::MbarArrive { bar } => {
                let line = format!("k3k::mbar_arrive({});", self.mbar_ptr(bar));
                self.line(&line);
            }
            Stmt::MbarWait { bar, parity, elected } => {
                // CTA scope in a cluster too, as CUTLASS's pipelines: a phase completes by copy transactions (a
                // peer's multicast bytes included, visible to the waiters) or by arrivals that only say a slot's
                // reads are done (see `mbar_arrive_cluster`).
                let f = if *elected { "mbar_wait_elected" } else { "mbar_wait" };
                let line = format!("k3k::{f}({}, (int)({}));", self.mbar_ptr(bar), self.e(parity, Ctx::Scalar));
                self.line(&line);
            }
            Stmt::TmaLoad(t) => {
                let coords: Vec<String> =
                    t.coords.iter().map(|c| format!("(int)({})", self.e(c, Ctx::Scalar))).collect();
                let (f, mask) = match &t.multicast {
                    Some(m) => ("tma_load_mc", format!(", (unsigned short)({})", self.e(m, Ctx::Scalar))),
                    None => ("tma_load", String::new()),
                };
                let line = format!(
                    "k3k::{f}({} + {} * {}::ROW_BYTES, &tm{}, {}{mask}, {});",
                    self.shared_ptr(&t.dst),
                    t.dst.row0,
                    self.shared_layout(t.dst.buf),
                    t.map.0,
                    self.mbar_ptr(&t.bar),
                    coords.join(", ")
                );
                self.line(&line);
            }
            Stmt::TmaStore(t) => {
                let coords: Vec<String> =
                    t.coords.iter().map(|c| format!("(int)({})", self.e(c, Ctx::Scalar))).collect();
                self.line("k3k::tma_store_fence();");
                let line = format!(
                    "k3k::tma_store({} + {} * {}::ROW_BYTES, &tm{}, {});",
                    self.shared_ptr(&t.src),
                    t.src.row0,
                    self.shared_layout(t.src.buf),
                    t.map.0,
                    coords.join(", ")
                );
                self.line(&line);
            }
            Stmt::TmaStoreWait { pending } => self.line(&format!("k3k::tma_store_wait<{pending}>();")),
            Stmt::StoreCols { tile, col0, dst } => {
                let line = format!(
                    "k3k::store_shared_cols<{}, {}, {}, {col0}, {}>(t{}, {}, {}, {});",
                    self.tile_ty(*tile),
                    c_type(k.shared[dst.buf.0 as usize].dtype),
                    self.shared_layout(dst.buf),
                    dst.cols,
                    tile.0,
                    self.shared_ptr(dst),
                    dst.row0,
                    dst.col0
                );
                self.line(&line);
            }
            // Without a cluster the block is rank 0 of a one-CTA cluster (the only rank the validator and the
            // CPU backends accept): a plain arrival on its own barrier, one per warp.
            Stmt::MbarArriveCluster { bar, .. } if k.cluster_size() == 1 => {
                let line = format!("k3k::mbar_arrive_warp({});", self.mbar_ptr(bar));
                self.line(&line);
            }
            Stmt::MbarArriveCluster { bar, cta } => {
                let line = format!(
                    "k3k::mbar_arrive_cluster({}, (unsigned)({}));",
                    self.mbar_ptr(bar),
                    self.e(cta, Ctx::Scalar)
                );
                self.line(&line);
            }
            Stmt::ClusterSync => self.line("k3k::cluster_sync();"),
            Stmt::AsyncWait { pending } => self.line(&format!("k3k::async_wait<{pending}>();")),
            Stmt::Map { tile, value } => {
                let tt = self.tile_ty(*tile);
                let val = self.e(value, Ctx::Elem);
                self.line("#pragma unroll");
                self.line(&format!("for (int b_ = 0; b_ < {tt}::L::NB; ++b_)"));
                self.line("#pragma unroll");
                self.line(&format!("for (int f_ = 0; f_ < {tt}::L::NF; ++f_)"));
                self.line("#pragma unroll");
                self.line("for (int jp_ = 0; jp_ < 2; ++jp_) {");
                self.depth += 1;
                self.line(&format!("{tt}::elem_t e_[2];"));
                self.line("#pragma unroll");
                self.line("for (int h_ = 0; h_ < 2; ++h_) {");
                self.depth += 1;
                self.line("const int j_ = 2 * jp_ + h_;");
                self.line(&format!("const int r_ = {tt}::L::row(b_, j_), c_ = {tt}::L::col(f_, j_);"));
                self.line("(void)r_; (void)c_;");
                self.line(&format!("e_[h_] = {val};"));
                self.depth -= 1;
                self.line("}");
                self.line(&format!("t{}.set2(b_, f_, jp_, e_[0], e_[1]);", tile.0));
                self.depth -= 1;
                self.line("}");
            }
            Stmt::VecMap { vec, value } => {
                let val = self.e(value, Ctx::Row);
                let v = vec.0;
                self.line("#pragma unroll");
                self.line(&format!("for (int b_ = 0; b_ < decltype(v{v})::NB; ++b_)"));
                self.line("#pragma unroll");
                self.line("for (int h_ = 0; h_ < 2; ++h_) {");
                self.depth += 1;
                self.line(&format!("const int r_ = decltype(v{v})::row(b_, h_); (void)r_;"));
                self.line(&format!("v{v}.v[b_][h_] = {val};"));
                self.depth -= 1;
                self.line("}");
            }
            Stmt::Reduce { vec, tile, op, accumulate } => {
                let op = match op {
                    ReduceOp::Sum => "OpSum",
                    ReduceOp::Max => "OpMax",
                    ReduceOp::Min => "OpMin",
                };
                self.line(&format!("k3k::reduce_rows<k3k::{op}>(v{}, t{}, {accumulate});", vec.0, tile.0));
            }
            Stmt::Mma { acc, a, b } => {
                // A banded B operand moves down by its own height for each accumulator row band.
                let (bsrc, tb, bshift) = match b {
                    Operand::Shared { src, transpose } => (src, *transpose, 0),
                    Operand::Banded { src, transpose } => (src, *transpose, src.rows),
                    Operand::Reg(_) => unreachable!("validated: B comes from shared memory"),
                };
                let h = c_type(k.shared[bsrc.buf.0 as usize].dtype);
                let kdim = if tb { bsrc.cols } else { bsrc.rows };
                let bl = self.shared_layout(bsrc.buf);
                let bptr = self.shared_ptr(bsrc);
                let line = match a {
                    Operand::Shared { src, transpose } => format!(
                        "k3k::mma_ss<{h}, {kdim}, {}, {}, {tb}, {bl}>(t{}, {}, {}, {}, {bptr}, {}, {}{});",
                        transpose,
                        self.shared_layout(src.buf),
                        acc.0,
                        self.shared_ptr(src),
                        src.row0,
                        src.col0,
                        bsrc.row0,
                        bsrc.col0,
                        if bshift > 0 { format!(", {bshift}") } else { String::new() }
                    ),
                    Operand::Reg(t) => format!(
                        "k3k::mma_rs<{h}, {kdim}, {tb}, {bl}>(t{}, t{}, {bptr}, {}, {}{});",
                        acc.0,
                        t.0,
                        bsrc.row0,
                        bsrc.col0,
                        if bshift > 0 { format!(", {bshift}") } else { String::new() }
                    ),
                    Operand::Banded { .. } => unreachable!("validated: banded operands are B operands"),
                };
                self.line(&line);
            }
            Stmt::MmaAsync { acc, a, b, accumulate } => {
                let Operand::Shared { src: bsrc, .. } = b else {
                    unreachable!("validated: the mma_async B operand comes from shared memory")
                };
                let shape = wgmma::Shape::of(k, *acc, a, b);
                let bptr = self.shared_ptr(bsrc);
                self.line("{");
                self.depth += 1;
                self.line(&format!("k3k::fence_operand(t{});", acc.0));
                if let Operand::Reg(t) = a {
                    self.line(&format!("k3k::fence_operand(t{});", t.0));
                }
                self.line("k3k::wgmma_fence();");
                // Warpgroup w computes row band w % g (g = the accumulator's warpgroup rows; warpgroups past
                // them are replicas, or on [4g, 2] warps the second column band, w / g).
                let ad = &k.tiles[acc.0 as usize];
                let (g, bands) = (ad.warps[0] / 4, ad.warps[1]);
                let band = if 4 * g == k.warps() {
                    "(k3k::warp_id() / 4)".to_string()
                } else {
                    format!("(k3k::warp_id() / 4 % {g})")
                };
                let kdim = match a {
                    Operand::Shared { src: asrc, .. } => {
                        // Each warpgroup reads its 64 rows of A; rows are 128 bytes.
                        let aptr = self.shared_ptr(asrc);
                        self.line(&format!(
                            "const unsigned a_ = k3k::smem_u32({aptr}) + ({} + 64 * {band}) * 128{};",
                            asrc.row0,
                            wgmma_fp8::col_bytes(shape, asrc.col0)
                        ));
                        // E4M3 words hold four codes each.
                        asrc.cols * if shape.ty == "e4m3" { 4 } else { 1 }
                    }
                    Operand::Reg(t) => k.tiles[t.0 as usize].cols,
                    Operand::Banded { .. } => unreachable!("validated: no banded mma_async operands"),
                };
                // Column bands (B stored [K, N]): warpgroup w reads columns (w / g) * N of each 128-byte row.
                let col_bytes = if bands > 1 {
                    format!(" + (k3k::warp_id() / {}) * {}", 4 * g, 2 * shape.n)
                } else {
                    String::new()
                };
                let col_bytes = col_bytes + &wgmma_fp8::col_bytes(shape, bsrc.col0);
                self.line(&format!("const unsigned b_ = k3k::smem_u32({bptr}) + {} * 128{col_bytes};", bsrc.row0));
                let acc_flag = self.e(accumulate, Ctx::Scalar);
                self.line(&format!("const int scale_d_ = ({acc_flag}) ? 1 : 0;"));
                // One k16 step is 32 bytes along a K-contiguous row, or 16 rows of 128 bytes of an N-contiguous B.
                let bstep = if shape.b_mn { 2048 } else { 32 };
                let name = wgmma::wrapper_name(shape);
                // The descriptors of the k16 steps differ only in the start-address field (bits 0-13, the
                // shared address in 16-byte units): the step's offset is added to the first step's descriptor
                // (exact: tiles start 16-byte aligned and end below the 256 KiB the 18-bit address spans, so the
                // field never carries), instead of rebuilding both descriptors per step.
                if matches!(a, Operand::Shared { .. }) {
                    self.line("const unsigned long long ad_ = k3k::wgmma_desc_sw128(a_);");
                }
                self.line("const unsigned long long bd_ = k3k::wgmma_desc_sw128(b_);");
                let bstep16 = bstep / 16;
                self.line("#pragma unroll");
                self.line(&format!("for (int kk_ = 0; kk_ < {}; ++kk_) {{", kdim / shape.k_step()));
                match a {
                    Operand::Reg(t) => {
                        // The m16n8 pairs of k16 step kk_: the A fragment of each warp's 16 rows.
                        self.line(&format!(
                            "  const unsigned ar_[4] = {{t{0}.v[0][2 * kk_][0], t{0}.v[0][2 * kk_][1], t{0}.v[0][2 * kk_ + 1][0], t{0}.v[0][2 * kk_ + 1][1]}};",
                            t.0
                        ));
                        self.line(&format!(
                            "  {name}(&t{}.v[0][0][0], ar_, k3k::wgmma_desc_add(bd_, {bstep16} * kk_), kk_ > 0 ? 1 : scale_d_);",
                            acc.0
                        ));
                    }
                    _ => self.line(&format!(
                        "  {name}(&t{}.v[0][0][0], k3k::wgmma_desc_add(ad_, 2 * kk_), k3k::wgmma_desc_add(bd_, {bstep16} * kk_), kk_ > 0 ? 1 : scale_d_);",
                        acc.0
                    )),
                }
                self.line("}");
                // No operand fence here: touching the accumulators before the wait would serialize the pipeline.
                self.line("k3k::wgmma_commit();");
                self.depth -= 1;
                self.line("}");
            }
            Stmt::MmaWait { pending } => {
                self.line(&format!("k3k::wgmma_wait<{pending}>();"));
                // Fence every register an asynchronous product may write (accumulators) or read (register A
                // operands), so that later accesses stay after the wait; except those of the products the wait
                // leaves in flight when this statement list shows which they are (fencing those would make
                // ptxas wait for them here, serializing what the program overlaps).
                let mut regs = std::collections::BTreeSet::new();
                k.visit_stmts(&mut |s| regs.extend(mma_async_regs(s)));
                if let Some(pending) = self.wait_pending.take() {
                    regs.retain(|t| !pending.contains(t));
                }
                for a in regs {
                    self.line(&format!("k3k::fence_operand(t{a});"));
                }
            }
            Stmt::CopyAsync { dst, src } => {
                let t = &k.tensors[src.tensor.0 as usize];
                let line = format!(
                    "k3k::copy_async<{}, {}, {}, {}, {}, {}>({}, {}, {}, {});",
                    c_type(t.dtype),
                    src.vec,
                    k.threads,
                    self.shared_layout(dst.buf),
                    dst.rows,
                    dst.cols,
                    self.shared_ptr(dst),
                    dst.row0,
                    dst.col0,
                    self.view_args(src)
                );
                self.line(&line);
            }
            Stmt::Load { tile, src: place } | Stmt::Store { tile, dst: place } => {
                let verb = if matches!(s, Stmt::Load { .. }) { "load" } else { "store" };
                let line = match place {
                    Place::Global(v) => format!(
                        "k3k::{verb}_global<{}, {}, {}>(t{}, {});",
                        self.tile_ty(*tile),
                        c_type(k.tensors[v.tensor.0 as usize].dtype),
                        v.vec,
                        tile.0,
                        self.view_args(v)
                    ),
                    Place::Shared(r) => format!(
                        "k3k::{verb}_shared<{}, {}, {}>(t{}, {}, {}, {});",
                        self.tile_ty(*tile),
                        c_type(k.shared[r.buf.0 as usize].dtype),
                        self.shared_layout(r.buf),
                        tile.0,
                        self.shared_ptr(r),
                        r.row0,
                        r.col0
                    ),
                };
                self.line(&line);
            }
            Stmt::DequantFp4 { tile, words, scales, packed, fold, finite } => {
                let line = format!(
                    "k3k::dequant_fp4<{packed}, {fold}, {finite}, {}, {}, {}>(t{}, {}, {}, {}, {}, {}, {});",
                    self.tile_ty(*tile),
                    self.shared_layout(words.buf),
                    self.shared_layout(scales.buf),
                    tile.0,
                    self.shared_ptr(words),
                    words.row0,
                    words.col0,
                    self.shared_ptr(scales),
                    scales.row0,
                    scales.col0
                );
                self.line(&line);
            }
            Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch: None } => {
                let line = format!(
                    "k3k::dequant_fp4_stream<{packed}, {fold}, {finite}, {}>(t{}, {}, {});",
                    self.tile_ty(*tile),
                    tile.0,
                    self.view_args(words),
                    self.view_args(scales)
                );
                self.line(&line);
            }
            Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch: Some(p) } => {
                let line = format!(
                    "k3k::dequant_fp4_stream_pf<{packed}, {fold}, {finite}, {}>(t{}, {}, {}, {}, {}, {}, {});",
                    self.tile_ty(*tile),
                    tile.0,
                    prefetch_buf(*tile, *packed),
                    self.e(&p.first, Ctx::Scalar),
                    self.view_args(words),
                    self.view_args(scales),
                    self.view_args(&p.words),
                    self.view_args(&p.scales)
                );
                self.line(&line);
            }
            Stmt::Fp4Gemv {
                out,
                scratch,
                words,
                scales,
                x,
                packed,
                fold,
                finite,
                chunk,
                ring,
                staged,
                l2_prefetch,
                tiled,
                bulk,
                x_two_ahead,
            } => {
                let line = format!(
                    "k3k::fp4_gemv<{packed}, {fold}, {finite}, {}, {}, {}, {chunk}, {ring}, {}, {}{}>({}, {}, {}, s{}, {}, {}, {});",
                    out.rows,
                    out.cols,
                    k.threads / 32,
                    self.shared_layout(out.buf),
                    self.shared_layout(*scratch),
                    match (*staged, *l2_prefetch, *tiled, *bulk, *x_two_ahead) {
                        (false, ..) => String::new(),
                        (true, n, t, b, true) => format!(", true, {n}, {t}, {b}, true"),
                        (true, 0, false, _, false) => ", true".to_string(),
                        (true, n, false, _, false) => format!(", true, {n}"),
                        (true, n, true, false, false) => format!(", true, {n}, true"),
                        (true, n, true, true, false) => format!(", true, {n}, true, true"),
                    },
                    self.shared_ptr(out),
                    out.row0,
                    out.col0,
                    scratch.0,
                    self.view_args(words),
                    self.view_args(scales),
                    self.view_args(x)
                );
                self.line(&line);
            }
            Stmt::Scan { tile, scratch, op } => {
                let d = &k.tiles[tile.0 as usize];
                let op = match op {
                    ScanOp::Sum => "OpSum",
                };
                let line = format!(
                    "k3k::scan_cols<k3k::{op}, {}, {}, {}, {}>(t{}, s{});",
                    self.shared_layout(*scratch),
                    d.rows,
                    d.cols,
                    k.threads,
                    tile.0,
                    scratch.0
                );
                self.line(&line);
            }
            Stmt::Threads { .. }
            | Stmt::StoreScalar { .. }
            | Stmt::SharedStore { .. }
            | Stmt::Atomic { .. }
            | Stmt::LetArray { .. }
            | Stmt::ArraySet { .. }
            | Stmt::LoadWide { .. }
            | Stmt::StoreWide { .. }
            | Stmt::WarpShuffle { .. }
            | Stmt::WarpSync
            | Stmt::Fence => self.thread_stmt(s),
            Stmt::LoadVec { vec, src: v } | Stmt::StoreVec { vec, dst: v } => {
                let f = if matches!(s, Stmt::LoadVec { .. }) { "load_vec" } else { "store_vec" };
                let line = format!(
                    "k3k::{f}(v{}, {}, {}, {}, {});",
                    vec.0,
                    tensor_arg(k, v.tensor),
                    self.e(&v.offset, Ctx::Scalar),
                    self.e(&v.stride, Ctx::Scalar),
                    self.e(&v.rows, Ctx::Scalar)
                );
                self.line(&line);
            }
        }
    }
}

/// The C name of a prefetching stream decode's raw-word registers.
fn prefetch_buf(tile: TileId, packed: bool) -> String {
    format!("pf{}_{}", tile.0, if packed { "p" } else { "n" })
}
