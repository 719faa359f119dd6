//! The FP8 form of the warpgroup product wrappers: `wgmma.mma_async` m64nNk32 with E4M3 A and B, both described
//! in shared memory, K-contiguous (8-bit operands have neither a register A in this IR nor a transpose mode, so
//! the instruction takes only scale-d and the two operand scales).

use super::wgmma::{Shape, wrapper_name};
use std::fmt::Write;

/// The byte offset of an E4M3 window's first word in its 128-byte row (` + 4 col0`, a multiple of 32: the
/// descriptor's start address moves by whole k32 steps, within the swizzle atom's first row); empty for the
/// 16-bit forms (validated col0 = 0), so their source is unchanged.
pub fn col_bytes(s: Shape, col0: u32) -> String {
    if s.ty == "e4m3" && col0 > 0 { format!(" + {}", 4 * col0) } else { String::new() }
}

/// CUDA C for one E4M3 wrapper: `d = (scale_d ? d : 0) + A(desc) * B(desc)` for one k32 step, `d` being the
/// thread's N/2 accumulators.
pub fn wrapper(s: Shape) -> String {
    debug_assert!(!s.a_reg && !s.b_mn && s.ty == "e4m3");
    let regs = s.n / 2;
    let n = s.n;
    let name = wrapper_name(s);
    let name = name.trim_start_matches("k3k::");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "namespace k3k {{\n__device__ __forceinline__ void {name}(float* d, unsigned long long da, unsigned long long db, int scale_d) {{"
    );
    let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let (a_op, b_op, scale_op) = (regs, regs + 1, regs + 2);
    let _ = writeln!(
        out,
        "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale_op}, 0;\\nwgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{}}}, %{a_op}, %{b_op}, p, 1, 1;\\n}}\\n\"",
        list.join(", "),
    );
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let _ = writeln!(
        out,
        "    : {}\n    : \"l\"(da), \"l\"(db), \"r\"(scale_d));\n}}\n}}  // namespace k3k",
        outs.join(", ")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_wrapper_has_no_transpose_immediates() {
        let w = wrapper(Shape { n: 16, ty: "e4m3", a_reg: false, b_mn: false });
        assert!(w.contains("wgmma_m64n16k32_e4m3(float* d, unsigned long long da,"), "{w}");
        assert!(w.contains("m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;"), "{w}");
        assert!(w.contains("setp.ne.b32 p, %10, 0"), "{w}");
        assert_eq!(w.matches("\"+f\"").count(), 8);
    }
}
