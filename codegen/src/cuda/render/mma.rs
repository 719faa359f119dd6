//! Tensor-core products: `mma.sync` ([`Stmt::Mma`]), the warpgroup products `wgmma` ([`Stmt::MmaAsync`]) and
//! their wait.

use super::*;

impl<'a> Renderer<'a> {
    pub(super) fn mma_stmt(&mut self, s: &Stmt) {
        let k = self.k;
        match s {
            Stmt::Mma { acc, a, b } => {
                // A banded B operand moves down by its own height for each accumulator row band.
                let (bsrc, tb, bshift) = match b {
                    Operand::Shared { src, transpose } => (src, *transpose, 0),
                    Operand::Banded { src, transpose } => (src, *transpose, src.rows),
                    Operand::Reg(_) => unreachable!("validated: B comes from shared memory"),
                };
                if k.shared[bsrc.buf.0 as usize].dtype == DType::U32 {
                    // The E4M3 form (validated: A [M, K/4] and B [N, K/4] shared word windows).
                    let Operand::Shared { src: asrc, .. } = a else { unreachable!("validated: E4M3 A is shared") };
                    let line = format!(
                        "k3k::mma_ss_e4m3<{}, {}, {}>(t{}, {}, {}, {}, {}, {}, {});",
                        bsrc.cols,
                        self.shared_layout(asrc.buf),
                        self.shared_layout(bsrc.buf),
                        acc.0,
                        self.shared_ptr(asrc),
                        asrc.row0,
                        asrc.col0,
                        self.shared_ptr(bsrc),
                        bsrc.row0,
                        bsrc.col0,
                    );
                    self.line(&line);
                    return;
                }
                let h = c_type(k.shared[bsrc.buf.0 as usize].dtype);
                let kdim = if tb { bsrc.cols } else { bsrc.rows };
                let bl = self.shared_layout(bsrc.buf);
                let bptr = self.shared_ptr(bsrc);
                // (`Kernel::mma_origins`: the forms addressed from per-thread origins, same arguments.)
                let o = if k.mma_origins { "_o" } else { "" };
                let line = match a {
                    Operand::Shared { src, transpose } => format!(
                        "k3k::mma_ss{o}<{h}, {kdim}, {}, {}, {tb}, {bl}>(t{}, {}, {}, {}, {bptr}, {}, {}{});",
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
                        "k3k::mma_rs{o}<{h}, {kdim}, {tb}, {bl}>(t{}, t{}, {bptr}, {}, {}{});",
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
                            super::wgmma_fp8::col_bytes(shape, asrc.col0)
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
                let col_bytes = col_bytes + &super::wgmma_fp8::col_bytes(shape, bsrc.col0);
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
            _ => unreachable!("not a tensor-core product statement"),
        }
    }
}
