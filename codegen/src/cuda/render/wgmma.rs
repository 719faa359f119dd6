//! Instruction wrappers for the warpgroup tensor-core shapes a kernel uses (`wgmma.mma_async` m64nNk16 with
//! both operands described in shared memory). Generated per shape because the instruction names N/2
//! accumulator registers explicitly; everything else about `wgmma` lives in the prelude.

use k3k_ir::{DType, Kernel, Operand, Stmt};
use std::collections::BTreeSet;
use std::fmt::Write;

/// The `(N, operand type)` pairs of every `MmaAsync` in a kernel.
pub fn shapes(k: &Kernel) -> BTreeSet<(u32, &'static str)> {
    let mut out = BTreeSet::new();
    k.visit_stmts(&mut |s| {
        if let Stmt::MmaAsync { acc, b, .. } = s {
            let n = k.tiles[acc.0 as usize].cols;
            let dt = match b {
                Operand::Shared { src, .. } | Operand::Banded { src, .. } => k.shared[src.buf.0 as usize].dtype,
                Operand::Reg(t) => k.tiles[t.0 as usize].dtype,
            };
            out.insert((n, if dt == DType::F16 { "f16" } else { "bf16" }));
        }
    });
    out
}

/// The name of the wrapper for a shape.
pub fn wrapper_name(n: u32, ty: &str) -> String {
    format!("k3k::wgmma_m64n{n}k16_{ty}")
}

/// CUDA C for one wrapper: `d = (scale_d ? d : 0) + A(desc) * B(desc)` for one k16 step, `d` being the thread's
/// N/2 accumulators.
pub fn wrapper(n: u32, ty: &str) -> String {
    let regs = n / 2;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "namespace k3k {{\n__device__ __forceinline__ void wgmma_m64n{n}k16_{ty}(float* d, unsigned long long da, unsigned long long db, int scale_d) {{"
    );
    let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let _ = writeln!(
        s,
        "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\nwgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{}}}, %{}, %{}, p, 1, 1, 0, 0;\\n}}\\n\"",
        regs + 2,
        list.join(", "),
        regs,
        regs + 1
    );
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let _ = writeln!(
        s,
        "    : {}\n    : \"l\"(da), \"l\"(db), \"r\"(scale_d));\n}}\n}}  // namespace k3k",
        outs.join(", ")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper_names_every_register() {
        let w = wrapper(16, "bf16");
        assert!(w.contains("m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9"), "{w}");
        assert_eq!(w.matches("\"+f\"").count(), 8);
    }
}
