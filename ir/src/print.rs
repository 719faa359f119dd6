//! A readable, deterministic text form of a kernel (`k3k emit --emit ir`); also the input of the stable hash.
//! Statements print by family, one file each: scalar control (`control`), barriers and copies (`sync`), tiles
//! and tensor-core products (`tiles`), the MXFP4 statements (`mx`) and threads regions (`threads`).

mod control;
mod mx;
mod sync;
mod threads;
mod tiles;

use crate::expr::{ArrId, Expr, SharedId, Special};
use crate::kernel::*;
use std::fmt::Write;

/// Print an expression.
pub fn expr(k: &Kernel, e: &Expr) -> String {
    match e {
        Expr::Int(v) => v.to_string(),
        Expr::Float(v) => {
            let s = format!("{v:?}");
            if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
                s
            } else {
                format!("{s}.0")
            }
        }
        Expr::Bool(v) => v.to_string(),
        Expr::Sym(s) => k.syms.get(s.0 as usize).map_or(format!("sym#{}", s.0), |d| d.name.clone()),
        Expr::Var(v) => k.vars.get(v.0 as usize).map_or(format!("var#{}", v.0), |d| format!("{}%{}", d.name, v.0)),
        Expr::Special(Special::BlockIdx(a)) => format!("block.{}", axis(*a)),
        Expr::Special(Special::GridDim(a)) => format!("grid.{}", axis(*a)),
        Expr::Special(Special::ThreadIdx) => "thread".into(),
        Expr::Special(Special::LaneIdx) => "lane".into(),
        Expr::Special(Special::WarpIdx) => "warp".into(),
        Expr::Un(op, a) => format!("{}({})", op.name(), expr(k, a)),
        Expr::Bin(op, a, b) if op.is_call() => format!("{}({}, {})", op.symbol(), expr(k, a), expr(k, b)),
        Expr::Bin(op, a, b) => format!("({} {} {})", expr(k, a), op.symbol(), expr(k, b)),
        Expr::Select(c, a, b) => format!("select({}, {}, {})", expr(k, c), expr(k, a), expr(k, b)),
        Expr::Cast(t, a) => format!("{t}({})", expr(k, a)),
        Expr::Load { tensor, index } => format!("{}[{}]", tensor_name(k, tensor.0), expr(k, index)),
        Expr::Elem(t) => format!("{}[r,c]", k.tiles.get(t.0 as usize).map_or("?", |t| &t.name)),
        Expr::RowVal(v) => format!("{}[r]", k.vecs.get(v.0 as usize).map_or("?", |v| &v.name)),
        Expr::RowIdx => "r".into(),
        Expr::ColIdx => "c".into(),
        Expr::SharedLoad { buf, index, row, col } => shared_elem(k, *buf, index, row, col),
        Expr::ArrayGet(a, i) => format!("{}[{}]", array_name(k, *a), expr(k, i)),
    }
}

fn shared_elem(k: &Kernel, buf: SharedId, index: &Expr, row: &Expr, col: &Expr) -> String {
    let name = k.shared.get(buf.0 as usize).map_or("?", |s| &s.name);
    format!("{name}[{}][{}, {}]", expr(k, index), expr(k, row), expr(k, col))
}

fn array_name(k: &Kernel, a: ArrId) -> String {
    k.arrays.get(a.0 as usize).map_or(format!("arr#{}", a.0), |d| format!("{}@{}", d.name, a.0))
}

fn axis(a: u8) -> char {
    ['x', 'y', 'z'].get(a as usize).copied().unwrap_or('?')
}

fn tensor_name(k: &Kernel, i: u32) -> String {
    k.tensors.get(i as usize).map_or(format!("tensor#{i}"), |t| t.name.clone())
}

fn shared_ref(k: &Kernel, r: &SharedRef) -> String {
    let name = k.shared.get(r.buf.0 as usize).map_or("?", |s| &s.name);
    format!("{name}[{}][{}..{}, {}..{}]", expr(k, &r.index), r.row0, r.row0 + r.rows, r.col0, r.col0 + r.cols)
}

fn global_view(k: &Kernel, v: &GlobalView) -> String {
    format!(
        "{}{{off={}, stride={}, rows<{}, cols<{}, vec={}}}",
        tensor_name(k, v.tensor.0),
        expr(k, &v.offset),
        expr(k, &v.row_stride),
        expr(k, &v.rows),
        expr(k, &v.cols),
        v.vec
    )
}

fn vec_view(k: &Kernel, v: &VecView) -> String {
    format!(
        "{}{{off={}, stride={}, rows<{}}}",
        tensor_name(k, v.tensor.0),
        expr(k, &v.offset),
        expr(k, &v.stride),
        expr(k, &v.rows)
    )
}

