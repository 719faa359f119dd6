//! Static checks of a kernel: scopes, expression types, tile shapes and layouts, resources.

use crate::dtype::{DType, ScalarTy};
use crate::expr::{ArrId, BinOp, Expr, SharedId, Special, TileId, UnOp, VarId, VecId};
use crate::kernel::*;
use std::collections::{HashMap, HashSet};

/// Largest dynamic shared memory one block may opt into on sm_90 (227 KiB).
pub const MAX_SHARED_BYTES: usize = 232_448;

/// What kind of rule a kernel broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrErrorKind {
    /// An expression has the wrong type, or a leaf is used where it is not allowed.
    Type,
    /// Tile, window or operand shapes do not fit together.
    Shape,
    /// Warp layouts of tiles do not fit together.
    Layout,
    /// A variable, tile, tensor or symbol id does not exist or is out of scope.
    Scope,
    /// Threads, shared memory or similar limits are exceeded.
    Resource,
}

/// A validation failure: which kernel, where in it, and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("kernel `{kernel}` at {at}: {kind:?} error: {msg}")]
pub struct IrError {
    pub kernel: String,
    pub at: String,
    pub kind: IrErrorKind,
    pub msg: String,
}

/// Where a statement may appear.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    Anywhere,
    BlockOnly,
    RegionOnly,
}

#[derive(Clone, Copy)]
enum Ctx<'a> {
    /// Loop bounds, offsets, conditions.
    Scalar { allow_special: bool },
    /// Per-row of a vector with these rows/warps.
    Row { vec: &'a VecDecl },
    /// Per-element of this tile.
    Elem { tile: &'a RegTileDecl },
}

/// The variables and arrays one block of statements introduces.
#[derive(Default)]
struct Scope {
    vars: HashMap<VarId, ScalarTy>,
    arrays: HashMap<ArrId, (ScalarTy, u32)>,
}

impl Scope {
    fn with_var(v: VarId, t: ScalarTy) -> Self {
        Scope { vars: HashMap::from([(v, t)]), arrays: HashMap::new() }
    }
}

/// Longest per-thread array (elements); longer ones could never live in registers.
pub const MAX_ARRAY_LEN: u32 = 1024;

struct Checker<'a> {
    k: &'a Kernel,
    scopes: Vec<Scope>,
    path: Vec<String>,
    var_types: Vec<Option<ScalarTy>>,
    array_seen: Vec<bool>,
    /// Inside a threads region: the number of scopes that were open at its start (variables of those
    /// scopes are block-level and must not be assigned).
    region: Option<usize>,
    /// Inside a [`Stmt::Producer`] body.
    producer: bool,
    /// Inside a [`Stmt::InTurn`] body.
    in_turn: bool,
    /// Inside a [`Stmt::FirstWarpgroups`] body: its count, and the number of scopes open at its start (variables
    /// of those scopes must not be assigned in it).
    first_wgs: Option<(u32, usize)>,
    /// Producer-warp kernels: the variables assigned in producer bodies (only those bodies may read them).
    producer_owned: HashSet<VarId>,
    /// Producer-warp kernels: checking an expression of the skeleton both roles run (block-level control
    /// outside producer bodies), which must not read shared memory or a tensor the kernel writes.
    skeleton: std::cell::Cell<bool>,
}

/// The variables assigned inside [`Stmt::Producer`] bodies.
fn producer_owned(k: &Kernel) -> HashSet<VarId> {
    fn walk(body: &[Stmt], inside: bool, out: &mut HashSet<VarId>) {
        for s in body {
            match s {
                Stmt::Assign { var, .. } if inside => {
                    out.insert(*var);
                }
                Stmt::Producer { body } => walk(body, true, out),
                _ => s.bodies().into_iter().for_each(|b| walk(b, inside, out)),
            }
        }
    }
    let mut out = HashSet::new();
    walk(&k.body, false, &mut out);
    out
}

/// Check a kernel; returns the first problem found.
pub fn validate(k: &Kernel) -> Result<(), IrError> {
    var_types(k).map(|_| ())
}

/// Check a kernel and return the type of every variable (indexed by [`VarId`]; `None` for a declared variable
/// that no statement introduces). Code generators use this to declare variables.
pub fn var_types(k: &Kernel) -> Result<Vec<Option<ScalarTy>>, IrError> {
    let mut c = Checker {
        k,
        scopes: vec![Scope::default()],
        path: vec![],
        var_types: vec![None; k.vars.len()],
        array_seen: vec![false; k.arrays.len()],
        region: None,
        producer: false,
        in_turn: false,
        first_wgs: None,
        producer_owned: producer_owned(k),
        skeleton: std::cell::Cell::new(false),
    };
    c.kernel_level()?;
    c.body(&k.body)?;
    first_warpgroups_ownership(k)?;
    Ok(c.var_types)
}

/// The register tiles and row vectors a statement mentions (not those of nested bodies).
fn stmt_tiles_vecs(s: &Stmt) -> (Vec<TileId>, Vec<VecId>) {
    let (mut tiles, mut vecs) = (vec![], vec![]);
    let leaves = |e: &Expr, tiles: &mut Vec<TileId>, vecs: &mut Vec<VecId>| {
        e.visit(&mut |x| match x {
            Expr::Elem(t) => tiles.push(*t),
            Expr::RowVal(v) => vecs.push(*v),
            _ => {}
        })
    };
    let operand = |o: &Operand, tiles: &mut Vec<TileId>| {
        if let Operand::Reg(t) = o {
            tiles.push(*t);
        }
    };
    match s {
        Stmt::Map { tile, value } => {
            tiles.push(*tile);
            leaves(value, &mut tiles, &mut vecs);
        }
        Stmt::VecMap { vec, value } => {
            vecs.push(*vec);
            leaves(value, &mut tiles, &mut vecs);
        }
        Stmt::Reduce { vec, tile, .. } => {
            vecs.push(*vec);
            tiles.push(*tile);
        }
        Stmt::Mma { acc, a, b } | Stmt::MmaAsync { acc, a, b, .. } => {
            tiles.push(*acc);
            operand(a, &mut tiles);
            operand(b, &mut tiles);
        }
        Stmt::StoreCols { tile, .. }
        | Stmt::Load { tile, .. }
        | Stmt::Store { tile, .. }
        | Stmt::Scan { tile, .. }
        | Stmt::DequantFp4 { tile, .. }
        | Stmt::DequantFp4Stream { tile, .. } => tiles.push(*tile),
        Stmt::LoadVec { vec, .. } | Stmt::StoreVec { vec, .. } => vecs.push(*vec),
        _ => {}
    }
    (tiles, vecs)
}

/// [`Stmt::FirstWarpgroups`]: every tile and row vector a body mentions is mentioned only inside bodies of the
/// same count (elsewhere the skipping warpgroups' stale replicas would be read), and lies on the running warps.
fn first_warpgroups_ownership(k: &Kernel) -> Result<(), IrError> {
    // Per tile / vector: the contexts it is mentioned in (None: outside every body).
    let mut tiles: HashMap<TileId, HashSet<Option<u32>>> = HashMap::new();
    let mut vecs: HashMap<VecId, HashSet<Option<u32>>> = HashMap::new();
    fn walk(
        body: &[Stmt],
        at: Option<u32>,
        tiles: &mut HashMap<TileId, HashSet<Option<u32>>>,
        vecs: &mut HashMap<VecId, HashSet<Option<u32>>>,
    ) {
        for s in body {
            let (ts, vs) = stmt_tiles_vecs(s);
            for t in ts {
                tiles.entry(t).or_default().insert(at);
            }
            for v in vs {
                vecs.entry(v).or_default().insert(at);
            }
            match s {
                Stmt::FirstWarpgroups { count, body } => walk(body, Some(*count), tiles, vecs),
                _ => s.bodies().into_iter().for_each(|b| walk(b, at, tiles, vecs)),
            }
        }
    }
    walk(&k.body, None, &mut tiles, &mut vecs);
    let err = |kind, msg: String| IrError { kernel: k.name.clone(), at: "kernel".into(), kind, msg };
    let named = tiles
        .iter()
        .map(|(t, at)| (format!("tile `{}`", k.tiles[t.0 as usize].name), k.tiles[t.0 as usize].warps, at))
        .chain(
            vecs.iter()
                .map(|(v, at)| (format!("vector `{}`", k.vecs[v.0 as usize].name), k.vecs[v.0 as usize].warps, at)),
        );
    let mut problems: Vec<(IrErrorKind, String)> = named
        .filter_map(|(name, warps, at)| {
            let counts: Vec<u32> = at.iter().flatten().copied().collect();
            let &count = counts.first()?;
            if at.len() > 1 {
                return Some((
                    IrErrorKind::Scope,
                    format!(
                        "{name} is mentioned inside a `first_warpgroups` body and {}: only the running warpgroups \
                         hold its values (pass what the others need through shared memory)",
                        if at.contains(&None) { "outside such bodies" } else { "in bodies of other counts" }
                    ),
                ));
            }
            (warps[0] * warps[1] > 4 * count).then(|| {
                (
                    IrErrorKind::Layout,
                    format!(
                        "{name} on warps {warps:?} is used in a `first_warpgroups` body of {count}, whose {} warps \
                         run it",
                        4 * count
                    ),
                )
            })
        })
        .collect();
    problems.sort_by(|a, b| a.1.cmp(&b.1));
    match problems.into_iter().next() {
        Some((kind, msg)) => Err(err(kind, msg)),
        None => Ok(()),
    }
}

impl<'a> Checker<'a> {
    fn err(&self, kind: IrErrorKind, msg: impl Into<String>) -> IrError {
        IrError {
            kernel: self.k.name.clone(),
            at: if self.path.is_empty() { "kernel".into() } else { self.path.join(" > ") },
            kind,
            msg: msg.into(),
        }
    }

    fn kernel_level(&mut self) -> Result<(), IrError> {
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
    fn cluster_decl(&mut self) -> Result<(), IrError> {
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
    fn cluster_mask(&self, mask: &Expr) -> Result<(), IrError> {
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
    fn tma_decls(&mut self) -> Result<(), IrError> {
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

    fn mbar_ref(&self, r: &crate::tma::MbarRef) -> Result<(), IrError> {
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

    fn tma_load(&mut self, t: &crate::tma::TmaLoad) -> Result<(), IrError> {
        self.tma_box(t.map, &t.dst, &t.coords, false)?;
        self.mbar_ref(&t.bar)?;
        self.path.pop();
        Ok(())
    }

    fn tma_store(&mut self, t: &crate::tma::TmaStore) -> Result<(), IrError> {
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
    fn tma_box(
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
    fn check_rows(&self, rows: u32, w: [u32; 2]) -> Result<(), IrError> {
        if rows == 0 || !rows.is_multiple_of(16 * w[0]) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!("rows = {rows} must be a positive multiple of 16 * warps[0] = {}", 16 * w[0]),
            ));
        }
        Ok(())
    }

    fn check_warps(&self, w: [u32; 2], warps: u32) -> Result<(), IrError> {
        if w[0] == 0 || w[1] == 0 || !warps.is_multiple_of(w[0] * w[1]) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!("warp grid {}x{} must divide the block's {} warps", w[0], w[1], warps),
            ));
        }
        Ok(())
    }

    fn tile(&self, id: TileId) -> Result<&'a RegTileDecl, IrError> {
        self.k
            .tiles
            .get(id.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no register tile #{}", id.0)))
    }
    fn vec(&self, id: VecId) -> Result<&'a VecDecl, IrError> {
        self.k.vecs.get(id.0 as usize).ok_or_else(|| self.err(IrErrorKind::Scope, format!("no row vector #{}", id.0)))
    }
    fn shared(&self, id: SharedId) -> Result<&'a SharedDecl, IrError> {
        self.k
            .shared
            .get(id.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no shared buffer #{}", id.0)))
    }
    fn var_ty(&self, v: VarId) -> Option<ScalarTy> {
        self.scopes.iter().rev().find_map(|s| s.vars.get(&v).copied())
    }
    /// The index of the scope that introduced a variable.
    fn var_scope(&self, v: VarId) -> Option<usize> {
        self.scopes.iter().rposition(|s| s.vars.contains_key(&v))
    }
    fn array(&self, a: ArrId) -> Result<(ScalarTy, u32), IrError> {
        self.scopes.iter().rev().find_map(|s| s.arrays.get(&a).copied()).ok_or_else(|| {
            let name = self.k.arrays.get(a.0 as usize).map_or("?", |d| &d.name);
            self.err(IrErrorKind::Scope, format!("array #{} `{name}` used out of scope", a.0))
        })
    }
    fn var_name(&self, v: VarId) -> &str {
        self.k.vars.get(v.0 as usize).map_or("?", |d| &d.name)
    }
    /// Introduce a variable in the innermost scope.
    fn introduce(&mut self, var: VarId, t: ScalarTy, what: &str) -> Result<(), IrError> {
        if var.0 as usize >= self.k.vars.len() {
            return Err(self.err(IrErrorKind::Scope, format!("no variable #{}", var.0)));
        }
        if self.var_types[var.0 as usize].replace(t).is_some() {
            return Err(self.err(IrErrorKind::Scope, format!("{what} #{} is introduced twice", var.0)));
        }
        self.scopes.last_mut().unwrap().vars.insert(var, t);
        Ok(())
    }

