//! Static checks of a kernel: scopes, expression types, tile shapes and layouts, resources.
//!
//! [`validate`] runs a `Checker` over the kernel: `decls.rs` checks the kernel-level declarations (cluster, TMA
//! maps and boxes, row and warp shapes), `exprs.rs` expressions (scopes and types), `stmts.rs` every statement and
//! where it may stand, `mma.rs` the tensor-core products; `tests.rs` holds the tests.

use crate::dtype::{DType, ScalarTy};
use crate::expr::{ArrId, BinOp, Expr, SharedId, Special, TileId, UnOp, VarId, VecId};
use crate::kernel::*;
use crate::mx::*;
use std::collections::{HashMap, HashSet};

mod decls;
mod exprs;
mod mma;
mod mma_fp8;
mod stmts;
#[cfg(test)]
mod tests;

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