fn place(k: &Kernel, p: &Place) -> String {
    match p {
        Place::Global(v) => global_view(k, v),
        Place::Shared(r) => shared_ref(k, r),
    }
}

fn operand(k: &Kernel, o: &Operand) -> String {
    match o {
        Operand::Reg(t) => k.tiles[t.0 as usize].name.clone(),
        Operand::Shared { src, transpose } => format!("{}{}", shared_ref(k, src), if *transpose { "^T" } else { "" }),
        Operand::Banded { src, transpose } => {
            format!("banded({}{})", shared_ref(k, src), if *transpose { "^T" } else { "" })
        }
    }
}

/// Print a whole kernel.
pub fn kernel(k: &Kernel) -> String {
    let mut s = String::new();
    let pw = if k.producer_warp { " +producer_warp" } else { "" };
    let _ = writeln!(s, "kernel {} threads={}{pw} knobs{{{}}}", k.name, k.threads, k.knobs);
    for sym in &k.syms {
        let _ = writeln!(s, "  sym {}: {:?}", sym.name, sym.kind);
    }
    for t in &k.tensors {
        let dims: Vec<String> = t
            .dims
            .iter()
            .map(|d| match d {
                Dim::Const(v) => v.to_string(),
                Dim::Sym(id) => k.syms.get(id.0 as usize).map_or("?".into(), |d| d.name.clone()),
            })
            .collect();
        let _ = writeln!(s, "  tensor {}: {}[{}] {:?}", t.name, t.dtype, dims.join(", "), t.access);
    }
    let _ = writeln!(s, "  grid = ({}, {}, {})", expr(k, &k.grid[0]), expr(k, &k.grid[1]), expr(k, &k.grid[2]));
    for t in &k.tiles {
        let solo = if t.solo { " solo" } else { "" };
        let _ = writeln!(
            s,
            "  reg {}: {}[{}x{}] warps={}x{}{solo}",
            t.name, t.dtype, t.rows, t.cols, t.warps[0], t.warps[1]
        );
    }
    for v in &k.vecs {
        let _ = writeln!(s, "  vec {}: f32[{}] warps={}x{}", v.name, v.rows, v.warps[0], v.warps[1]);
    }
    for sh in &k.shared {
        let alias = match sh.alias {
            Some(a) => {
                let of = k.shared.get(a.of.0 as usize).map_or("?", |r| &r.name);
                format!(" in {of} @{}", a.byte_offset)
            }
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "  shared {}: {}[{} x {}x{}] {:?}{alias}",
            sh.name, sh.dtype, sh.count, sh.rows, sh.cols, sh.swizzle
        );
    }
    for m in &k.mbarriers {
        let _ = writeln!(s, "  mbarrier {}: [{}]", m.name, m.count);
    }
    for t in &k.tensor_maps {
        let tn = tensor_name(k, t.tensor.0);
        let _ = writeln!(s, "  tensor_map {}: {tn} box={:?} {:?}", t.name, t.box_dims, t.swizzle);
    }
    if !crate::cluster::is_no_cluster(&k.cluster) {
        let _ = writeln!(s, "  cluster = {:?}", k.cluster);
    }
    if k.elected_warpgroup > 0 {
        let _ = writeln!(s, "  elected_warpgroup = {}", k.elected_warpgroup);
    }
    if k.min_blocks_per_sm > 0 {
        let _ = writeln!(s, "  min_blocks_per_sm = {}", k.min_blocks_per_sm);
    }
    if k.mma_origins {
        let _ = writeln!(s, "  mma_origins = true");
    }
    if k.pinned_wide_stores {
        let _ = writeln!(s, "  pinned_wide_stores = true");
    }
    let _ = writeln!(s, "  shared_bytes = {}", k.shared_bytes());
    let _ = writeln!(s, "body:");
    body(k, &k.body, 1, &mut s);
    s
}

fn body(k: &Kernel, b: &[Stmt], depth: usize, s: &mut String) {
    let pad = "  ".repeat(depth);
    for st in b {
        match st.family() {
            StmtFamily::Control => control::control_stmt(k, st, depth, &pad, s),
            StmtFamily::Sync => sync::sync_stmt(k, st, &pad, s),
            StmtFamily::Tiles | StmtFamily::Mma => tiles::tile_stmt(k, st, &pad, s),
            StmtFamily::Mx => mx::mx_stmt(k, st, &pad, s),
            StmtFamily::Threads => threads::thread_stmt(k, st, depth, &pad, s),
        }
    }
}

fn mbar_name(k: &Kernel, i: u32) -> String {
    k.mbarriers.get(i as usize).map_or(format!("mbar#{i}"), |m| m.name.clone())
}

fn mbar_ref(k: &Kernel, r: &crate::tma::MbarRef) -> String {
    format!("{}[{}]", mbar_name(k, r.bar.0), expr(k, &r.index))
}