    /// The type of an expression in a context.
    fn ty(&self, e: &Expr, ctx: Ctx<'_>) -> Result<ScalarTy, IrError> {
        use ScalarTy::*;
        Ok(match e {
            Expr::Int(_) => Int,
            Expr::Float(_) => Float,
            Expr::Bool(_) => Bool,
            Expr::Sym(s) => match self.k.syms.get(s.0 as usize) {
                Some(d) if d.kind == SymKind::Float => Float,
                Some(_) => Int,
                None => return Err(self.err(IrErrorKind::Scope, format!("no symbol #{}", s.0))),
            },
            Expr::Var(v) => {
                if !self.producer && self.producer_owned.contains(v) {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "variable `{}` is assigned by the producer warp (in a `producer` body) and read outside \
                             the producer bodies: the consumer threads never see its value",
                            self.var_name(*v)
                        ),
                    ));
                }
                self.var_ty(*v)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("variable #{} used out of scope", v.0)))?
            }
            Expr::Special(sp) => match ctx {
                Ctx::Scalar { allow_special: false } => {
                    return Err(self.err(IrErrorKind::Type, "block indices are not allowed here"));
                }
                _ if sp.is_per_thread() && self.region.is_none() => {
                    let name = match sp {
                        Special::ThreadIdx => "ThreadIdx",
                        Special::LaneIdx => "LaneIdx",
                        _ => "WarpIdx",
                    };
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("{name} differs between threads: it is only valid inside a threads region"),
                    ));
                }
                _ => Int,
            },
            Expr::SharedLoad { buf, index, row, col } => {
                let d = self.shared(*buf)?;
                if self.skeleton.get() {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "shared `{}` is read by block-level control of a producer-warp kernel, which both roles \
                             run: the producer warp would read it unsynchronized",
                            d.name
                        ),
                    ));
                }
                if d.dtype.bits() < 8 {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("shared `{}`: 4-bit elements cannot be read one by one", d.name),
                    ));
                }
                for (e, what) in
                    [(&**index, "shared load tile index"), (&**row, "shared load row"), (&**col, "shared load col")]
                {
                    let t = self.ty(e, ctx)?;
                    if t != Int {
                        return Err(self.err(IrErrorKind::Type, format!("{what} must be int, got {t}")));
                    }
                }
                self.shared_coords(d, index, row, col)?;
                ScalarTy::of_dtype(d.dtype)
            }
            Expr::ArrayGet(a, index) => {
                let (t, len) = self.array(*a)?;
                let it = self.ty(index, ctx)?;
                if it != Int {
                    return Err(self.err(IrErrorKind::Type, format!("array index must be int, got {it}")));
                }
                self.array_index(*a, index, len)?;
                t
            }
            Expr::Load { tensor, index } => {
                let t = self
                    .k
                    .tensors
                    .get(tensor.0 as usize)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", tensor.0)))?;
                if self.ty(index, Ctx::Scalar { allow_special: true })? != Int {
                    return Err(self.err(IrErrorKind::Type, "load index must be int"));
                }
                if self.skeleton.get() && t.access != Access::Read {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "tensor `{}`, which the kernel writes, is read by block-level control of a producer-warp \
                             kernel, which both roles run: the producer warp would read it unsynchronized",
                            t.name
                        ),
                    ));
                }
                if t.dtype.bits() < 8 {
                    return Err(
                        self.err(IrErrorKind::Type, "scalar loads of 4-bit types are not supported; view as u8")
                    );
                }
                ScalarTy::of_dtype(t.dtype)
            }
            Expr::Elem(t) => {
                let decl = self.tile(*t)?;
                match ctx {
                    Ctx::Elem { tile } => {
                        if decl.rows != tile.rows || decl.cols != tile.cols || decl.warps != tile.warps {
                            return Err(self.err(
                                IrErrorKind::Layout,
                                format!(
                                    "tile `{}` ({}x{} on {:?}) read while mapping `{}` ({}x{} on {:?}): shapes and warps must match",
                                    decl.name, decl.rows, decl.cols, decl.warps, tile.name, tile.rows, tile.cols, tile.warps
                                ),
                            ));
                        }
                    }
                    _ => return Err(self.err(IrErrorKind::Type, "tile elements can only be read inside a map")),
                }
                if decl.dtype == DType::I32 { Int } else { Float }
            }
            Expr::RowVal(v) => {
                let vd = self.vec(*v)?;
                let (rows, warps) = match ctx {
                    Ctx::Elem { tile } => (tile.rows, tile.warps),
                    Ctx::Row { vec } => (vec.rows, vec.warps),
                    Ctx::Scalar { .. } => {
                        return Err(self.err(IrErrorKind::Type, "row vectors can only be read inside a map"));
                    }
                };
                if vd.rows != rows || vd.warps[0] != warps[0] {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "row vector `{}` ({} rows on {:?}) does not match {} rows on {:?}",
                            vd.name, vd.rows, vd.warps, rows, warps
                        ),
                    ));
                }
                if let Ctx::Elem { tile } = ctx
                    && vd.warps[1] != tile.warps[1]
                {
                    return Err(
                        self.err(IrErrorKind::Layout, format!("row vector `{}` warps differ from the tile's", vd.name))
                    );
                }
                Float
            }
            Expr::RowIdx => match ctx {
                Ctx::Scalar { .. } => return Err(self.err(IrErrorKind::Type, "RowIdx is only valid inside a map")),
                _ => Int,
            },
            Expr::ColIdx => match ctx {
                Ctx::Elem { .. } => Int,
                _ => return Err(self.err(IrErrorKind::Type, "ColIdx is only valid inside a tile map")),
            },
            Expr::Cast(to, a) => {
                let from = self.ty(a, ctx)?;
                if *to == Bool && from != Bool {
                    return Err(self.err(IrErrorKind::Type, "use a comparison to make a bool"));
                }
                *to
            }
            Expr::Select(c, a, b) => {
                if self.ty(c, ctx)? != Bool {
                    return Err(self.err(IrErrorKind::Type, "select condition must be bool"));
                }
                let (ta, tb) = (self.ty(a, ctx)?, self.ty(b, ctx)?);
                if ta != tb {
                    return Err(self.err(IrErrorKind::Type, format!("select arms differ: {ta} vs {tb}")));
                }
                ta
            }
            Expr::Un(op, a) => {
                let t = self.ty(a, ctx)?;
                match op {
                    UnOp::Not => {
                        if t != Bool {
                            return Err(self.err(IrErrorKind::Type, "`not` needs a bool"));
                        }
                        Bool
                    }
                    UnOp::Neg | UnOp::Abs => {
                        if t == Bool {
                            return Err(self.err(IrErrorKind::Type, format!("`{}` needs a number", op.name())));
                        }
                        t
                    }
                    UnOp::IsNan | UnOp::IsFinite => {
                        if t != Float {
                            return Err(self.err(IrErrorKind::Type, format!("`{}` needs a float", op.name())));
                        }
                        Bool
                    }
                    UnOp::Bits => {
                        if t != Float {
                            return Err(self.err(IrErrorKind::Type, format!("`bits` needs a float, got {t}")));
                        }
                        Int
                    }
                    UnOp::FromBits => {
                        if t != Int {
                            return Err(self.err(IrErrorKind::Type, format!("`from_bits` needs an int, got {t}")));
                        }
                        Float
                    }
                    _ => {
                        if t != Float {
                            return Err(self.err(IrErrorKind::Type, format!("`{}` needs a float, got {t}", op.name())));
                        }
                        Float
                    }
                }
            }
            Expr::Bin(op, a, b) => {
                let (ta, tb) = (self.ty(a, ctx)?, self.ty(b, ctx)?);
                match op {
                    BinOp::Ldexp => {
                        if ta != Float || tb != Int {
                            return Err(self.err(IrErrorKind::Type, "ldexp takes (float, int)"));
                        }
                        Float
                    }
                    BinOp::And | BinOp::Or => {
                        if ta != Bool || tb != Bool {
                            return Err(self.err(IrErrorKind::Type, format!("`{}` takes bools", op.symbol())));
                        }
                        Bool
                    }
                    BinOp::Rem
                    | BinOp::Shl
                    | BinOp::Shr
                    | BinOp::BitAnd
                    | BinOp::BitOr
                    | BinOp::BitXor
                    | BinOp::Fp4Pair => {
                        if ta != Int || tb != Int {
                            return Err(
                                self.err(IrErrorKind::Type, format!("`{}` takes ints, got {ta} and {tb}", op.symbol()))
                            );
                        }
                        Int
                    }
                    _ => {
                        if ta != tb || ta == Bool && !matches!(op, BinOp::Eq | BinOp::Ne) {
                            return Err(self.err(
                                IrErrorKind::Type,
                                format!(
                                    "`{}` needs two numbers of one type, got {ta} and {tb} (cast explicitly)",
                                    op.symbol()
                                ),
                            ));
                        }
                        if op.is_comparison() { Bool } else { ta }
                    }
                }
            }
        })
    }

    fn expect(&self, e: &Expr, ctx: Ctx<'_>, want: ScalarTy, what: &str) -> Result<(), IrError> {
        let t = self.ty(e, ctx)?;
        if t != want {
            return Err(self.err(IrErrorKind::Type, format!("{what} must be {want}, got {t}")));
        }
        Ok(())
    }

    fn scalar(&self, e: &Expr, want: ScalarTy, what: &str) -> Result<(), IrError> {
        self.expect(e, Ctx::Scalar { allow_special: true }, want, what)
    }

    fn shared_ref(&self, r: &SharedRef) -> Result<&'a SharedDecl, IrError> {
        let d = self.shared(r.buf)?;
        self.scalar(&r.index, ScalarTy::Int, "shared tile index")?;
        if let Some(i) = r.index.as_const_int()
            && (i < 0 || i >= d.count as i64)
        {
            return Err(self.err(IrErrorKind::Shape, format!("shared `{}` has {} tiles, index {i}", d.name, d.count)));
        }
        if r.rows == 0 || r.cols == 0 || r.row0 + r.rows > d.rows || r.col0 + r.cols > d.cols {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "window rows {}..{} cols {}..{} is outside shared `{}` ({}x{})",
                    r.row0,
                    r.row0 + r.rows,
                    r.col0,
                    r.col0 + r.cols,
                    d.name,
                    d.rows,
                    d.cols
                ),
            ));
        }
        Ok(d)
    }

    fn global_view(&self, v: &GlobalView) -> Result<&'a TensorParam, IrError> {
        let t = self
            .k
            .tensors
            .get(v.tensor.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", v.tensor.0)))?;
        for (e, what) in [
            (&v.offset, "view offset"),
            (&v.row_stride, "view row stride"),
            (&v.rows, "view rows"),
            (&v.cols, "view cols"),
        ] {
            self.scalar(e, ScalarTy::Int, what)?;
        }
        if !matches!(v.vec, 1 | 2 | 4 | 8 | 16) || t.dtype.storage_bytes(v.vec as usize) > 16 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("view of `{}`: vec = {} must be 1, 2, 4, 8 or 16 and at most 16 bytes", t.name, v.vec),
            ));
        }
        if t.dtype.bits() < 8 {
            return Err(self.err(IrErrorKind::Type, format!("tensor `{}`: view 4-bit storage as u8", t.name)));
        }
        Ok(t)
    }

    fn body(&mut self, body: &[Stmt]) -> Result<(), IrError> {
        for (i, s) in body.iter().enumerate() {
            self.path.push(format!("[{i}]"));
            self.stmt(s)?;
            self.path.pop();
        }
        Ok(())
    }

    /// The statement's name in messages, and where it may appear.
    fn placement(s: &Stmt) -> (&'static str, Placement) {
        use Placement::*;
        match s {
            Stmt::Let { .. } => ("let", Anywhere),
            Stmt::Assign { .. } => ("assign", Anywhere),
            Stmt::For { .. } => ("for", Anywhere),
            Stmt::If { .. } => ("if", Anywhere),
            Stmt::Barrier => ("barrier", BlockOnly),
            Stmt::Map { .. } => ("map", BlockOnly),
            Stmt::VecMap { .. } => ("vec_map", BlockOnly),
            Stmt::Reduce { .. } => ("reduce", BlockOnly),
            Stmt::Mma { .. } => ("mma", BlockOnly),
            Stmt::MmaAsync { .. } => ("mma_async", BlockOnly),
            Stmt::MmaWait { .. } => ("mma_wait", BlockOnly),
            Stmt::CopyAsync { .. } => ("copy_async", BlockOnly),
            Stmt::MbarInit { .. } => ("mbar_init", BlockOnly),
            Stmt::MbarArriveExpectTx { .. } => ("mbar_arrive_expect_tx", BlockOnly),
            Stmt::MbarArrive { .. } => ("mbar_arrive", BlockOnly),
            Stmt::MbarWait { .. } => ("mbar_wait", BlockOnly),
            Stmt::TmaLoad(_) => ("tma_load", BlockOnly),
            Stmt::TmaStore(_) => ("tma_store", BlockOnly),
            Stmt::TmaStoreWait { .. } => ("tma_store_wait", BlockOnly),
            Stmt::StoreCols { .. } => ("tile column store", BlockOnly),
            Stmt::MbarArriveCluster { .. } => ("mbar_arrive_cluster", BlockOnly),
            Stmt::ClusterSync => ("cluster_sync", BlockOnly),
            Stmt::AsyncCommit => ("async commit", BlockOnly),
            Stmt::AsyncWait { .. } => ("async wait", BlockOnly),
            Stmt::Load { .. } => ("tile load", BlockOnly),
            Stmt::Store { .. } => ("tile store", BlockOnly),
            Stmt::LoadVec { .. } => ("vector load", BlockOnly),
            Stmt::StoreVec { .. } => ("vector store", BlockOnly),
            Stmt::Scan { .. } => ("scan", BlockOnly),
            Stmt::DequantFp4 { .. } => ("dequant_fp4", BlockOnly),
            Stmt::DequantFp4Stream { .. } => ("dequant_fp4_stream", BlockOnly),
            Stmt::Fp4Gemv { .. } => ("fp4_gemv", BlockOnly),
            Stmt::Threads { .. } => ("threads region", BlockOnly),
            Stmt::Producer { .. } => ("producer", BlockOnly),
            Stmt::InTurn { .. } => ("in_turn", BlockOnly),
            Stmt::FirstWarpgroups { .. } => ("first_warpgroups", BlockOnly),
            Stmt::StoreScalar { .. } => ("store_scalar", RegionOnly),
            Stmt::SharedStore { .. } => ("shared_store", RegionOnly),
            Stmt::Atomic { .. } => ("atomic", RegionOnly),
            Stmt::LetArray { .. } => ("let_array", RegionOnly),
            Stmt::ArraySet { .. } => ("array_set", RegionOnly),
            Stmt::LoadWide { .. } => ("load_wide", RegionOnly),
            Stmt::StoreWide { .. } => ("store_wide", RegionOnly),
            Stmt::WarpShuffle { .. } => ("warp_shuffle", RegionOnly),
            Stmt::WarpSync => ("syncwarp", RegionOnly),
            Stmt::Fence => ("fence", RegionOnly),
        }
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match (Self::placement(s), self.region.is_some()) {
            ((name, Placement::BlockOnly), true) => {
                return Err(self.err(
                    IrErrorKind::Scope,
                    format!(
                        "`{name}` is a block-level statement and cannot appear inside a threads region \
                         (end the region before it and start a new one after it)"
                    ),
                ));
            }
            ((name, Placement::RegionOnly), false) => {
                return Err(self.err(
                    IrErrorKind::Scope,
                    format!("`{name}` is per-thread code: it is only valid inside a threads region"),
                ));
            }
            _ => {}
        }
        if self.k.producer_warp {
            self.producer_placement(s)?;
        } else if matches!(s, Stmt::Producer { .. }) {
            return Err(self.err(
                IrErrorKind::Scope,
                "a `producer` body needs a producer-warp kernel (`KernelBuilder::producer_warp`)",
            ));
        }
        if self.in_turn {
            self.turn_placement(s)?;
        }
        if self.first_wgs.is_some() {
            self.first_wgs_placement(s)?;
        }
        let skeleton = self.k.producer_warp && !self.producer && self.region.is_none();
        self.skeleton
            .set(skeleton && matches!(s, Stmt::Let { .. } | Stmt::Assign { .. } | Stmt::For { .. } | Stmt::If { .. }));
        let r = self.stmt_inner(s);
        self.skeleton.set(false);
        r
    }

    /// Inside an [`Stmt::InTurn`] body: nothing that waits for another consumer warpgroup (which may be waiting
    /// for the turn this warpgroup holds).
    fn turn_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let what = match s {
            Stmt::Barrier
            | Stmt::Scan { .. }
            | Stmt::Fp4Gemv { .. }
            | Stmt::TmaStore(_)
            | Stmt::TmaStoreWait { .. } => "a barrier",
            Stmt::MbarInit { .. } => "a barrier initialization (a block barrier)",
            Stmt::ClusterSync => "a cluster barrier",
            Stmt::MbarWait { elected: true, .. } if !self.producer => {
                "an elected mbarrier wait outside a producer body (its thread may wait for a release another \
                 warpgroup makes after its own turn)"
            }
            Stmt::InTurn { .. } => "a nested `in_turn`",
            _ => return Ok(()),
        };
        Err(self.err(
            IrErrorKind::Scope,
            format!(
                "{what} inside an `in_turn` body: the warpgroup holding the turn would wait for one waiting for \
                 the turn"
            ),
        ))
    }

    /// Inside a [`Stmt::FirstWarpgroups`] body: only what a warpgroup runs on its own (the other warpgroups skip
    /// the body, so nothing may wait for them or spread its work over them).
    fn first_wgs_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let ok = matches!(
            s,
            Stmt::Let { .. }
                | Stmt::Assign { .. }
                | Stmt::For { .. }
                | Stmt::If { .. }
                | Stmt::Map { .. }
                | Stmt::VecMap { .. }
                | Stmt::Reduce { .. }
                | Stmt::Mma { .. }
                | Stmt::MmaAsync { .. }
                | Stmt::MmaWait { .. }
                | Stmt::Load { .. }
                | Stmt::Store { .. }
                | Stmt::LoadVec { .. }
                | Stmt::StoreVec { .. }
                | Stmt::StoreCols { .. }
        );
        if ok {
            return Ok(());
        }
        let (name, _) = Self::placement(s);
        Err(self.err(
            IrErrorKind::Scope,
            format!(
                "`{name}` inside a `first_warpgroups` body: the other warpgroups skip the body, so it holds scalar \
                 control and tile statements a warpgroup runs on its own (no barriers, copies, threads regions or \
                 nested turns)"
            ),
        ))
    }

    /// Producer-warp kernels: what may appear inside and outside [`Stmt::Producer`] bodies.
    fn producer_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let elected =
            matches!(s, Stmt::TmaLoad(_) | Stmt::MbarArriveExpectTx { .. } | Stmt::MbarWait { elected: true, .. });
        let control = matches!(s, Stmt::Let { .. } | Stmt::Assign { .. } | Stmt::For { .. } | Stmt::If { .. });
        if self.producer && !(elected || control) {
            let (name, _) = Self::placement(s);
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "`{name}` inside a `producer` body: the producer warp runs scalar control, elected mbarrier \
                     waits, expect_tx arrivals and TMA copies only"
                ),
            ));
        }
        if !self.producer && elected {
            let (name, _) = Self::placement(s);
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "`{name}` outside a `producer` body of a producer-warp kernel: its elected thread is the \
                     producer warp's, so it belongs in a `producer` body"
                ),
            ));
        }
        Ok(())
    }

    fn stmt_inner(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s {
            Stmt::FirstWarpgroups { count, body } => {
                let t = self.k.threads;
                if self.k.producer_warp || !t.is_multiple_of(128) || *count == 0 || 128 * count >= t {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "`first_warpgroups` of {count} needs at least {} whole warpgroups (threads a multiple of \
                             128) and no producer warp; the kernel has {t} threads{}",
                            count + 1,
                            if self.k.producer_warp { " and a producer warp" } else { "" }
                        ),
                    ));
                }
                // Products the body starts complete inside it: a `mma_wait(0)` at its top level after the last
                // statement that starts one (ptxas 13.0 serializes every wgmma of a kernel whose products stay in
                // flight across such a branch, its note C7518).
                let starts = |t: &Stmt| {
                    let mut any = false;
                    t.visit(&mut |u| any |= matches!(u, Stmt::MmaAsync { .. }));
                    any
                };
                if let Some(last) = body.iter().rposition(starts)
                    && !body[last..].iter().any(|t| matches!(t, Stmt::MmaWait { pending: 0 }))
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        "a `first_warpgroups` body leaves `mma_async` products in flight: wait for them inside it \
                         (`mma_wait(0)` after the last; ptxas serializes every wgmma of a kernel whose products stay \
                         in flight across the branch)",
                    ));
                }
                self.path.push(format!("first {count} warpgroups"));
                self.first_wgs = Some((*count, self.scopes.len()));
                self.scopes.push(Scope::default());
                let r = self.body(body);
                self.scopes.pop();
                self.first_wgs = None;
                self.path.pop();
                r?;
            }
            Stmt::InTurn { body } => {
                let t = self.k.threads;
                if !t.is_multiple_of(128) || t < 256 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "`in_turn` needs at least two whole consumer warpgroups (threads a multiple of 128, \
                             at least 256; the kernel has {t})"
                        ),
                    ));
                }
                self.path.push("in_turn".into());
                self.in_turn = true;
                self.scopes.push(Scope::default());
                let r = self.body(body);
                self.scopes.pop();
                self.in_turn = false;
                self.path.pop();
                r?;
            }
            Stmt::Producer { body } => {
                self.path.push("producer".into());
                self.producer = true;
                self.scopes.push(Scope::default());
                let r = self.body(body);
                self.scopes.pop();
                self.producer = false;
                self.path.pop();
                r?;
            }
            Stmt::Let { var, value } => {
                if var.0 as usize >= self.k.vars.len() {
                    return Err(self.err(IrErrorKind::Scope, format!("no variable #{}", var.0)));
                }
                let t = self.ty(value, Ctx::Scalar { allow_special: true })?;
                self.introduce(*var, t, "variable")?;
            }
            Stmt::Assign { var, value } => {
                let want = self.var_ty(*var).ok_or_else(|| {
                    self.err(IrErrorKind::Scope, format!("assignment to variable #{} out of scope", var.0))
                })?;
                if let (Some((_, base)), Some(at)) = (self.first_wgs, self.var_scope(*var))
                    && at < base
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "variable `{}` is introduced outside the `first_warpgroups` body: the warpgroups that skip \
                             the body would keep its old value (introduce a variable inside, or write through shared \
                             memory)",
                            self.var_name(*var)
                        ),
                    ));
                }
                if let (Some(base), Some(at)) = (self.region, self.var_scope(*var))
                    && at < base
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "variable `{}` is introduced outside the threads region: assigning it inside would give \
                             every thread its own value of a block-level variable (introduce a per-thread variable, \
                             or write through shared memory)",
                            self.var_name(*var)
                        ),
                    ));
                }
                self.scalar(value, want, "assigned value")?;
            }
            Stmt::For { var, start, end, step, body, .. } => {
                self.path.push(format!("for `{}`", self.k.vars.get(var.0 as usize).map_or("?", |v| &v.name)));
                for (e, what) in [(start, "loop start"), (end, "loop end"), (step, "loop step")] {
                    self.scalar(e, ScalarTy::Int, what)?;
                }
                if let Some(st) = step.as_const_int()
                    && st <= 0
                {
                    return Err(self.err(IrErrorKind::Shape, "loop step must be positive"));
                }
                if var.0 as usize >= self.k.vars.len()
                    || self.var_types[var.0 as usize].replace(ScalarTy::Int).is_some()
                {
                    return Err(self.err(IrErrorKind::Scope, format!("loop variable #{} is missing or reused", var.0)));
                }
                self.scopes.push(Scope::with_var(*var, ScalarTy::Int));
                self.body(body)?;
                self.scopes.pop();
                self.path.pop();
            }
            Stmt::If { cond, then_body, else_body } => {
                self.scalar(cond, ScalarTy::Bool, "if condition")?;
                self.path.push("then".into());
                self.scopes.push(Scope::default());
                self.body(then_body)?;
                self.scopes.pop();
                self.path.pop();
                self.path.push("else".into());
                self.scopes.push(Scope::default());
                self.body(else_body)?;
                self.scopes.pop();
                self.path.pop();
            }
            Stmt::WarpShuffle { .. } | Stmt::WarpSync => {
                let top = self.region.is_some_and(|base| self.scopes.len() == base + 1);
                if !top {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        "warp shuffles and syncwarp must be at the top level of a threads region (every lane of \
                         every warp runs them), not inside its loops or conditionals",
                    ));
                }
                if let Stmt::WarpShuffle { var, op, value } = s {
                    let t = self.ty(value, Ctx::Scalar { allow_special: true })?;
                    let bad_lane = match *op {
                        WarpOp::ShflXor(m) => !(1..=31).contains(&m),
                        WarpOp::ShflIdx(l) => l > 31,
                        WarpOp::ShflUp(d) => !(1..=31).contains(&d),
                        WarpOp::Ballot => false,
                    };
                    if bad_lane {
                        return Err(
                            self.err(IrErrorKind::Shape, format!("warp {}: lane operand out of range", op.name()))
                        );
                    }
                    let out = match (op, t) {
                        (WarpOp::Ballot, ScalarTy::Bool) => ScalarTy::Int,
                        (WarpOp::Ballot, _) => {
                            return Err(self.err(IrErrorKind::Type, "warp ballot takes a bool value"));
                        }
                        (_, ScalarTy::Bool) => {
                            return Err(self.err(IrErrorKind::Type, "warp shuffles take an int or float value"));
                        }
                        (_, t) => t,
                    };
                    self.introduce(*var, out, "variable")?;
                }
            }
            Stmt::Threads { body } => {
                self.path.push("threads".into());
                self.region = Some(self.scopes.len());
                self.scopes.push(Scope::default());
                self.body(body)?;
                self.scopes.pop();
                self.region = None;
                self.path.pop();
            }
            Stmt::StoreScalar { tensor, index, value } => {
                let t = self
                    .k
                    .tensors
                    .get(tensor.0 as usize)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", tensor.0)))?;
                if t.access == Access::Read {
                    return Err(self.err(IrErrorKind::Type, format!("tensor `{}` is read-only", t.name)));
                }
                let want = self.scalar_storage(t.dtype, &format!("tensor `{}`", t.name))?;
                self.scalar(index, ScalarTy::Int, "store index")?;
                self.scalar(value, want, "stored value")?;
            }
            Stmt::SharedStore { buf, index, row, col, value } => {
                let d = self.shared(*buf)?;
                let want = self.scalar_storage(d.dtype, &format!("shared `{}`", d.name))?;
                for (e, what) in
                    [(index, "shared store tile index"), (row, "shared store row"), (col, "shared store col")]
                {
                    self.scalar(e, ScalarTy::Int, what)?;
                }
                self.shared_coords(d, index, row, col)?;
                self.scalar(value, want, "stored value")?;
            }
            Stmt::Atomic { target, op: _, value, fetch } => {
                let (dtype, what) = match target {
                    AtomicTarget::Global { tensor, index } => {
                        let t = self
                            .k
                            .tensors
                            .get(tensor.0 as usize)
                            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", tensor.0)))?;
                        if t.access == Access::Read {
                            return Err(self.err(IrErrorKind::Type, format!("tensor `{}` is read-only", t.name)));
                        }
                        self.scalar(index, ScalarTy::Int, "atomic index")?;
                        (t.dtype, format!("tensor `{}`", t.name))
                    }
                    AtomicTarget::Shared { buf, index, row, col } => {
                        let d = self.shared(*buf)?;
                        for (e, what) in [(index, "atomic tile index"), (row, "atomic row"), (col, "atomic col")] {
                            self.scalar(e, ScalarTy::Int, what)?;
                        }
                        self.shared_coords(d, index, row, col)?;
                        (d.dtype, format!("shared `{}`", d.name))
                    }
                };
                if !matches!(dtype, DType::I32 | DType::U32 | DType::I64 | DType::U64 | DType::F32) {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("atomics update i32, u32, i64, u64 or f32 storage; {what} is {dtype}"),
                    ));
                }
                let want = ScalarTy::of_dtype(dtype);
                self.scalar(value, want, "atomic operand")?;
                if let Some(v) = fetch {
                    self.introduce(*v, want, "atomic result variable")?;
                }
            }
            Stmt::LetArray { arr, len, ty, init } => {
                if arr.0 as usize >= self.k.arrays.len() {
                    return Err(self.err(IrErrorKind::Scope, format!("no array #{}", arr.0)));
                }
                if std::mem::replace(&mut self.array_seen[arr.0 as usize], true) {
                    return Err(self.err(IrErrorKind::Scope, format!("array #{} is introduced twice", arr.0)));
                }
                if *len == 0 || *len > MAX_ARRAY_LEN {
                    return Err(
                        self.err(IrErrorKind::Resource, format!("array length {len} must be in 1..={MAX_ARRAY_LEN}"))
                    );
                }
                self.scalar(init, *ty, "array initial value")?;
                self.scopes.last_mut().unwrap().arrays.insert(*arr, (*ty, *len));
            }
            Stmt::ArraySet { arr, index, value } => {
                let (t, len) = self.array(*arr)?;
                self.scalar(index, ScalarTy::Int, "array index")?;
                self.array_index(*arr, index, len)?;
                self.scalar(value, t, "array element")?;
            }
            Stmt::LoadWide { arr, at, tensor, index, lanes } | Stmt::StoreWide { tensor, index, arr, at, lanes } => {
                let store = matches!(s, Stmt::StoreWide { .. });
                self.wide(*arr, *at, *tensor, index, *lanes, store)?;
            }
            Stmt::Scan { tile, scratch, op: _ } => {
                let t = self.tile(*tile)?;
                let d = self.shared(*scratch)?;
                self.path.push(format!("scan `{}`", t.name));
                if t.dtype != DType::F32 {
                    return Err(
                        self.err(IrErrorKind::Type, format!("scans run on f32 tiles, `{}` is {}", t.name, t.dtype))
                    );
                }
                if d.dtype != DType::F32 || d.rows < t.rows || d.cols < t.cols {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "scan scratch `{}` ({} {}x{}) must be f32 and at least {}x{}",
                            d.name, d.dtype, d.rows, d.cols, t.rows, t.cols
                        ),
                    ));
                }
                self.path.pop();
            }
            Stmt::Barrier | Stmt::AsyncCommit | Stmt::AsyncWait { .. } | Stmt::Fence => {}
            Stmt::DequantFp4 { tile, words, scales, packed, .. } => {
                let t = self.tile(*tile)?;
                self.path.push(format!("dequant_fp4 `{}`", t.name));
                let wc = t.cols / t.warps[1].max(1);
                if t.dtype != DType::Bf16 || !t.cols.is_multiple_of(32) || !wc.is_multiple_of(32) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4 decodes into a bf16 tile whose columns and per-warp column band are \
                             multiples of 32; `{}` is {} {}x{} on {:?} warps",
                            t.name, t.dtype, t.rows, t.cols, t.warps
                        ),
                    ));
                }
                let dq = self.shared_ref(words)?;
                let ds = self.shared_ref(scales)?;
                if dq.dtype != DType::U32 || words.rows != t.rows || words.cols != t.cols / 8 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "dequant_fp4 words: a u32 window of {}x{} is needed, got shared `{}` ({}) {}x{}",
                            t.rows,
                            t.cols / 8,
                            dq.name,
                            dq.dtype,
                            words.rows,
                            words.cols
                        ),
                    ));
                }
                // The natural layout reads a block's four words as one 16-byte access.
                if !*packed && (!words.col0.is_multiple_of(4) || !dq.row_bytes().is_multiple_of(16)) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4 (natural layout) reads 16-byte blocks: shared `{}` rows of {} bytes and \
                             window col0 = {} must be multiples of 16 bytes",
                            dq.name,
                            dq.row_bytes(),
                            words.col0
                        ),
                    ));
                }
                if ds.dtype != DType::U8 || scales.rows != t.rows || scales.cols != t.cols / 32 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "dequant_fp4 scales: a u8 window of {}x{} is needed, got shared `{}` ({}) {}x{}",
                            t.rows,
                            t.cols / 32,
                            ds.name,
                            ds.dtype,
                            scales.rows,
                            scales.cols
                        ),
                    ));
                }
                self.path.pop();
            }
            Stmt::DequantFp4Stream { tile, words, scales, prefetch, .. } => {
                let t = self.tile(*tile)?;
                self.path.push(format!("dequant_fp4_stream `{}`", t.name));
                let wc = t.cols / t.warps[1].max(1);
                if t.dtype != DType::Bf16 || !t.cols.is_multiple_of(32) || !wc.is_multiple_of(32) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4_stream decodes into a bf16 tile whose columns and per-warp column band \
                             are multiples of 32; `{}` is {} {}x{} on {:?} warps",
                            t.name, t.dtype, t.rows, t.cols, t.warps
                        ),
                    ));
                }
                let mut views = vec![(words, scales, "")];
                if let Some(p) = prefetch {
                    self.scalar(&p.first, ScalarTy::Bool, "dequant_fp4_stream prefetch first flag")?;
                    views.push((&p.words, &p.scales, "prefetch "));
                }
                for (words, scales, what) in views {
                    let q = self.global_view(words)?;
                    if q.dtype != DType::U32 || words.vec != 4 {
                        return Err(self.err(
                            IrErrorKind::Type,
                            format!(
                                "dequant_fp4_stream {what}words: a u32 view with vec = 4 (one 16-byte block per \
                                 access) is needed, got `{}` ({}) vec {}",
                                q.name, q.dtype, words.vec
                            ),
                        ));
                    }
                    let sc = self.global_view(scales)?;
                    if sc.dtype != DType::U8 {
                        return Err(self.err(
                            IrErrorKind::Type,
                            format!(
                                "dequant_fp4_stream {what}scales: a u8 view is needed, got `{}` ({})",
                                sc.name, sc.dtype
                            ),
                        ));
                    }
                }
                self.path.pop();
            }
            Stmt::Fp4Gemv { out, scratch, words, scales, x, chunk, ring, staged, .. } => {
                self.path.push("fp4_gemv".to_string());
                let o = self.shared_ref(out)?;
                let sc = self.shared(*scratch)?;
                let warps = self.k.threads / 32;
                let bad = |what: String| Err(self.err(IrErrorKind::Layout, what));
                if o.dtype != DType::F32 || !out.rows.is_multiple_of(16) || out.rows == 0 || !matches!(out.cols, 8 | 16)
                {
                    return bad(format!(
                        "fp4_gemv out: an f32 window of R x T rows (R a multiple of 16, T 8 or 16), got `{}` ({}) {}x{}",
                        o.name, o.dtype, out.rows, out.cols
                    ));
                }
                if sc.dtype != DType::F32
                    || sc.rows * sc.cols < out.rows * out.cols
                    || sc.count < warps
                    || sc.alias.is_some()
                {
                    return bad(format!(
                        "fp4_gemv scratch: an unaliased f32 buffer of at least {} elements per tile and {warps} tiles (one per \
                         warp), got `{}` ({}) {}x{} x{}",
                        out.rows * out.cols,
                        sc.name,
                        sc.dtype,
                        sc.rows,
                        sc.cols,
                        sc.count
                    ));
                }
                if *scratch == out.buf {
                    return bad("fp4_gemv: scratch and out must be different buffers".into());
                }
                if *staged {
                    let tile = sc.rows as u64 * sc.cols as u64 * 4;
                    let have = (sc.count as u64).saturating_sub(warps as u64) * tile;
                    let need = 16 + warps as u64 * *ring as u64 * (out.rows as u64 / 16) * 1280;
                    if have < need {
                        return bad(format!(
                            "fp4_gemv staged: scratch `{}` needs {need} bytes past its first {warps} tiles for {ring} \
                             stages, has {have}",
                            sc.name
                        ));
                    }
                }
                if !matches!(chunk, 1 | 2 | 4 | 8) || !(1..=8).contains(ring) || !self.k.threads.is_multiple_of(32) {
                    return bad(format!(
                        "fp4_gemv: chunk {chunk} (1, 2, 4 or 8) and ring {ring} (1..=8) on whole warps"
                    ));
                }
                let q = self.global_view(words)?;
                if q.dtype != DType::U32 || words.vec != 4 {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!(
                            "fp4_gemv words: a u32 view with vec = 4, got `{}` ({}) vec {}",
                            q.name, q.dtype, words.vec
                        ),
                    ));
                }
                let s8 = self.global_view(scales)?;
                if s8.dtype != DType::U8 {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("fp4_gemv scales: a u8 view is needed, got `{}` ({})", s8.name, s8.dtype),
                    ));
                }
                let xv = self.global_view(x)?;
                if xv.dtype != DType::Bf16 || x.vec != 8 {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("fp4_gemv x: a bf16 view with vec = 8, got `{}` ({}) vec {}", xv.name, xv.dtype, x.vec),
                    ));
                }
                self.path.pop();
            }
            Stmt::Map { tile, value } => {
                let t = self.tile(*tile)?;
                self.path.push(format!("map `{}`", t.name));
                let want = if t.dtype == DType::I32 { ScalarTy::Int } else { ScalarTy::Float };
                self.expect(value, Ctx::Elem { tile: t }, want, "mapped value")?;
                self.path.pop();
            }
            Stmt::VecMap { vec, value } => {
                let v = self.vec(*vec)?;
                self.path.push(format!("vec_map `{}`", v.name));
                self.expect(value, Ctx::Row { vec: v }, ScalarTy::Float, "row value")?;
                self.path.pop();
            }
            Stmt::Reduce { vec, tile, .. } => {
                let (v, t) = (self.vec(*vec)?, self.tile(*tile)?);
                if t.warps[1] != 1 {
                    return Err(
                        self.err(IrErrorKind::Layout, format!("row reduction of `{}` needs warps[1] = 1", t.name))
                    );
                }
                if v.rows != t.rows || v.warps != t.warps {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!("vector `{}` must match tile `{}` rows and warps", v.name, t.name),
                    ));
                }
                if t.dtype == DType::I32 {
                    return Err(self.err(IrErrorKind::Type, "row reductions are over float tiles"));
                }
            }
            Stmt::Mma { acc, a, b } => self.mma(*acc, a, b)?,
            Stmt::MmaAsync { acc, a, b, accumulate } => {
                self.scalar(accumulate, ScalarTy::Bool, "mma_async accumulate flag")?;
                self.mma_async(*acc, a, b)?
            }
            Stmt::MbarInit { bar, count } => {
                let m = self
                    .k
                    .mbarriers
                    .get(bar.0 as usize)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no mbarrier declaration #{}", bar.0)))?;
                if *count == 0 || *count >= 1 << 20 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!("mbarrier `{}`: arrival count {count} outside 1..2^20", m.name),
                    ));
                }
            }
            Stmt::MbarArriveExpectTx { bar, bytes } => {
                self.mbar_ref(bar)?;
                if *bytes >= 1 << 20 {
                    return Err(self.err(IrErrorKind::Shape, format!("expect_tx of {bytes} bytes: at most 2^20 - 1")));
                }
            }
            Stmt::MbarArrive { bar } => self.mbar_ref(bar)?,
            Stmt::MbarWait { bar, parity, .. } => {
                self.mbar_ref(bar)?;
                self.scalar(parity, ScalarTy::Int, "mbarrier wait parity")?;
            }
            Stmt::TmaLoad(t) => {
                self.tma_load(t)?;
                if let Some(mask) = &t.multicast {
                    self.scalar(mask, ScalarTy::Int, "tma multicast mask")?;
                    self.cluster_mask(mask)?;
                }
            }
            Stmt::TmaStore(t) => self.tma_store(t)?,
            Stmt::TmaStoreWait { .. } => {}
            Stmt::StoreCols { tile, col0, dst } => {
                let t = self.tile(*tile)?;
                let d = self.shared_ref(dst)?;
                if dst.rows != t.rows
                    || !col0.is_multiple_of(8)
                    || !dst.cols.is_multiple_of(8)
                    || dst.cols == 0
                    || col0 + dst.cols > t.cols
                {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "columns {col0}..{} of tile `{}` ({}x{}) into a {}x{} shared window: the window needs the tile's rows, and the columns must lie inside the tile at multiples of 8",
                            col0 + dst.cols,
                            t.name,
                            t.rows,
                            t.cols,
                            dst.rows,
                            dst.cols
                        ),
                    ));
                }
                if (t.dtype == DType::I32) != d.dtype.is_int() {
                    return Err(self.err(IrErrorKind::Type, "int tiles move to and from int storage only"));
                }
            }
            Stmt::MbarArriveCluster { bar, cta } => {
                self.mbar_ref(bar)?;
                self.scalar(cta, ScalarTy::Int, "cluster CTA rank")?;
                let n = self.k.cluster_size() as i64;
                if let Some(c) = cta.as_const_int()
                    && (c < 0 || c >= n)
                {
                    return Err(self.err(IrErrorKind::Shape, format!("cluster CTA rank {c} outside 0..{n}")));
                }
            }
            Stmt::ClusterSync => {}
            Stmt::MmaWait { .. } => {}
            Stmt::CopyAsync { dst, src } => {
                let d = self.shared_ref(dst)?;
                let t = self.global_view(src)?;
                if t.dtype != d.dtype {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!(
                            "async copy from `{}` ({}) into shared `{}` ({}) cannot convert",
                            t.name, t.dtype, d.name, d.dtype
                        ),
                    ));
                }
                if dst.cols % src.vec != 0 || dst.col0 % src.vec != 0 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!("window cols {} not a multiple of vec {}", dst.cols, src.vec),
                    ));
                }
                // Every access lands on a multiple of its size only if the shared rows are.
                if d.dtype.storage_bytes(d.cols as usize) % d.dtype.storage_bytes(src.vec as usize) != 0 {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "shared `{}` rows ({} elements) are not a multiple of the copy's vec {}",
                            d.name, d.cols, src.vec
                        ),
                    ));
                }
            }
            Stmt::Load { tile, src: place } | Stmt::Store { tile, dst: place } => {
                let t = self.tile(*tile)?;
                match place {
                    Place::Shared(r) => {
                        let d = self.shared_ref(r)?;
                        if r.rows != t.rows || r.cols != t.cols {
                            return Err(self.err(
                                IrErrorKind::Shape,
                                format!(
                                    "tile `{}` is {}x{}, shared window is {}x{}",
                                    t.name, t.rows, t.cols, r.rows, r.cols
                                ),
                            ));
                        }
                        if (t.dtype == DType::I32) != d.dtype.is_int() {
                            return Err(self.err(IrErrorKind::Type, "int tiles move to and from int storage only"));
                        }
                    }
                    Place::Global(v) => {
                        let g = self.global_view(v)?;
                        if (t.dtype == DType::I32) != g.dtype.is_int() {
                            return Err(self.err(IrErrorKind::Type, "int tiles move to and from int tensors only"));
                        }
                        if matches!(s, Stmt::Store { .. }) && g.access == Access::Read {
                            return Err(self.err(IrErrorKind::Type, format!("tensor `{}` is read-only", g.name)));
                        }
                        // (A store's `vec` is the alignment of the view's offset and row stride; 16-bit stores
                        // with vec 4 or 8 regroup a quad's pairs into 8- or 16-byte accesses, others move pairs.)
                    }
                }
            }
            Stmt::LoadVec { vec, src: view } | Stmt::StoreVec { vec, dst: view } => {
                self.vec(*vec)?;
                let t = self
                    .k
                    .tensors
                    .get(view.tensor.0 as usize)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", view.tensor.0)))?;
                if !t.dtype.is_float() {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("row vectors move to and from float tensors, `{}` is {}", t.name, t.dtype),
                    ));
                }
                for (e, what) in [(&view.offset, "offset"), (&view.stride, "stride"), (&view.rows, "rows")] {
                    self.scalar(e, ScalarTy::Int, what)?;
                }
            }
        }
        Ok(())
    }

    /// The value type of a scalar store into `dtype` storage.
    fn scalar_storage(&self, dtype: DType, what: &str) -> Result<ScalarTy, IrError> {
        match dtype {
            DType::F32 | DType::Bf16 | DType::F16 | DType::E4m3 => Ok(ScalarTy::Float),
            DType::U8 | DType::I32 | DType::U32 | DType::I64 | DType::U64 => Ok(ScalarTy::Int),
            DType::E2m1 | DType::E8m0 => Err(self.err(
                IrErrorKind::Type,
                format!("{what}: scalar stores of {dtype} are not supported (compute the bits and view it as u8)"),
            )),
        }
    }

    /// Constant shared coordinates must be inside the buffer.
    fn shared_coords(&self, d: &SharedDecl, index: &Expr, row: &Expr, col: &Expr) -> Result<(), IrError> {
        for (e, n, what) in [(index, d.count, "tile index"), (row, d.rows, "row"), (col, d.cols, "col")] {
            if let Some(v) = e.as_const_int()
                && (v < 0 || v >= n as i64)
            {
                return Err(self.err(IrErrorKind::Shape, format!("shared `{}`: {what} {v} is outside 0..{n}", d.name)));
            }
        }
        Ok(())
    }

    /// A constant array index must be inside the array.
    /// A wide access ([`Stmt::LoadWide`] / [`Stmt::StoreWide`]): an 8- or 16-byte access of a supported dtype,
    /// an array of the tensor's expression type holding `at + lanes` elements, and an index not provably
    /// misaligned.
    fn wide(
        &mut self,
        arr: ArrId,
        at: u32,
        tensor: crate::expr::TensorId,
        index: &Expr,
        lanes: u32,
        store: bool,
    ) -> Result<(), IrError> {
        let t = self
            .k
            .tensors
            .get(tensor.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", tensor.0)))?;
        let what = if store { "wide store" } else { "wide load" };
        if store && t.access == Access::Read {
            return Err(self.err(IrErrorKind::Type, format!("{what}: tensor `{}` is read-only", t.name)));
        }
        if !matches!(
            t.dtype,
            DType::F32 | DType::Bf16 | DType::F16 | DType::U8 | DType::I32 | DType::U32 | DType::I64 | DType::U64
        ) {
            return Err(self.err(
                IrErrorKind::Type,
                format!(
                    "{what} of tensor `{}`: {} elements cannot move wide (f32, bf16, f16 or ints)",
                    t.name, t.dtype
                ),
            ));
        }
        let bytes = t.dtype.size_bytes() as u32 * lanes;
        if lanes == 0 || !matches!(bytes, 8 | 16) {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("{what} of tensor `{}`: {lanes} x {} is {bytes} bytes, not 8 or 16", t.name, t.dtype),
            ));
        }
        self.scalar(index, ScalarTy::Int, &format!("{what} index"))?;
        if let Some(r) = provable_residue(index, lanes as i64)
            && r != 0
        {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "{what} of tensor `{}`: index {} is {r} modulo {lanes} (misaligned: it must be a multiple of the \
                     {lanes} lanes)",
                    t.name,
                    crate::print::expr(self.k, index)
                ),
            ));
        }
        let (ty, len) = self.array(arr)?;
        let name = self.k.arrays.get(arr.0 as usize).map_or("?", |d| &d.name);
        if ty != ScalarTy::of_dtype(t.dtype) {
            return Err(self.err(
                IrErrorKind::Type,
                format!("{what}: array `{name}` holds {ty}, tensor `{}` is {}", t.name, t.dtype),
            ));
        }
        if at as u64 + lanes as u64 > len as u64 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("{what}: array `{name}` of {len} elements cannot hold elements {at}..{}", at + lanes),
            ));
        }
        Ok(())
    }

    fn array_index(&self, a: ArrId, index: &Expr, len: u32) -> Result<(), IrError> {
        if let Some(v) = index.as_const_int()
            && (v < 0 || v >= len as i64)
        {
            let name = self.k.arrays.get(a.0 as usize).map_or("?", |d| &d.name);
            return Err(self.err(IrErrorKind::Shape, format!("array `{name}` of {len} elements indexed at {v}")));
        }
        Ok(())
    }

    /// A shared mma operand is read with `ldmatrix`, 16-byte rows of 8 elements at a time: its rows and its
    /// first column must sit on 16-byte boundaries.
    fn mma_shared(&self, src: &SharedRef) -> Result<&'a SharedDecl, IrError> {
        let d = self.shared_ref(src)?;
        if !d.dtype.storage_bytes(d.cols as usize).is_multiple_of(16) || !src.col0.is_multiple_of(8) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma operand in shared `{}`: rows of {} bytes and window col0 = {} must be 16-byte aligned",
                    d.name,
                    d.dtype.storage_bytes(d.cols as usize),
                    src.col0
                ),
            ));
        }
        Ok(d)
    }

    /// A `wgmma` operand: a K-major window of 128-byte swizzled rows, starting on an 8-row atom at column 0.
    /// A shared `wgmma` operand: Xor16B-swizzled 128-byte rows, the window at column 0 on a multiple of 8 rows.
    fn wgmma_shared(&self, src: &SharedRef, which: &str) -> Result<DType, IrError> {
        let d = self.shared_ref(src)?;
        if !d.is_swizzle_128b() || !d.rows.is_multiple_of(8) || src.col0 != 0 || !src.row0.is_multiple_of(8) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma_async: the {which} operand's shared `{}` must have Xor16B-swizzled 128-byte rows ({} bytes \
                     here), a multiple of 8 rows, and the window must start at column 0 on a multiple of 8 rows \
                     (row0 {}, col0 {})",
                    d.name,
                    d.row_bytes(),
                    src.row0,
                    src.col0
                ),
            ));
        }
        Ok(d.dtype)
    }

    fn mma_async(&self, acc: TileId, a: &Operand, b: &Operand) -> Result<(), IrError> {
        let c = self.tile(acc)?;
        if c.dtype != DType::F32 {
            return Err(self.err(IrErrorKind::Type, format!("mma_async accumulator `{}` must be f32", c.name)));
        }
        // Warps [4g, 1]: g warpgroups of 64 rows, replicated over the block's other warpgroups (each replica
        // computes the same product). Warps [4g, 2] (column bands, all warps of the block): warpgroup g * j + i
        // computes row band i, column band j, reading the same columns of an N-contiguous B.
        let groups = c.warps[0] / 4;
        let banded = c.warps[1] > 1;
        let warps_ok = if banded {
            c.warps[1] == 2 && c.warps[0] * 2 == self.k.warps()
        } else {
            c.warps[1] == 1 && self.k.warps().is_multiple_of(c.warps[0])
        };
        if groups == 0 || !c.warps[0].is_multiple_of(4) || !warps_ok || c.rows != 64 * groups {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma_async accumulator `{}` ({}x{} on warps {:?}) must have 64 rows per warpgroup on warps [4*g, 1] \
                     (replicated over the block's {} warps) or [4*g, 2] using all of them",
                    c.name,
                    c.rows,
                    c.cols,
                    c.warps,
                    self.k.warps()
                ),
            ));
        }
        let n = c.cols / c.warps[1];
        if n > 256 || !n.is_multiple_of(8) || !c.cols.is_multiple_of(c.warps[1]) {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("mma_async: N = {n} per warpgroup must be a multiple of 8 up to 256"),
            ));
        }
        if banded && !matches!(b, Operand::Shared { transpose: false, .. }) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma_async accumulator `{}` on column bands needs a B operand stored [K, N] (N-contiguous)",
                    c.name
                ),
            ));
        }
        // A: a K-contiguous shared window [M, K] (K <= 64, one swizzled row), or a 16-bit register tile on the
        // accumulator's warps (its m16n8 pairs are the register A fragments of m64nNk16).
        let (am, ak, adt, a_kmax) = match a {
            Operand::Shared { src, transpose: false } => {
                let dt = self.wgmma_shared(src, "A")?;
                (src.rows, src.cols, dt, 64)
            }
            Operand::Reg(t) => {
                let t = self.tile(*t)?;
                if t.warps != [c.warps[0], 1] {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "mma_async: register A operand `{}` must use warps [{}, 1] (the accumulator's row bands)",
                            t.name, c.warps[0]
                        ),
                    ));
                }
                (t.rows, t.cols, t.dtype, u32::MAX)
            }
            _ => {
                return Err(self.err(
                    IrErrorKind::Layout,
                    "mma_async: the A operand is a register tile or a shared window stored K-contiguous as [M, K]",
                ));
            }
        };
        // B: stored [N, K] (K-contiguous, read transposed; K <= 64) or [K, N] (N-contiguous, N = 64: one
        // swizzled row, the wgmma transpose mode; K any multiple of 16).
        let (bn, bk, bdt, b_kmax) = match b {
            Operand::Shared { src, transpose: true } => {
                let dt = self.wgmma_shared(src, "B")?;
                (src.rows, src.cols, dt, 64)
            }
            Operand::Shared { src, transpose: false } => {
                let dt = self.wgmma_shared(src, "B")?;
                if src.cols != 64 || !src.rows.is_multiple_of(16) {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "mma_async: a B operand stored [K, N] must be N = 64 columns by a multiple of 16 rows \
                             ({}x{} here)",
                            src.rows, src.cols
                        ),
                    ));
                }
                (src.cols, src.rows, dt, u32::MAX)
            }
            _ => {
                return Err(self
                    .err(IrErrorKind::Layout, "mma_async: the B operand must be a shared window ([N, K] or [K, N])"));
            }
        };
        if !matches!(adt, DType::Bf16 | DType::F16) || adt != bdt {
            return Err(self.err(
                IrErrorKind::Type,
                format!("mma_async operands must both be bf16 or both f16, got {adt} and {bdt}"),
            ));
        }
        if am != c.rows || bn != c.cols || ak != bk || !ak.is_multiple_of(16) || ak > a_kmax.min(b_kmax) {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "mma_async shapes: acc {}x{}, a {am}x{ak}, b {bk}x{bn} (K must match and be a multiple of 16, at \
                     most 64 for a K-contiguous shared operand)",
                    c.rows, c.cols
                ),
            ));
        }
        Ok(())
    }

    fn mma(&self, acc: TileId, a: &Operand, b: &Operand) -> Result<(), IrError> {
        let c = self.tile(acc)?;
        if c.dtype != DType::F32 {
            return Err(self.err(IrErrorKind::Type, format!("mma accumulator `{}` must be f32", c.name)));
        }
        if (c.cols / c.warps[1]) % 16 != 0 {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma accumulator `{}`: each warp's column band ({}) must be a multiple of 16",
                    c.name,
                    c.cols / c.warps[1]
                ),
            ));
        }
        // Logical [rows, cols] of each operand and its element type.
        let (am, ak, adt) = match a {
            Operand::Reg(t) => {
                let t = self.tile(*t)?;
                if t.warps != [c.warps[0], 1] {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "register A operand `{}` must use warps [{}, 1] to match the accumulator's row bands",
                            t.name, c.warps[0]
                        ),
                    ));
                }
                (t.rows, t.cols, t.dtype)
            }
            Operand::Shared { src, transpose } => {
                let d = self.mma_shared(src)?;
                if *transpose { (src.cols, src.rows, d.dtype) } else { (src.rows, src.cols, d.dtype) }
            }
            Operand::Banded { .. } => {
                return Err(self.err(IrErrorKind::Layout, "a banded operand can only be the B operand"));
            }
        };
        let (bk, bn, bdt) = match b {
            Operand::Reg(_) => return Err(self.err(IrErrorKind::Layout, "the B operand must come from shared memory")),
            Operand::Shared { src, transpose } => {
                let d = self.mma_shared(src)?;
                if *transpose { (src.cols, src.rows, d.dtype) } else { (src.rows, src.cols, d.dtype) }
            }
            Operand::Banded { src, transpose } => {
                let d = self.mma_shared(src)?;
                let last = src.row0 + c.warps[0] * src.rows;
                if last > d.rows {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "banded operand: {} row bands of {} rows from row {} end at row {last}, outside shared `{}` ({} rows)",
                            c.warps[0], src.rows, src.row0, d.name, d.rows
                        ),
                    ));
                }
                if *transpose { (src.cols, src.rows, d.dtype) } else { (src.rows, src.cols, d.dtype) }
            }
        };
        if !matches!(adt, DType::Bf16 | DType::F16) || adt != bdt {
            return Err(
                self.err(IrErrorKind::Type, format!("mma operands must both be bf16 or both f16, got {adt} and {bdt}"))
            );
        }
        if am != c.rows || bn != c.cols || ak != bk || ak % 16 != 0 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "mma shapes: acc {}x{}, a {am}x{ak}, b {bk}x{bn} (K must match and be a multiple of 16)",
                    c.rows, c.cols
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{KernelBuilder, view};
    use crate::expr::TensorId;

    fn small() -> KernelBuilder {
        let mut b = KernelBuilder::new("t", 128);
        let m = b.dim("M");
        b.tensor("x", DType::F32, &[m], Access::Read);
        b
    }

    #[test]
    fn mma_async_accumulator_layouts() {
        // A 256-thread block (two warpgroups) multiplying a [64, 64] register A by a [64 keys, 64 cols] B stored
        // [K, N] into an accumulator on `acc_warps`; `transpose` reads B as [N, K] instead.
        let build = |acc_warps: [u32; 2], a_warps: [u32; 2], transpose: bool| {
            let mut b = KernelBuilder::new("w", 256);
            let sh = b.shared("v", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
            let p = b.tile("p", DType::Bf16, 64, 64, a_warps);
            let acc = b.tile("acc", DType::F32, 64, 64, acc_warps);
            b.map(p, 1.0f64);
            let src = b.slot(sh, 0i64);
            b.mma_async(acc, Operand::Reg(p), Operand::Shared { src, transpose });
            b.mma_wait(0);
            b.finish().map(|_| ()).map_err(|e| e.msg)
        };
        // Replicated over the second warpgroup, and split by columns over both (32 columns each).
        build([4, 1], [4, 1], false).unwrap();
        build([4, 1], [4, 1], true).unwrap();
        build([4, 2], [4, 1], false).unwrap();
        // Column bands read a [K, N] B only; the register A keeps the row bands [4, 1]; bands use every warp.
        assert!(build([4, 2], [4, 1], true).unwrap_err().contains("N-contiguous"));
        assert!(build([4, 2], [4, 2], false).unwrap_err().contains("warps [4, 1]"));
        let e = build([2, 2], [2, 1], false).unwrap_err();
        assert!(e.contains("64 rows per warpgroup"), "{e}");
    }

    #[test]
    fn producer_rules() {
        // A producer-warp kernel whose producer body assigns a variable the skeleton declared.
        let build = |threads: u32, warp: bool, f: &dyn Fn(&mut KernelBuilder, VarId, SharedId, TensorId)| {
            let mut b = KernelBuilder::new("p", threads);
            let m = b.dim("M");
            let x = b.tensor("x", DType::F32, std::slice::from_ref(&m), Access::Read);
            let y = b.tensor("y", DType::F32, &[m], Access::Write);
            let sh = b.shared("s", DType::F32, 16, 16, 1, Swizzle::None);
            if warp {
                b.producer_warp();
            }
            let v = b.let_var("cursor", Expr::load(x, 0i64).to_int());
            f(&mut b, v, sh, y);
            b.finish()
        };
        let ok = |b: &mut KernelBuilder, v: VarId, _: SharedId, _: TensorId| {
            b.for_("i", 0i64, 4i64, 1i64, |b, i| b.producer(|b| b.assign(v, Expr::Var(v) + i)));
        };
        let k = build(128, true, &ok).unwrap();
        assert_eq!(k.launch_threads(), 128 + PRODUCER_THREADS);
        let kind = |r: Result<Kernel, IrError>| r.map(|_| ()).map_err(|e| (e.kind, e.msg));
        // Without a producer warp, or consumer threads that are not whole warpgroups.
        let e = kind(build(128, false, &ok)).unwrap_err();
        assert!(e.1.contains("needs a producer-warp kernel"), "{e:?}");
        let e = kind(build(64, true, &ok)).unwrap_err();
        assert!(e.0 == IrErrorKind::Resource && e.1.contains("whole warpgroups"), "{e:?}");
        let e = kind(build(1024, true, &ok)).unwrap_err();
        assert!(e.1.contains("exceed 1024"), "{e:?}");
        // Tile statements inside a producer body; a producer-owned variable read by the skeleton.
        let e = kind(build(128, true, &|b, _, sh, _| {
            let t = b.tile("t", DType::F32, 16, 16, [1, 1]);
            let r = b.slot(sh, 0i64);
            b.producer(|b| b.load(t, Place::Shared(r)));
        }))
        .unwrap_err();
        assert!(e.1.contains("inside a `producer` body"), "{e:?}");
        let e = kind(build(128, true, &|b, v, _, _| {
            b.producer(|b| b.assign(v, 1i64));
            b.if_(Expr::Var(v).gt(0i64), |_| {});
        }))
        .unwrap_err();
        assert!(e.1.contains("assigned by the producer warp"), "{e:?}");
        // The skeleton both roles run reads no shared memory and no tensor the kernel writes.
        let e = kind(build(128, true, &|b, _, sh, _| {
            b.let_var("s0", Expr::shared_load(sh, 0i64, 0i64, 0i64));
        }))
        .unwrap_err();
        assert!(e.1.contains("block-level control of a producer-warp kernel"), "{e:?}");
        let e = kind(build(128, true, &|b, _, _, y| {
            b.let_var("y0", Expr::load(y, 0i64));
        }))
        .unwrap_err();
        assert!(e.1.contains("which the kernel writes"), "{e:?}");
    }

    #[test]
    fn in_turn_rules() {
        // A kernel of `threads` consumer threads whose body `f` builds around a turn.
        let build = |threads: u32, f: &dyn Fn(&mut KernelBuilder, SharedId)| {
            let mut b = KernelBuilder::new("t", threads);
            let m = b.dim("M");
            let _y = b.tensor("y", DType::F32, &[m], Access::Write);
            let sh = b.shared("s", DType::F32, 16, 16, 1, Swizzle::None);
            f(&mut b, sh);
            b.finish()
        };
        let kind = |r: Result<Kernel, IrError>| r.map(|_| ()).map_err(|e| (e.kind, e.msg));
        let ok = |b: &mut KernelBuilder, _: SharedId| {
            b.for_("i", 0i64, 4i64, 1i64, |b, i| {
                b.in_turn(|b| {
                    let j = b.let_("j", i + 1i64);
                    b.if_(j.gt(2i64), |_| {});
                })
            });
        };
        let k = build(256, &ok).unwrap();
        assert!(crate::print::kernel(&k).contains("in turn {"));
        // Turns need two whole warpgroups.
        for threads in [128, 192] {
            let e = kind(build(threads, &ok)).unwrap_err();
            assert!(e.0 == IrErrorKind::Shape && e.1.contains("at least two whole consumer warpgroups"), "{e:?}");
        }
        // Nothing inside that waits for the other warpgroup: barriers (also in a loop and a scan), nested turns,
        // an elected wait outside a producer body.
        let e = kind(build(256, &|b, _| b.in_turn(|b| b.for_("i", 0i64, 2i64, 1i64, |b, _| b.barrier())))).unwrap_err();
        assert!(e.1.contains("a barrier inside an `in_turn` body"), "{e:?}");
        let e = kind(build(256, &|b, sh| {
            let t = b.tile("t", DType::F32, 16, 16, [1, 1]);
            b.in_turn(|b| b.scan_rows(t, sh));
        }))
        .unwrap_err();
        assert!(e.1.contains("a barrier inside an `in_turn` body"), "{e:?}");
        let e = kind(build(256, &|b, _| b.in_turn(|b| b.in_turn(|_| {})))).unwrap_err();
        assert!(e.1.contains("a nested `in_turn`"), "{e:?}");
        let e = kind(build(256, &|b, _| {
            let bar = b.mbarriers("full", 1);
            b.mbar_init(bar, 1);
            b.in_turn(|b| b.mbar_wait_elected(bar, 0i64, 0i64));
        }))
        .unwrap_err();
        assert!(e.1.contains("an elected mbarrier wait outside a producer body"), "{e:?}");
        // Not inside a threads region.
        let e = kind(build(256, &|b, _| b.threads(|b| b.in_turn(|_| {})))).unwrap_err();
        assert!(e.0 == IrErrorKind::Scope && e.1.contains("`in_turn` is a block-level statement"), "{e:?}");
    }

    #[test]
    fn elected_warpgroup_rules() {
        let build = |threads: u32, w: u32, producer: bool| {
            let mut b = KernelBuilder::new("t", threads);
            b.elected_warpgroup(w);
            if producer {
                b.producer_warp();
            }
            b.finish().map(|k| crate::print::kernel(&k)).map_err(|e| e.msg)
        };
        assert!(build(256, 1, false).unwrap().contains("elected_warpgroup = 1"));
        assert!(!build(256, 0, false).unwrap().contains("elected_warpgroup"));
        for (threads, w, producer) in [(128, 1, false), (256, 2, false), (256, 1, true)] {
            let e = build(threads, w, producer).unwrap_err();
            assert!(e.contains("elected_warpgroup"), "{e}");
        }
    }

    #[test]
    fn first_warpgroups_rules() {
        // A kernel of `threads` threads with a [64, 16] tile `t` and row vector `v` on [4, 1] warps, a [64, 16]
        // tile `u` on [4, 2] warps and a shared buffer: `f` builds the body.
        type Body = dyn Fn(&mut KernelBuilder, [TileId; 2], VecId, SharedId);
        let build = |threads: u32, f: &Body| {
            let mut b = KernelBuilder::new("t", threads);
            let m = b.dim("M");
            let _y = b.tensor("y", DType::F32, &[m], Access::Write);
            let sh = b.shared("s", DType::F32, 64, 16, 1, Swizzle::None);
            let t = b.tile("t", DType::F32, 64, 16, [4, 1]);
            let u = b.tile("u", DType::F32, 64, 16, if threads == 256 { [4, 2] } else { [4, 1] });
            let v = b.vec("v", 64, [4, 1]);
            f(&mut b, [t, u], v, sh);
            b.finish()
        };
        let kind = |r: Result<Kernel, IrError>| r.map(|_| ()).map_err(|e| (e.kind, e.msg));
        // Warpgroup 0 computes `t` and its row sums and stores them; everyone reads the buffer after a barrier.
        fn ok(b: &mut KernelBuilder, [t, u]: [TileId; 2], v: VecId, sh: SharedId) {
            b.first_warpgroups(1, |b| {
                let x = b.let_("x", 2i64);
                b.for_("i", 0i64, 2i64, 1i64, |b, _| {
                    b.map(t, Expr::RowIdx.to_float() * x.clone().to_float());
                    b.reduce(v, t, ReduceOp::Sum, false);
                    b.map(t, Expr::RowVal(v));
                });
                let dst = b.slot(sh, 0i64);
                b.store(t, Place::Shared(dst));
            });
            b.barrier();
            b.map(u, Expr::shared_load(sh, 0i64, Expr::RowIdx, Expr::ColIdx));
        }
        let k = build(256, &ok).unwrap();
        assert!(crate::print::kernel(&k).contains("first 1 warpgroups {"));
        // At least one warpgroup more than the body's, whole warpgroups.
        let e = kind(build(128, &|b, [t, _], _, _| b.first_warpgroups(1, |b| b.map(t, 0.0f64)))).unwrap_err();
        assert!(e.0 == IrErrorKind::Shape && e.1.contains("needs at least 2 whole warpgroups"), "{e:?}");
        // A tile or vector of the body mentioned outside it (or in a body of another count).
        let e = kind(build(256, &|b, [t, u], v, sh| {
            ok(b, [t, u], v, sh);
            b.map(t, 0.0f64);
        }))
        .unwrap_err();
        assert!(e.0 == IrErrorKind::Scope && e.1.contains("tile `t` is mentioned inside"), "{e:?}");
        let e = kind(build(256, &|b, [t, u], v, sh| {
            ok(b, [t, u], v, sh);
            b.vec_map(v, 1.0f64);
        }))
        .unwrap_err();
        assert!(e.1.contains("vector `v` is mentioned inside a `first_warpgroups` body and outside"), "{e:?}");
        let e = kind(build(384, &|b, [t, _], _, _| {
            b.first_warpgroups(1, |b| b.map(t, 0.0f64));
            b.first_warpgroups(2, |b| b.map(t, 1.0f64));
        }))
        .unwrap_err();
        assert!(e.1.contains("in bodies of other counts"), "{e:?}");
        // A tile on more warps than the body runs.
        let e = kind(build(256, &|b, [_, u], _, _| b.first_warpgroups(1, |b| b.map(u, 0.0f64)))).unwrap_err();
        assert!(e.0 == IrErrorKind::Layout && e.1.contains("tile `u` on warps [4, 2]"), "{e:?}");
        // Nothing that waits for or spreads over the skipping warpgroups; no assignment of outer variables.
        let e = kind(build(256, &|b, _, _, _| b.first_warpgroups(1, |b| b.barrier()))).unwrap_err();
        assert!(e.0 == IrErrorKind::Scope && e.1.contains("`barrier` inside a `first_warpgroups` body"), "{e:?}");
        let e = kind(build(256, &|b, _, _, _| b.first_warpgroups(1, |b| b.threads(|_| {})))).unwrap_err();
        assert!(e.1.contains("`threads region` inside a `first_warpgroups` body"), "{e:?}");
        let e = kind(build(256, &|b, _, _, _| b.first_warpgroups(1, |b| b.first_warpgroups(1, |_| {})))).unwrap_err();
        assert!(e.1.contains("`first_warpgroups` inside a `first_warpgroups` body"), "{e:?}");
        let e = kind(build(256, &|b, _, _, _| {
            let x = b.let_var("x", 0i64);
            b.first_warpgroups(1, |b| b.assign(x, 1i64));
        }))
        .unwrap_err();
        assert!(e.1.contains("variable `x` is introduced outside the `first_warpgroups` body"), "{e:?}");
        // Products started in the body are waited for in it.
        let mma = |wait: bool| {
            move |b: &mut KernelBuilder, _: [TileId; 2], _: VecId, _: SharedId| {
                let sa = b.shared("a", DType::Bf16, 64, 64, 1, Swizzle::Xor16B);
                let acc = b.tile("acc", DType::F32, 64, 64, [4, 1]);
                b.first_warpgroups(1, |b| {
                    let (a, w) = (b.slot(sa, 0i64), b.slot(sa, 0i64));
                    b.mma_async_init(
                        acc,
                        Operand::Shared { src: a, transpose: false },
                        Operand::Shared { src: w, transpose: true },
                        false,
                    );
                    if wait {
                        b.mma_wait(0);
                    }
                });
            }
        };
        build(256, &mma(true)).unwrap();
        let e = kind(build(256, &mma(false))).unwrap_err();
        assert!(e.1.contains("leaves `mma_async` products in flight"), "{e:?}");
    }

    #[test]
    fn tma_store_rules() {
        // A 256-thread kernel storing a 64x64 bf16 tile through a staging buffer: `f` edits the statements.
        let build = |access: Access, f: &dyn Fn(&mut KernelBuilder, TileId, SharedId, crate::tma::TmapId)| {
            let mut b = KernelBuilder::new("t", 256);
            let m = b.dim("M");
            let n = b.dim("N");
            let y = b.tensor("y", DType::Bf16, &[m, n], access);
            let t = b.tile("acc", DType::F32, 64, 128, [4, 1]);
            let sh = b.shared("sy", DType::Bf16, 64, 64, 2, Swizzle::Xor16B);
            let map = b.tensor_map("y_map", y, &[64, 64], Swizzle::Xor16B);
            f(&mut b, t, sh, map);
            b.finish()
        };
        let kind = |r: Result<Kernel, IrError>| r.map(|_| ()).map_err(|e| (e.kind, e.msg));
        let ok = |b: &mut KernelBuilder, t: TileId, sh: SharedId, map: crate::tma::TmapId| {
            for j in 0..2u32 {
                let w = b.window(sh, j as i64, 0, 0, 64, 64);
                b.tma_store_wait(1);
                b.store_cols(t, 64 * j, w.clone());
                b.tma_store(map, w, vec![Expr::Int(64 * j as i64), Expr::Int(0)]);
            }
        };
        let k = build(Access::Write, &ok).unwrap();
        let text = crate::print::kernel(&k);
        assert!(text.contains("<~tma") && text.contains("acc[:, 64..128]"), "{text}");
        // A read-only destination, a window narrower than the box, columns outside the tile or off the 8-column
        // grid, a store or wait inside a turn (they synchronize the consumers), inside a threads region.
        let e = kind(build(Access::Read, &ok)).unwrap_err();
        assert!(e.0 == IrErrorKind::Type && e.1.contains("read-only tensor `y`"), "{e:?}");
        let e = kind(build(Access::Write, &|b, _, sh, map| {
            b.tma_store(map, b.window(sh, 0i64, 0, 0, 32, 64), vec![Expr::Int(0), Expr::Int(0)])
        }))
        .unwrap_err();
        assert!(e.0 == IrErrorKind::Shape && e.1.contains("window of 32 rows, the box has 64"), "{e:?}");
        for col0 in [96, 4] {
            let e = kind(build(Access::Write, &|b, t, sh, _| b.store_cols(t, col0, b.window(sh, 0i64, 0, 0, 64, 64))))
                .unwrap_err();
            assert!(e.0 == IrErrorKind::Shape && e.1.contains("columns must lie inside the tile"), "{col0}: {e:?}");
        }
        let e = kind(build(Access::Write, &|b, t, sh, map| b.in_turn(|b| ok(b, t, sh, map)))).unwrap_err();
        assert!(e.1.contains("a barrier inside an `in_turn` body"), "{e:?}");
        let e = kind(build(Access::Write, &|b, _, _, _| b.threads(|b| b.tma_store_wait(0)))).unwrap_err();
        assert!(e.0 == IrErrorKind::Scope && e.1.contains("`tma_store_wait` is a block-level statement"), "{e:?}");
    }

    #[test]
    fn dequant_fp4_stream_rules() {
        // (tile dtype, tile cols, words dtype, words vec, scales dtype, inside a threads region) -> error kind
        let cases = [
            (DType::Bf16, 64, DType::U32, 4, DType::U8, false, None),
            (DType::F32, 64, DType::U32, 4, DType::U8, false, Some(IrErrorKind::Layout)),
            (DType::Bf16, 48, DType::U32, 4, DType::U8, false, Some(IrErrorKind::Layout)),
            (DType::Bf16, 64, DType::U8, 4, DType::U8, false, Some(IrErrorKind::Type)),
            (DType::Bf16, 64, DType::U32, 2, DType::U8, false, Some(IrErrorKind::Type)),
            (DType::Bf16, 64, DType::U32, 4, DType::U32, false, Some(IrErrorKind::Type)),
            (DType::Bf16, 64, DType::U32, 4, DType::U8, true, Some(IrErrorKind::Scope)),
        ];
        for (tdt, cols, qdt, qvec, sdt, region, want) in cases {
            let mut b = KernelBuilder::new("t", 128);
            let n = b.dim("N");
            let q = b.tensor("q", qdt, &[n.clone(), Expr::Int(8)], Access::Read);
            let s = b.tensor("s", sdt, &[n.clone(), Expr::Int(2)], Access::Read);
            let t = b.tile("w", tdt, 64, cols, [4, 1]);
            let qv = view(q, 0i64, 8i64, n.clone(), 8i64, qvec);
            let sv = view(s, 0i64, 2i64, n.clone(), 2i64, 1);
            if region {
                b.threads(|b| b.dequant_fp4_stream(t, qv, sv, true, false, false));
            } else {
                b.dequant_fp4_stream(t, qv, sv, true, false, false);
            }
            match (b.finish(), want) {
                (Ok(_), None) => {}
                (Err(e), Some(k)) => assert_eq!(e.kind, k, "{tdt} {cols} {qdt} vec {qvec} {sdt} region {region}: {e}"),
                (r, w) => panic!("{tdt} {cols} {qdt} vec {qvec} {sdt} region {region}: {:?}, want {w:?}", r.err()),
            }
        }
    }

    #[test]
    fn type_errors_name_the_place() {
        let mut b = small();
        let acc = b.tile("acc", DType::F32, 64, 64, [2, 2]);
        b.for_("i", 0i64, 4i64, 1i64, |b, i| b.map(acc, i)); // int into a float tile
        let e = b.finish().unwrap_err();
        assert_eq!(e.kind, IrErrorKind::Type);
        assert!(e.at.contains("for `i`") && e.at.contains("map `acc`"), "{e}");
    }

    #[test]
    fn layout_rules() {
        let mut b = small();
        b.tile("bad", DType::F32, 24, 64, [2, 2]);
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Layout);
        let mut b = small();
        let t = b.tile("t", DType::F32, 64, 64, [2, 2]);
        let v = b.vec("v", 64, [2, 2]);
        b.reduce(v, t, ReduceOp::Max, false);
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Layout);
    }

    #[test]
    fn scope_rules() {
        let mut b = small();
        let mut inner = None;
        b.for_("i", 0i64, 4i64, 1i64, |b, _| inner = Some(b.let_var("x", 1i64)));
        b.assign(inner.unwrap(), 2i64);
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Scope);
    }

    #[test]
    fn mma_shapes_checked() {
        let mut b = small();
        let acc = b.tile("acc", DType::F32, 64, 64, [2, 2]);
        let sa = b.shared("sa", DType::Bf16, 64, 32, 1, Swizzle::Xor16B);
        let sb = b.shared("sb", DType::Bf16, 64, 48, 1, Swizzle::None);
        let (ra, rb) = (b.slot(sa, 0i64), b.slot(sb, 0i64));
        b.mma(acc, Operand::Shared { src: ra, transpose: false }, Operand::Shared { src: rb, transpose: true });
        let e = b.finish().unwrap_err();
        assert_eq!(e.kind, IrErrorKind::Shape, "{e}");
    }

    #[test]
    fn shared_limit() {
        let mut b = small();
        b.shared("huge", DType::F32, 256, 256, 1, Swizzle::None);
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Resource);
    }

    #[test]
    fn read_only_store_rejected() {
        let mut b = KernelBuilder::new("t", 32);
        let m = b.dim("M");
        let x = b.tensor("x", DType::F32, &[m.clone(), m.clone()], Access::Read);
        let t = b.tile("t", DType::F32, 16, 8, [1, 1]);
        b.store(t, Place::Global(view(x, 0i64, m.clone(), m.clone(), m, 1)));
        assert_eq!(b.finish().unwrap_err().kind, IrErrorKind::Type);
    }

    fn region_kernel() -> (KernelBuilder, TensorId, SharedId) {
        let mut b = KernelBuilder::new("t", 64);
        let m = b.dim("M");
        let y = b.tensor("y", DType::F32, &[m], Access::Write);
        let s = b.shared("s", DType::U32, 4, 8, 2, Swizzle::None);
        (b, y, s)
    }

    fn fails(b: KernelBuilder, kind: IrErrorKind, needle: &str) {
        let e = b.finish().unwrap_err();
        assert_eq!(e.kind, kind, "{e}");
        assert!(e.to_string().contains(needle), "expected `{needle}` in: {e}");
    }

    #[test]
    fn regions_accept_per_thread_code() {
        let (mut b, y, s) = region_kernel();
        let outer = b.let_("outer", 3i64);
        b.threads(|b| {
            let t = Expr::thread_idx();
            let acc = b.let_var("acc", 0i64);
            b.for_("i", 0i64, &t % 4i64, 1i64, |b, i| b.assign(acc, Expr::Var(acc) + i + outer.clone()));
            let a = b.let_array("a", 4, ScalarTy::Float, 0.0);
            b.array_set(a, 1i64, Expr::lane_idx().to_float());
            b.if_(Expr::warp_idx().eq(1i64), |b| {
                b.store_scalar(y, t.clone(), Expr::array_get(a, 1i64));
            });
            b.atomic_add_shared(s, 1i64, &t / 8i64 % 4i64, &t % 8i64, acc);
            let old = b.atomic_fetch(
                "old",
                AtomicTarget::Shared { buf: s, index: 0i64.into(), row: 0i64.into(), col: 0i64.into() },
                AtomicOp::Max,
                5i64,
            );
            b.shared_store(s, 0i64, 1i64, 1i64, old);
        });
        b.barrier();
        let k = b.finish().unwrap();
        let text = crate::print::kernel(&k);
        assert!(text.contains("threads {") && text.contains("atomic_add(s[1]"), "{text}");
        assert!(text.contains("let old%") && text.contains("a@0[1] := float(lane)"), "{text}");
    }

    #[test]
    fn block_level_statements_are_rejected_in_regions() {
        let (mut b, _, _) = region_kernel();
        b.threads(|b| b.barrier());
        fails(b, IrErrorKind::Scope, "`barrier` is a block-level statement");
        let (mut b, _, _) = region_kernel();
        let t = b.tile("t", DType::F32, 16, 8, [1, 1]);
        b.threads(|b| b.if_(Expr::thread_idx().lt(3i64), |b| b.map(t, 1.0)));
        fails(b, IrErrorKind::Scope, "`map` is a block-level statement");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| b.threads(|_| {}));
        fails(b, IrErrorKind::Scope, "`threads region` is a block-level statement");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| b.commit());
        fails(b, IrErrorKind::Scope, "`async commit`");
    }

    #[test]
    fn per_thread_code_is_rejected_outside_regions() {
        let (mut b, y, _) = region_kernel();
        b.store_scalar(y, 0i64, 1.0);
        fails(b, IrErrorKind::Scope, "only valid inside a threads region");
        let (mut b, _, _) = region_kernel();
        b.let_array("a", 2, ScalarTy::Int, 0i64);
        fails(b, IrErrorKind::Scope, "`let_array` is per-thread code");
        let (mut b, _, _) = region_kernel();
        b.let_("t", Expr::thread_idx());
        fails(b, IrErrorKind::Type, "ThreadIdx differs between threads");
        let (mut b, _, _) = region_kernel();
        let t = b.tile("t", DType::I32, 16, 8, [1, 1]);
        b.map(t, Expr::lane_idx());
        fails(b, IrErrorKind::Type, "LaneIdx");
    }

    #[test]
    fn regions_cannot_assign_block_variables() {
        let (mut b, _, _) = region_kernel();
        let v = b.let_var("v", 0i64);
        b.threads(|b| b.assign(v, Expr::thread_idx()));
        fails(b, IrErrorKind::Scope, "variable `v` is introduced outside the threads region");
        // A loop variable of an enclosing block-level loop is block-level too.
        let (mut b, _, _) = region_kernel();
        b.for_("i", 0i64, 2i64, 1i64, |b, _| {
            let w = b.let_var("w", 0i64);
            b.threads(|b| b.assign(w, 1i64));
        });
        fails(b, IrErrorKind::Scope, "`w`");
    }

    #[test]
    fn region_stores_and_atomics_are_typed() {
        let (mut b, y, _) = region_kernel();
        b.threads(|b| b.store_scalar(y, 0i64, 1i64));
        fails(b, IrErrorKind::Type, "stored value must be float");
        let mut b = KernelBuilder::new("t", 32);
        let x = b.tensor("x", DType::F32, &[Expr::Int(4)], Access::Read);
        b.threads(|b| b.store_scalar(x, 0i64, 1.0));
        fails(b, IrErrorKind::Type, "read-only");
        let mut b = KernelBuilder::new("t", 32);
        let x = b.tensor("x", DType::E8m0, &[Expr::Int(4)], Access::Write);
        b.threads(|b| b.store_scalar(x, 0i64, 1.0));
        fails(b, IrErrorKind::Type, "view it as u8");
        let mut b = KernelBuilder::new("t", 32);
        let s = b.shared("s", DType::Bf16, 1, 8, 1, Swizzle::None);
        b.threads(|b| b.atomic_add_shared(s, 0i64, 0i64, 0i64, 1.0));
        fails(b, IrErrorKind::Type, "atomics update i32, u32, i64, u64 or f32");
        let (mut b, _, s) = region_kernel();
        b.threads(|b| b.atomic_add_shared(s, 0i64, 0i64, 8i64, 1i64));
        fails(b, IrErrorKind::Shape, "col 8 is outside 0..8");
        let (mut b, _, s) = region_kernel();
        b.threads(|b| b.atomic_add_shared(s, 0i64, 0i64, 1i64, 1.0));
        fails(b, IrErrorKind::Type, "atomic operand must be int");
    }

    #[test]
    fn arrays_are_scoped_and_bounded() {
        let (mut b, y, _) = region_kernel();
        let mut arr = None;
        b.threads(|b| arr = Some(b.let_array("a", 4, ScalarTy::Float, 0.0)));
        b.threads(|b| b.store_scalar(y, 0i64, Expr::array_get(arr.unwrap(), 0i64)));
        fails(b, IrErrorKind::Scope, "array #0 `a` used out of scope");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| {
            let a = b.let_array("a", 4, ScalarTy::Float, 0.0);
            b.array_set(a, 4i64, 1.0);
        });
        fails(b, IrErrorKind::Shape, "indexed at 4");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| {
            b.let_array("a", 0, ScalarTy::Int, 0i64);
        });
        fails(b, IrErrorKind::Resource, "array length 0");
        let (mut b, _, _) = region_kernel();
        b.threads(|b| {
            let a = b.let_array("a", 2, ScalarTy::Int, 0i64);
            b.array_set(a, 0i64, 1.5);
        });
        fails(b, IrErrorKind::Type, "array element must be int");
    }

    #[test]
    fn shared_loads_and_bit_ops_are_typed() {
        let (mut b, _, s) = region_kernel();
        let t = b.tile("t", DType::I32, 16, 8, [1, 1]);
        b.map(t, Expr::shared_load(s, 1i64, Expr::RowIdx % 4i64, Expr::ColIdx));
        b.finish().unwrap();
        let (mut b, _, s) = region_kernel();
        b.grid(Expr::shared_load(s, 0i64, 0i64, 0i64), 1i64, 1i64);
        fails(b, IrErrorKind::Type, "grid sizes");
        let (mut b, _, s) = region_kernel();
        b.let_("v", Expr::shared_load(s, 2i64, 0i64, 0i64));
        fails(b, IrErrorKind::Shape, "tile index 2 is outside 0..2");
        let (mut b, _, _) = region_kernel();
        b.let_("v", Expr::Int(3).bits());
        fails(b, IrErrorKind::Type, "`bits` needs a float");
        let (mut b, _, _) = region_kernel();
        b.let_("v", Expr::Float(3.0).from_bits());
        fails(b, IrErrorKind::Type, "`from_bits` needs an int");
        let (mut b, _, _) = region_kernel();
        let f = b.let_("f", Expr::Int(0x3f80_0000).from_bits().round().trunc());
        b.let_("i", f.bits());
        b.finish().unwrap();
    }

    #[test]
    fn scan_scratch_is_checked() {
        let mut b = KernelBuilder::new("t", 64);
        let t = b.tile("t", DType::F32, 32, 16, [2, 1]);
        let s = b.shared("s", DType::F32, 32, 8, 1, Swizzle::None);
        b.scan_rows(t, s);
        fails(b, IrErrorKind::Shape, "at least 32x16");
        let mut b = KernelBuilder::new("t", 64);
        let t = b.tile("t", DType::F32, 32, 16, [2, 1]);
        let s = b.shared("s", DType::Bf16, 32, 16, 1, Swizzle::None);
        b.scan_rows(t, s);
        fails(b, IrErrorKind::Shape, "must be f32");
        let mut b = KernelBuilder::new("t", 64);
        let t = b.tile("t", DType::Bf16, 32, 16, [2, 1]);
        let s = b.shared("s", DType::F32, 32, 16, 1, Swizzle::None);
        b.scan_rows(t, s);
        fails(b, IrErrorKind::Type, "scans run on f32 tiles");
        let mut b = KernelBuilder::new("t", 64);
        let t = b.tile("t", DType::F32, 32, 16, [2, 1]);
        let s = b.shared("s", DType::F32, 40, 24, 1, Swizzle::None);
        b.threads(|b| b.scan_rows(t, s));
        fails(b, IrErrorKind::Scope, "`scan` is a block-level statement");
    }

    #[test]
    fn ldmatrix_and_cp_async_alignment() {
        let mut b = small();
        let acc = b.tile("acc", DType::F32, 32, 32, [2, 2]);
        let sa = b.shared("sa", DType::Bf16, 32, 40, 1, Swizzle::None);
        let sb = b.shared("sb", DType::Bf16, 32, 32, 1, Swizzle::None);
        let (ra, rb) = (b.window(sa, 0i64, 0, 4, 32, 32), b.slot(sb, 0i64));
        b.mma(acc, Operand::Shared { src: ra, transpose: false }, Operand::Shared { src: rb, transpose: true });
        fails(b, IrErrorKind::Layout, "16-byte aligned");
        let mut b = small();
        let acc = b.tile("acc", DType::F32, 32, 32, [2, 2]);
        let sa = b.shared("sa", DType::Bf16, 32, 36, 1, Swizzle::None);
        let sb = b.shared("sb", DType::Bf16, 32, 32, 1, Swizzle::None);
        let (ra, rb) = (b.window(sa, 0i64, 0, 0, 32, 32), b.slot(sb, 0i64));
        b.mma(acc, Operand::Shared { src: ra, transpose: false }, Operand::Shared { src: rb, transpose: true });
        fails(b, IrErrorKind::Layout, "rows of 72 bytes");
        let mut b = KernelBuilder::new("t", 32);
        let x = b.tensor("x", DType::Bf16, &[Expr::Int(64)], Access::Read);
        let s = b.shared("s", DType::Bf16, 4, 12, 1, Swizzle::None);
        let d = b.window(s, 0i64, 0, 0, 4, 8);
        b.copy_async(d, view(x, 0i64, 8i64, 4i64, 8i64, 8));
        fails(b, IrErrorKind::Layout, "not a multiple of the copy's vec 8");
    }

    #[test]
    fn banded_operands() {
        // acc [64, 16] on [4, 1]: four 16-row bands, each with its own 16-row window of a [64, 32] buffer.
        let ok = |rows: u32, row0: u32| {
            let mut b = small();
            let acc = b.tile("acc", DType::F32, 64, 16, [4, 1]);
            let sa = b.shared("sa", DType::Bf16, 64, 32, 1, Swizzle::Xor16B);
            let sb = b.shared("sb", DType::Bf16, rows, 32, 1, Swizzle::Xor16B);
            let (ra, rb) = (b.slot(sa, 0i64), b.window(sb, 0i64, row0, 0, 16, 32));
            b.mma(acc, Operand::Shared { src: ra, transpose: false }, Operand::Banded { src: rb, transpose: true });
            b
        };
        ok(64, 0).finish().unwrap();
        fails(ok(64, 16), IrErrorKind::Shape, "outside shared `sb`");
        fails(ok(48, 0), IrErrorKind::Shape, "4 row bands of 16 rows");
        let mut b = small();
        let acc = b.tile("acc", DType::F32, 64, 16, [4, 1]);
        let sa = b.shared("sa", DType::Bf16, 64, 32, 1, Swizzle::Xor16B);
        let (ra, rb) = (b.slot(sa, 0i64), b.window(sa, 0i64, 0, 0, 16, 32));
        b.mma(acc, Operand::Banded { src: ra, transpose: false }, Operand::Banded { src: rb, transpose: true });
        fails(b, IrErrorKind::Layout, "only be the B operand");
    }

    #[test]
    fn kernels_without_arrays_field_deserialize() {
        let (b, _, _) = region_kernel();
        let k = b.finish().unwrap();
        let mut v: serde_json::Value = serde_json::to_value(&k).unwrap();
        v.as_object_mut().unwrap().remove("arrays");
        let back: Kernel = serde_json::from_value(v).unwrap();
        assert_eq!(back, k);
    }
}

