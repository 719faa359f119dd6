//! Kernel-level checks of the validator: declarations, cluster, TMA maps and boxes, row and warp shapes.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn kernel_level(&mut self) -> Result<(), IrError> {
        let k = self.k;
        if k.threads == 0 || !k.threads.is_multiple_of(32) || k.threads > 1024 {
            return Err(self
                .err(IrErrorKind::Resource, format!("threads = {} must be a multiple of 32 in 32..=1024", k.threads)));
        }
        if k.elected_warpgroup > 0 && (k.producer_warp || 128 * (k.elected_warpgroup + 1) > k.threads) {
            return Err(self.err(
                IrErrorKind::Resource,
                format!(
                    "elected_warpgroup = {} needs that many whole warpgroups and one more (threads = {}) and no \
                     producer warp (whose lane 0 is the elected thread)",
                    k.elected_warpgroup, k.threads
                ),
            ));
        }
        if k.producer_warp && !k.threads.is_multiple_of(128) {
            return Err(self.err(
                IrErrorKind::Resource,
                format!(
                    "threads = {} with a producer warp: the consumer threads must be whole warpgroups (a multiple \
                     of 128), so that the producer warpgroup starts on a warpgroup boundary",
                    k.threads
                ),
            ));
        }
        if k.launch_threads() > 1024 {
            return Err(self.err(
                IrErrorKind::Resource,
                format!("threads = {} plus the producer warpgroup exceed 1024 threads per block", k.threads),
            ));
        }
        for (i, t) in k.tensors.iter().enumerate() {
            for d in &t.dims {
                if let Dim::Sym(s) = d
                    && k.syms.get(s.0 as usize).map(|d| d.kind) != Some(SymKind::Dim)
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!("tensor #{i} `{}`: dim {:?} is not a dim symbol", t.name, s),
                    ));
                }
            }
        }
        self.path.push("grid".into());
        for g in &k.grid {
            let ty = self.ty(g, Ctx::Scalar { allow_special: false })?;
            if ty != ScalarTy::Int {
                return Err(self.err(IrErrorKind::Type, format!("grid size must be int, got {ty}")));
            }
            let mut bad = false;
            g.visit(&mut |e| {
                bad |= matches!(e, Expr::Var(_) | Expr::Load { .. } | Expr::SharedLoad { .. } | Expr::ArrayGet(..))
            });
            if bad {
                return Err(self.err(IrErrorKind::Type, "grid sizes may use symbols and constants only"));
            }
        }
        self.path.pop();
        let warps = k.warps();
        for t in &k.tiles {
            self.path.push(format!("tile `{}`", t.name));
            if !matches!(t.dtype, DType::F32 | DType::Bf16 | DType::F16 | DType::I32) {
                return Err(
                    self.err(IrErrorKind::Type, format!("register tiles hold f32, bf16, f16 or i32, not {}", t.dtype))
                );
            }
            self.check_warps(t.warps, warps)?;
            self.check_rows(t.rows, t.warps)?;
            if t.cols == 0 || t.cols % (8 * t.warps[1]) != 0 {
                return Err(self.err(
                    IrErrorKind::Layout,
                    format!("cols = {} must be a positive multiple of 8 * warps[1] = {}", t.cols, 8 * t.warps[1]),
                ));
            }
            self.path.pop();
        }
        for v in &k.vecs {
            self.path.push(format!("vec `{}`", v.name));
            self.check_warps(v.warps, warps)?;
            self.check_rows(v.rows, v.warps)?;
            self.path.pop();
        }
        for s in &k.shared {
            self.path.push(format!("shared `{}`", s.name));
            if s.count == 0 || s.rows == 0 || s.cols == 0 {
                return Err(self.err(IrErrorKind::Shape, "shared buffers need rows, cols and count >= 1"));
            }
            if s.swizzle != Swizzle::None && (s.dtype.storage_bytes(s.cols as usize) % 16 != 0) {
                return Err(self.err(IrErrorKind::Layout, "XOR swizzles need rows of a multiple of 16 bytes"));
            }
            self.path.pop();
        }
        for (i, s) in k.shared.iter().enumerate() {
            let Some(a) = s.alias else { continue };
            self.path.push(format!("shared `{}`", s.name));
            let root = match k.shared.get(a.of.0 as usize) {
                Some(r) if (a.of.0 as usize) < i => r,
                _ => {
                    return Err(
                        self.err(IrErrorKind::Scope, format!("alias of shared #{}: not an earlier buffer", a.of.0))
                    );
                }
            };
            if root.alias.is_some() {
                return Err(self.err(IrErrorKind::Layout, format!("alias of `{}`, itself an alias", root.name)));
            }
            let align = if s.is_swizzle_128b() { SWIZZLE_ATOM_ALIGN } else { SHARED_ALIGN };
            if !(a.byte_offset as usize).is_multiple_of(align) {
                return Err(self.err(
                    IrErrorKind::Layout,
                    format!("alias byte offset {} must be a multiple of {align}", a.byte_offset),
                ));
            }
            if a.byte_offset as usize + s.bytes() > root.bytes() {
                return Err(self.err(
                    IrErrorKind::Layout,
                    format!(
                        "{} bytes at offset {} do not fit in the {} bytes of `{}`",
                        s.bytes(),
                        a.byte_offset,
                        root.bytes(),
                        root.name
                    ),
                ));
            }
            self.path.pop();
        }
        self.tma_decls()?;
        self.cluster_decl()?;
        if k.shared_bytes() > MAX_SHARED_BYTES {
            return Err(self.err(
                IrErrorKind::Resource,
                format!("{} bytes of shared memory exceed the sm_90 limit of {MAX_SHARED_BYTES}", k.shared_bytes()),
            ));
        }
        Ok(())
    }

    /// The cluster shape ([`crate::cluster`]).
    pub(super) fn cluster_decl(&mut self) -> Result<(), IrError> {
        let c = self.k.cluster;
        let size: u64 = c.iter().map(|&d| d as u64).product();
        if c.contains(&0) || size > crate::cluster::MAX_CLUSTER as u64 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "cluster shape {c:?}: every dim >= 1 and at most {} blocks per cluster",
                    crate::cluster::MAX_CLUSTER
                ),
            ));
        }
        // A cluster must tile a constant grid exactly (the launcher checks symbolic grids).
        for (i, g) in self.k.grid.iter().enumerate() {
            if let Some(g) = g.as_const_int()
                && g % c[i] as i64 != 0
            {
                return Err(self.err(
                    IrErrorKind::Shape,
                    format!("grid dim {i} of {g} blocks is not a multiple of the cluster dim {}", c[i]),
                ));
            }
        }
        Ok(())
    }

    /// A constant multicast mask names CTAs of the cluster only (and at least one).
    pub(super) fn cluster_mask(&self, mask: &Expr) -> Result<(), IrError> {
        let n = self.k.cluster_size();
        if n < 2 {
            return Err(self.err(IrErrorKind::Shape, "a multicast TMA needs a cluster of at least 2 blocks"));
        }
        if let Some(m) = mask.as_const_int()
            && (m <= 0 || m >= 1i64 << n)
        {
            return Err(self.err(IrErrorKind::Shape, format!("multicast mask {m:#x} outside the cluster's {n} CTAs")));
        }
        Ok(())
    }

    /// Barrier declarations and tensor maps ([`crate::tma`]).
    pub(super) fn tma_decls(&mut self) -> Result<(), IrError> {
        let k = self.k;
        for m in &k.mbarriers {
            if m.count == 0 {
                return Err(self.err(IrErrorKind::Shape, format!("mbarrier `{}`: count must be >= 1", m.name)));
            }
        }
        for t in &k.tensor_maps {
            self.path.push(format!("tensor map `{}`", t.name));
            let p = k
                .tensors
                .get(t.tensor.0 as usize)
                .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", t.tensor.0)))?;
            if t.box_dims.is_empty() || t.box_dims.len() > 5 || t.box_dims.len() != p.dims.len() {
                return Err(self.err(
                    IrErrorKind::Shape,
                    format!(
                        "box of rank {} over tensor `{}` of rank {}: ranks 1..=5 and equal",
                        t.box_dims.len(),
                        p.name,
                        p.dims.len()
                    ),
                ));
            }
            if let Some(d) = t.box_dims.iter().find(|&&d| d == 0 || d > crate::tma::TMA_MAX_BOX) {
                return Err(
                    self.err(IrErrorKind::Shape, format!("box dim {d} outside 1..={}", crate::tma::TMA_MAX_BOX))
                );
            }
            if p.dtype.bits() < 8 {
                return Err(self.err(IrErrorKind::Type, format!("tensor `{}`: no TMA of 4-bit storage", p.name)));
            }
            if t.swizzle == Swizzle::Xor16BPairs {
                return Err(self.err(IrErrorKind::Layout, "the copy engine has no Xor16BPairs layout (None or Xor16B)"));
            }
            let row = p.dtype.storage_bytes(t.box_dims[0] as usize);
            if !row.is_multiple_of(16) || (t.swizzle == Swizzle::Xor16B && row != 128) {
                return Err(self.err(
                    IrErrorKind::Layout,
                    format!(
                        "box rows of {row} bytes: a multiple of 16, and exactly 128 with the Xor16B (128-byte) swizzle"
                    ),
                ));
            }
            self.path.pop();
        }
        Ok(())
    }

    pub(super) fn mbar_ref(&self, r: &crate::tma::MbarRef) -> Result<(), IrError> {
        let m = self
            .k
            .mbarriers
            .get(r.bar.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no mbarrier declaration #{}", r.bar.0)))?;
        self.scalar(&r.index, ScalarTy::Int, "mbarrier index")?;
        if let Some(i) = r.index.as_const_int()
            && (i < 0 || i >= m.count as i64)
        {
            return Err(
                self.err(IrErrorKind::Shape, format!("mbarrier `{}` has {} barriers, index {i}", m.name, m.count))
            );
        }
        Ok(())
    }

    pub(super) fn tma_load(&mut self, t: &crate::tma::TmaLoad) -> Result<(), IrError> {
        self.tma_box(t.map, &t.dst, &t.coords, false)?;
        self.mbar_ref(&t.bar)?;
        self.path.pop();
        Ok(())
    }

    pub(super) fn tma_store(&mut self, t: &crate::tma::TmaStore) -> Result<(), IrError> {
        self.tma_box(t.map, &t.src, &t.coords, true)?;
        let m = &self.k.tensor_maps[t.map.0 as usize];
        let p = &self.k.tensors[m.tensor.0 as usize];
        if p.access == Access::Read {
            return Err(self.err(IrErrorKind::Type, format!("TMA store into read-only tensor `{}`", p.name)));
        }
        if m.box_dims.len() > 3 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("TMA stores take maps of rank 1 to 3 (`{}` has rank {})", m.name, m.box_dims.len()),
            ));
        }
        self.path.pop();
        Ok(())
    }

    /// The checks a TMA box copy shares in both directions (`window`: the shared side); pushes the copy onto
    /// the path, which the caller pops.
    pub(super) fn tma_box(
        &mut self,
        map: crate::tma::TmapId,
        window: &SharedRef,
        coords: &[Expr],
        store: bool,
    ) -> Result<(), IrError> {
        let k = self.k;
        let m = k
            .tensor_maps
            .get(map.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor map #{}", map.0)))?;
        self.path.push(format!("{} `{}`", if store { "tma_store" } else { "tma_load" }, m.name));
        let d = self.shared_ref(window)?;
        let p = &k.tensors[m.tensor.0 as usize];
        let side = if store { "source" } else { "destination" };
        if d.dtype != p.dtype {
            return Err(self.err(
                IrErrorKind::Type,
                format!("TMA between `{}` ({}) and shared `{}` ({}) cannot convert", p.name, p.dtype, d.name, d.dtype),
            ));
        }
        if d.swizzle != m.swizzle || window.col0 != 0 || window.cols != d.cols || d.cols != m.box_dims[0] {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "TMA {side} `{}` ({}x{} {:?}, window cols {}..{}) must be whole rows of {} elements with the map's {:?} swizzle",
                    d.name,
                    d.rows,
                    d.cols,
                    d.swizzle,
                    window.col0,
                    window.col0 + window.cols,
                    m.box_dims[0],
                    m.swizzle
                ),
            ));
        }
        if window.rows != m.box_rows() {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("TMA {side} window of {} rows, the box has {}", window.rows, m.box_rows()),
            ));
        }
        // Every tile of the buffer, and the window inside it, starts on the alignment the copy engine needs (the
        // 8-row, 1024-byte atom of the 128-byte swizzle, so that the swizzle phase is the row index mod 8).
        let align = if m.swizzle == Swizzle::Xor16B { SWIZZLE_ATOM_ALIGN } else { SHARED_ALIGN };
        let (offsets, _) = k.shared_layout();
        let start = offsets[window.buf.0 as usize] + window.row0 as usize * d.row_bytes();
        if !start.is_multiple_of(align) || !d.tile_bytes().is_multiple_of(align) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "TMA {side} `{}` row {} starts at byte {start} with tiles of {} bytes: both must be multiples of {align}",
                    d.name,
                    window.row0,
                    d.tile_bytes()
                ),
            ));
        }
        if coords.len() != m.box_dims.len() {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("{} coordinates for a map of rank {}", coords.len(), m.box_dims.len()),
            ));
        }
        for c in coords {
            self.scalar(c, ScalarTy::Int, "TMA coordinate")?;
        }
        Ok(())
    }

    /// Rows of a register tile or row vector: 16-row fragments on every warp row of the grid.
    pub(super) fn check_rows(&self, rows: u32, w: [u32; 2]) -> Result<(), IrError> {
        if rows == 0 || !rows.is_multiple_of(16 * w[0]) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!("rows = {rows} must be a positive multiple of 16 * warps[0] = {}", 16 * w[0]),
            ));
        }
        Ok(())
    }

    pub(super) fn check_warps(&self, w: [u32; 2], warps: u32) -> Result<(), IrError> {
        if w[0] == 0 || w[1] == 0 || !warps.is_multiple_of(w[0] * w[1]) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!("warp grid {}x{} must divide the block's {} warps", w[0], w[1], warps),
            ));
        }
        Ok(())
    }
}
