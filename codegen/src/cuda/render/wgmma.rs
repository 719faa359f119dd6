//! Instruction wrappers for the warpgroup tensor-core shapes a kernel uses (`wgmma.mma_async` m64nNk16, B
//! described in shared memory, A in shared memory or in registers, B K- or N-contiguous). Generated per shape
//! because the instruction names N/2 accumulator registers explicitly; everything else about `wgmma` lives in
//! the prelude.

use k3k_ir::{DType, Kernel, Operand, Stmt};
use std::collections::BTreeSet;
use std::fmt::Write;

/// One instruction form: N, the operand type, A from registers, B stored N-contiguous (`[K, N]`, the
/// transpose mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shape {
    pub n: u32,
    pub ty: &'static str,
    pub a_reg: bool,
    pub b_mn: bool,
}

impl Shape {
    /// K of one instruction: 16 for 16-bit operands, 32 for E4M3 (32 bytes of each K-contiguous row either way).
    pub fn k_step(&self) -> u32 {
        if self.ty == "e4m3" { 32 } else { 16 }
    }

    /// The form of one `MmaAsync` statement.
    pub fn of(k: &Kernel, acc: k3k_ir::TileId, a: &Operand, b: &Operand) -> Shape {
        // N per warpgroup (an accumulator on [4g, 2] warps splits its columns over two warpgroups).
        let t = &k.tiles[acc.0 as usize];
        let n = t.cols / t.warps[1];
        let (dt, b_mn) = match b {
            Operand::Shared { src, transpose } | Operand::Banded { src, transpose } => {
                (k.shared[src.buf.0 as usize].dtype, !transpose)
            }
            Operand::Reg(t) => (k.tiles[t.0 as usize].dtype, false),
        };
        let ty = match dt {
            DType::F16 => "f16",
            // u32 words of four E4M3 codes (the FP8 form, `wgmma_fp8.rs`).
            DType::U32 => "e4m3",
            _ => "bf16",
        };
        Shape { n, ty, a_reg: matches!(a, Operand::Reg(_)), b_mn }
    }
}

/// The forms of every `MmaAsync` in a kernel.
pub fn shapes(k: &Kernel) -> BTreeSet<Shape> {
    let mut out = BTreeSet::new();
    k.visit_stmts(&mut |s| {
        if let Stmt::MmaAsync { acc, a, b, .. } = s {
            out.insert(Shape::of(k, *acc, a, b));
        }
    });
    out
}

/// The name of the wrapper for a form.
pub fn wrapper_name(s: Shape) -> String {
    format!(
        "k3k::wgmma_m64n{}k{}_{}{}{}",
        s.n,
        s.k_step(),
        s.ty,
        if s.a_reg { "_rs" } else { "" },
        if s.b_mn { "_bmn" } else { "" }
    )
}

/// CUDA C for one wrapper: `d = (scale_d ? d : 0) + A * B(desc)` for one k16 step, `d` being the thread's N/2
/// accumulators and A a descriptor (`unsigned long long da`) or the thread's four packed A registers
/// (`const unsigned* a`).
pub fn wrapper(s: Shape) -> String {
    if s.ty == "e4m3" {
        return super::wgmma_fp8::wrapper(s);
    }
    let regs = s.n / 2;
    let (n, ty) = (s.n, s.ty);
    let name = wrapper_name(s);
    let name = name.trim_start_matches("k3k::");
    let mut out = String::new();
    let a_param = if s.a_reg { "const unsigned* a" } else { "unsigned long long da" };
    let _ = writeln!(
        out,
        "namespace k3k {{\n__device__ __forceinline__ void {name}(float* d, {a_param}, unsigned long long db, int scale_d) {{"
    );
    let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    // Operands after the accumulators: A (1 descriptor or 4 registers), the B descriptor, scale_d.
    let n_a = if s.a_reg { 4 } else { 1 };
    let a_ops = if s.a_reg {
        format!("{{%{}, %{}, %{}, %{}}}", regs, regs + 1, regs + 2, regs + 3)
    } else {
        format!("%{regs}")
    };
    let b_op = regs + n_a;
    let scale_op = regs + n_a + 1;
    let tb = u32::from(s.b_mn);
    // Immediates: scale-a, scale-b, then (descriptor A only) transpose-a, then transpose-b.
    let imms = if s.a_reg { format!("1, 1, {tb}") } else { format!("1, 1, 0, {tb}") };
    let _ = writeln!(
        out,
        "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale_op}, 0;\\nwgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{}}}, {a_ops}, %{b_op}, p, {imms};\\n}}\\n\"",
        list.join(", "),
    );
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let a_in = if s.a_reg {
        "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])".to_string()
    } else {
        "\"l\"(da)".to_string()
    };
    let _ =
        writeln!(out, "    : {}\n    : {a_in}, \"l\"(db), \"r\"(scale_d));\n}}\n}}  // namespace k3k", outs.join(", "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper_names_every_register() {
        let w = wrapper(Shape { n: 16, ty: "bf16", a_reg: false, b_mn: false });
        assert!(w.contains("m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;"), "{w}");
        assert!(w.contains("setp.ne.b32 p, %10, 0"), "{w}");
        assert_eq!(w.matches("\"+f\"").count(), 8);
    }

    #[test]
    fn register_a_and_transposed_b() {
        let w = wrapper(Shape { n: 16, ty: "bf16", a_reg: true, b_mn: true });
        assert!(w.contains("wgmma_m64n16k16_bf16_rs_bmn(float* d, const unsigned* a,"), "{w}");
        assert!(w.contains("{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 1;"), "{w}");
        assert!(w.contains("setp.ne.b32 p, %13, 0"), "{w}");
        assert!(w.contains("\"r\"(a[3]), \"l\"(db), \"r\"(scale_d)"), "{w}");
        let w = wrapper(Shape { n: 64, ty: "f16", a_reg: false, b_mn: true });
        assert!(w.contains("%32, %33, p, 1, 1, 0, 1;"), "{w}");
    }
}