/// The residue of `e` modulo `m` when it is provable from the expression's structure alone (constants, sums,
/// products and shifts; variables, symbols, thread and block indices are unknown), else `None`.
pub fn provable_residue(e: &Expr, m: i64) -> Option<i64> {
    // (modulus, residue): e = residue (mod modulus); modulus 0 means e == residue exactly.
    fn gcd(a: i128, b: i128) -> i128 {
        if b == 0 { a.abs() } else { gcd(b, a % b) }
    }
    fn res(e: &Expr) -> (i128, i128) {
        let norm = |m: i128, r: i128| if m == 0 { (0, r) } else { (m, r.rem_euclid(m)) };
        match e {
            Expr::Int(v) => (0, *v as i128),
            Expr::Un(UnOp::Neg, a) => {
                let (m, r) = res(a);
                norm(m, -r)
            }
            Expr::Bin(op @ (BinOp::Add | BinOp::Sub), a, b) => {
                let ((m1, r1), (m2, r2)) = (res(a), res(b));
                let r = if *op == BinOp::Add { r1 + r2 } else { r1 - r2 };
                norm(gcd(m1, m2), r)
            }
            Expr::Bin(BinOp::Mul, a, b) => {
                // (r1 + m1 x)(r2 + m2 y) = r1 r2 + r1 m2 y + r2 m1 x + m1 m2 x y
                let ((m1, r1), (m2, r2)) = (res(a), res(b));
                norm(gcd(gcd(r1 * m2, r2 * m1), m1 * m2), r1 * r2)
            }
            Expr::Bin(BinOp::Shl, a, b) => match b.as_const_int() {
                Some(c @ 0..=32) => {
                    let (m, r) = res(a);
                    norm(m << c, r << c)
                }
                _ => (1, 0),
            },
            _ => (1, 0),
        }
    }
    let (em, r) = res(e);
    let m = m as i128;
    if m <= 0 {
        return None;
    }
    (em == 0 || em % m == 0).then(|| r.rem_euclid(m) as i64)
}

