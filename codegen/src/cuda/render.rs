//! IR -> self-contained CUDA C. Every statement maps onto one generic primitive of the device prelude
//! (`prelude/*.cuh`, `prelude/tiles/*.cuh`); no per-operator CUDA exists anywhere.
//!
//! This module renders the kernel signature and declarations and hands each statement to its family, one file
//! each: scalar control and nested bodies (`control`), barriers and copies (`sync`), register tiles and row
//! vectors (`tiles`), tensor-core products (`mma`, with the `wgmma` wrappers in `wgmma`), the MXFP4 statements
//! (`mx`) and the statements of threads regions, plain per-thread C (`threads`). `expr` renders expressions.

mod control;
mod expr;
mod mma;
mod mx;
mod sync;
mod threads;
mod tiles;
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

/// The device prelude, concatenated: part 1 (`core.cuh`: scalar types, conversions, math), part 2 (the tile
/// primitives, one fragment a family in `prelude/tiles/`, joined in this order), part 3 (`simt.cuh`: threads
/// regions). Part 2's fragments are pieces of one `namespace k3k` block, not headers of their own: `warp.cuh`
/// opens it (after part 2's heading) and `wgmma.cuh` closes it, and each fragment may use what the ones before it
/// define. Every kernel's source holds all three parts, the same bytes as before the split (2026-12-07).
pub const PRELUDE: &str = concat!(
    include_str!("../../prelude/core.cuh"),
    "\n",
    // Shared addresses, shuffles, the block barrier, warpgroup turns.
    include_str!("../../prelude/tiles/warp.cuh"),
    // Register tiles (f32 and i32 accumulators, packed bf16/f16) and row vectors.
    include_str!("../../prelude/tiles/regs.cuh"),
    // Shared tile layouts and the `cp.async` global -> shared copies.
    include_str!("../../prelude/tiles/shared.cuh"),
    // Element moves between register tiles and global or shared memory.
    include_str!("../../prelude/tiles/moves.cuh"),
    // Row reductions and column scans.
    include_str!("../../prelude/tiles/reduce.cuh"),
    // `mma.sync` products with `ldmatrix` operand loads.
    include_str!("../../prelude/tiles/mma.cuh"),
    // MXFP4 decode into bf16 register tiles, from shared or global memory (`Stmt::DequantFp4*`).
    include_str!("../../prelude/tiles/mx_decode.cuh"),
    // The MXFP4 decode GEMV (`Stmt::Fp4Gemv`) and the loads and copies only it uses.
    include_str!("../../prelude/tiles/fp4_gemv.cuh"),
    // `wgmma` descriptors, fences and waits (the per-shape wrappers are rendered per kernel).
    include_str!("../../prelude/tiles/wgmma.cuh"),
    "\n",
    include_str!("../../prelude/simt.cuh")
);

/// The barrier and bulk-tensor-copy primitives, appended to the prelude only for kernels that use them (so
/// every other kernel's source, and its cache key, is unchanged).
pub const PRELUDE_TMA: &str = include_str!("../../prelude/tma.cuh");

/// The cluster primitives (cluster barrier, remote arrivals, multicast copies), appended after
/// [`PRELUDE_TMA`] only for kernels that use them.
pub const PRELUDE_CLUSTER: &str = include_str!("../../prelude/cluster.cuh");

/// The E4M3 `mma.sync` products (`Stmt::Mma` on u32 words of E4M3 codes), appended to the prelude only for
/// kernels that use them (so every other kernel's source, and its cache key, is unchanged).
pub const PRELUDE_MMA_E4M3: &str = include_str!("../../prelude/tiles/mma_e4m3.cuh");

/// The `mma.sync` products addressed from per-thread origins ([`Kernel::mma_origins`]), appended to the prelude
/// only for kernels that ask for them (so every other kernel's source, and its cache key, is unchanged).
pub const PRELUDE_MMA_ORIGINS: &str = include_str!("../../prelude/tiles/mma_origins.cuh");

/// The 16-byte global stores by one `st.global.v4.b32` ([`Kernel::pinned_wide_stores`]), appended to the prelude
/// only for kernels that ask for them (so every other kernel's source, and its cache key, is unchanged).
pub const PRELUDE_PINNED_STORES: &str = include_str!("../../prelude/st_wide_v.cuh");

/// True when a kernel has an E4M3 `mma` (both operands shared windows of u32 words, validated).
pub fn uses_mma_e4m3(k: &Kernel) -> bool {
    k.any_stmt(|s| match s {
        Stmt::Mma { a: Operand::Shared { src, .. }, .. } => k.shared[src.buf.0 as usize].dtype == DType::U32,
        _ => false,
    })
}

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
/// barrier initializations, cluster barriers and grid dependencies (the producer's loads wait for the previous
/// grid too); the producer bodies are the producer slice's only.
fn consumer_only(s: &Stmt, nest: usize) -> bool {
    match s {
        Stmt::Let { .. }
        | Stmt::Assign { .. }
        | Stmt::For { .. }
        | Stmt::If { .. }
        | Stmt::Producer { .. }
        | Stmt::MbarInit { .. }
        | Stmt::ClusterSync
        | Stmt::GridDep(_) => false,
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
    if uses_mma_e4m3(k) {
        tma.push_str(&format!("\n{PRELUDE_MMA_E4M3}"));
    }
    if k.mma_origins {
        tma.push_str(&format!("\n{PRELUDE_MMA_ORIGINS}"));
    }
    if k.pinned_wide_stores {
        tma.push_str(&format!("\n{PRELUDE_PINNED_STORES}"));
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
        // A statement that writes a solo tile runs on the warps that own it (`RegTileDecl::solo`; warp-uniform).
        let dst = match s {
            Stmt::Map { tile, .. } | Stmt::Load { tile, .. } | Stmt::Mma { acc: tile, .. } => Some(*tile),
            _ => None,
        };
        if let Some(t) = dst.filter(|t| self.k.tiles[t.0 as usize].solo) {
            self.line(&format!("if ({}::L::G::replica() == 0) {{", self.tile_ty(t)));
            self.depth += 1;
            self.stmt_family(s);
            self.depth -= 1;
            self.line("}");
            return;
        }
        self.stmt_family(s);
    }

    fn stmt_family(&mut self, s: &Stmt) {
        match s.family() {
            StmtFamily::Control => self.control_stmt(s),
            StmtFamily::Sync => self.sync_stmt(s),
            StmtFamily::Tiles => self.tile_stmt(s),
            StmtFamily::Mma => self.mma_stmt(s),
            StmtFamily::Mx => self.mx_stmt(s),
            StmtFamily::Threads => self.thread_stmt(s),
        }
    }
}

/// The C name of a prefetching stream decode's raw-word registers.
fn prefetch_buf(tile: TileId, packed: bool) -> String {
    format!("pf{}_{}", tile.0, if packed { "p" } else { "n" })
}