#[cfg(test)]
mod wide_tests {
    use crate::*;

    fn kernel(
        dtype: DType,
        lanes: u32,
        arr_ty: ScalarTy,
        len: u32,
        at: u32,
        index: impl Fn(Expr) -> Expr,
    ) -> Result<Kernel, IrError> {
        let mut b = KernelBuilder::new("wide", 32);
        let n = b.dim("N");
        let x = b.tensor("x", dtype, &[n], Access::ReadWrite);
        b.grid(1i64, 1i64, 1i64);
        b.threads(|b| {
            let a =
                b.let_array("a", len, arr_ty, if arr_ty == ScalarTy::Float { Expr::Float(0.0) } else { Expr::Int(0) });
            let i = index(Expr::thread_idx());
            b.load_wide(a, at, x, i.clone(), lanes);
            b.store_wide(x, i, a, at, lanes);
        });
        b.finish()
    }

    #[test]
    fn wide_accesses_check_size_type_array_and_provable_alignment() {
        let f = ScalarTy::Float;
        // Good: f32 x 4, bf16 x 8, f32 x 2 (8 bytes), u8 x 16 with a symbolic part.
        assert!(kernel(DType::F32, 4, f, 4, 0, |t| t * 4i64).is_ok());
        assert!(kernel(DType::Bf16, 8, f, 16, 8, |t| t * 8i64 + 64i64).is_ok());
        assert!(
            kernel(DType::F32, 2, f, 2, 0, |t| Expr::Bin(BinOp::Shl, Box::new(t), Box::new(Expr::Int(1))) + 6i64)
                .is_ok()
        );
        assert!(kernel(DType::U8, 16, ScalarTy::Int, 16, 0, |t| t * 32i64 - 16i64).is_ok());
        // Unknown residue (a loaded or symbolic index) is left to the runtime checks.
        assert!(kernel(DType::F32, 4, f, 4, 0, |t| t * 3i64).is_ok());
        let msg = |r: Result<Kernel, IrError>| r.unwrap_err().to_string();
        // Provably misaligned.
        assert!(msg(kernel(DType::F32, 4, f, 4, 0, |t| t * 4i64 + 2i64)).contains("is 2 modulo 4"));
        assert!(msg(kernel(DType::Bf16, 8, f, 8, 0, |t| t * 16i64 + 4i64)).contains("misaligned"));
        assert!(msg(kernel(DType::F32, 4, f, 4, 0, |_| Expr::Int(5))).contains("is 1 modulo 4"));
        // Sizes other than 8 or 16 bytes, unsupported dtypes, wrong array type, too short an array.
        assert!(msg(kernel(DType::F32, 3, f, 4, 0, |t| t * 4i64)).contains("not 8 or 16"));
        assert!(msg(kernel(DType::F32, 8, f, 8, 0, |t| t * 8i64)).contains("not 8 or 16"));
        assert!(msg(kernel(DType::E4m3, 16, f, 16, 0, |t| t * 16i64)).contains("cannot move wide"));
        assert!(msg(kernel(DType::I32, 4, f, 4, 0, |t| t * 4i64)).contains("holds float"));
        assert!(msg(kernel(DType::F32, 4, f, 6, 4, |t| t * 4i64)).contains("cannot hold elements 4..8"));
    }

    #[test]
    fn wide_accesses_are_region_only() {
        let mut b = KernelBuilder::new("wide_block", 32);
        let x = b.tensor("x", DType::F32, &[Expr::Int(4)], Access::Read);
        b.grid(1i64, 1i64, 1i64);
        b.load_wide(ArrId(0), 0, x, 0i64, 4);
        let e = b.finish().unwrap_err().to_string();
        assert!(e.contains("only valid inside a threads region"), "{e}");
    }

    #[test]
    fn residues() {
        use super::provable_residue as r;
        let t = Expr::thread_idx();
        assert_eq!(r(&(t.clone() * 8i64 + 3i64), 4), Some(3));
        assert_eq!(r(&((t.clone() + 1i64) * 4i64), 4), Some(0));
        assert_eq!(r(&(t.clone() * 2i64), 4), None);
        assert_eq!(r(&(Expr::Bin(BinOp::Shl, Box::new(t.clone()), Box::new(Expr::Int(3))) - 1i64), 8), Some(7));
        assert_eq!(r(&(Expr::Int(6) * Expr::Int(3)), 4), Some(2));
    }
}
