//! A readable, deterministic text form of a kernel (`k3k emit --emit ir`); also the input of the stable hash.

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
        let _ = writeln!(s, "  reg {}: {}[{}x{}] warps={}x{}", t.name, t.dtype, t.rows, t.cols, t.warps[0], t.warps[1]);
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
    let _ = writeln!(s, "  shared_bytes = {}", k.shared_bytes());
    let _ = writeln!(s, "body:");
    body(k, &k.body, 1, &mut s);
    s
}

fn body(k: &Kernel, b: &[Stmt], depth: usize, s: &mut String) {
    let pad = "  ".repeat(depth);
    for st in b {
        match st {
            Stmt::Let { var, value } => {
                let _ = writeln!(s, "{pad}let {} = {}", expr(k, &Expr::Var(*var)), expr(k, value));
            }
            Stmt::Assign { var, value } => {
                let _ = writeln!(s, "{pad}{} := {}", expr(k, &Expr::Var(*var)), expr(k, value));
            }
            Stmt::For { var, start, end, step, body: inner, unroll } => {
                let _ = writeln!(
                    s,
                    "{pad}for {} in {}..{} step {}{} {{",
                    expr(k, &Expr::Var(*var)),
                    expr(k, start),
                    expr(k, end),
                    expr(k, step),
                    if *unroll { " unroll" } else { "" }
                );
                body(k, inner, depth + 1, s);
                let _ = writeln!(s, "{pad}}}");
            }
            Stmt::If { cond, then_body, else_body } => {
                let _ = writeln!(s, "{pad}if {} {{", expr(k, cond));
                body(k, then_body, depth + 1, s);
                if !else_body.is_empty() {
                    let _ = writeln!(s, "{pad}}} else {{");
                    body(k, else_body, depth + 1, s);
                }
                let _ = writeln!(s, "{pad}}}");
            }
            Stmt::Barrier => {
                let _ = writeln!(s, "{pad}barrier");
            }
            Stmt::Producer { body: inner } => {
                let _ = writeln!(s, "{pad}producer warp {{");
                body(k, inner, depth + 1, s);
                let _ = writeln!(s, "{pad}}}");
            }
            Stmt::InTurn { body: inner } => {
                let _ = writeln!(s, "{pad}in turn {{");
                body(k, inner, depth + 1, s);
                let _ = writeln!(s, "{pad}}}");
            }
            Stmt::FirstWarpgroups { count, body: inner } => {
                let _ = writeln!(s, "{pad}first {count} warpgroups {{");
                body(k, inner, depth + 1, s);
                let _ = writeln!(s, "{pad}}}");
            }
            Stmt::Map { tile, value } => {
                let _ = writeln!(s, "{pad}{}[r,c] = {}", k.tiles[tile.0 as usize].name, expr(k, value));
            }
            Stmt::VecMap { vec, value } => {
                let _ = writeln!(s, "{pad}{}[r] = {}", k.vecs[vec.0 as usize].name, expr(k, value));
            }
            Stmt::Reduce { vec, tile, op, accumulate } => {
                let _ = writeln!(
                    s,
                    "{pad}{}[r] {}= reduce_{:?}_c {}[r,c]",
                    k.vecs[vec.0 as usize].name,
                    if *accumulate { "op" } else { "" },
                    op,
                    k.tiles[tile.0 as usize].name
                );
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
                let _ = writeln!(
                    s,
                    "{pad}{}[{}][{}+{}, {}+{}] = fp4_gemv({}, {}, x={}){}{}{}{} chunk={chunk} ring={ring}{}{}{}{} scratch={}",
                    k.shared[out.buf.0 as usize].name,
                    expr(k, &out.index),
                    out.row0,
                    out.rows,
                    out.col0,
                    out.cols,
                    global_view(k, words),
                    global_view(k, scales),
                    global_view(k, x),
                    if *packed { " packed" } else { " natural" },
                    if *tiled { " tiled" } else { "" },
                    if *fold { " fold" } else { "" },
                    if *finite { " finite" } else { "" },
                    if *staged { " staged" } else { "" },
                    if *l2_prefetch > 0 { format!(" l2_prefetch={l2_prefetch}") } else { String::new() },
                    if *bulk { " bulk" } else { "" },
                    if *x_two_ahead { " x_two_ahead" } else { "" },
                    k.shared[scratch.0 as usize].name,
                );
            }
            Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch } => {
                let _ = writeln!(
                    s,
                    "{pad}{} = dequant_fp4_stream({}, {}){}{}{}{}",
                    k.tiles[tile.0 as usize].name,
                    global_view(k, words),
                    global_view(k, scales),
                    if *packed { " packed" } else { " natural" },
                    if *fold { " fold" } else { "" },
                    if *finite { " finite" } else { "" },
                    match prefetch {
                        Some(p) => format!(
                            " prefetch({}, {}, first={})",
                            global_view(k, &p.words),
                            global_view(k, &p.scales),
                            expr(k, &p.first)
                        ),
                        None => String::new(),
                    }
                );
            }
            Stmt::DequantFp4 { tile, words, scales, packed, fold, finite } => {
                let _ = writeln!(
                    s,
                    "{pad}{} = dequant_fp4({}, {}){}{}{}",
                    k.tiles[tile.0 as usize].name,
                    shared_ref(k, words),
                    shared_ref(k, scales),
                    if *packed { " packed" } else { " natural" },
                    if *fold { " fold" } else { "" },
                    if *finite { " finite" } else { "" }
                );
            }
            Stmt::Mma { acc, a, b } => {
                let _ = writeln!(s, "{pad}{} += {} @ {}", k.tiles[acc.0 as usize].name, operand(k, a), operand(k, b));
            }
            Stmt::MmaAsync { acc, a, b, accumulate } => {
                let _ = writeln!(
                    s,
                    "{pad}{} = ({} ? {} : 0) + {} @ {} async",
                    k.tiles[acc.0 as usize].name,
                    expr(k, accumulate),
                    k.tiles[acc.0 as usize].name,
                    operand(k, a),
                    operand(k, b)
                );
            }
            Stmt::MmaWait { pending } => {
                let _ = writeln!(s, "{pad}mma_wait pending<={pending}");
            }
            Stmt::CopyAsync { dst, src } => {
                let _ = writeln!(s, "{pad}{} <~ {}", shared_ref(k, dst), global_view(k, src));
            }
            Stmt::MbarInit { bar, count } => {
                let _ = writeln!(s, "{pad}mbar_init {} count={count}", mbar_name(k, bar.0));
            }
            Stmt::MbarArriveExpectTx { bar, bytes } => {
                let _ = writeln!(s, "{pad}mbar_arrive_expect_tx {} bytes={bytes}", mbar_ref(k, bar));
            }
            Stmt::MbarArrive { bar } => {
                let _ = writeln!(s, "{pad}mbar_arrive {}", mbar_ref(k, bar));
            }
            Stmt::MbarWait { bar, parity, elected } => {
                let who = if *elected { " (thread 0)" } else { "" };
                let _ = writeln!(s, "{pad}mbar_wait {} parity={}{who}", mbar_ref(k, bar), expr(k, parity));
            }
            Stmt::TmaLoad(t) => {
                let coords: Vec<String> = t.coords.iter().map(|c| expr(k, c)).collect();
                let map = k.tensor_maps.get(t.map.0 as usize).map_or("?", |m| &m.name);
                let mc = t.multicast.as_ref().map_or(String::new(), |m| format!(" multicast={}", expr(k, m)));
                let _ = writeln!(
                    s,
                    "{pad}{} <~tma {map}[{}] on {}{mc}",
                    shared_ref(k, &t.dst),
                    coords.join(", "),
                    mbar_ref(k, &t.bar)
                );
            }
            Stmt::TmaStore(t) => {
                let coords: Vec<String> = t.coords.iter().map(|c| expr(k, c)).collect();
                let map = k.tensor_maps.get(t.map.0 as usize).map_or("?", |m| &m.name);
                let _ = writeln!(
                    s,
                    "{pad}{map}[{}] <~tma {} (fence, consumer barrier)",
                    coords.join(", "),
                    shared_ref(k, &t.src)
                );
            }
            Stmt::TmaStoreWait { pending } => {
                let _ = writeln!(s, "{pad}tma_store_wait reads pending<={pending} (consumer barrier)");
            }
            Stmt::StoreCols { tile, col0, dst } => {
                let t = &k.tiles[tile.0 as usize];
                let _ = writeln!(s, "{pad}{}[:, {col0}..{}] -> {}", t.name, col0 + dst.cols, shared_ref(k, dst));
            }
            Stmt::MbarArriveCluster { bar, cta } => {
                let _ = writeln!(
                    s,
                    "{pad}mbar_arrive_cluster {} cta={} (lane 0 of each warp)",
                    mbar_ref(k, bar),
                    expr(k, cta)
                );
            }
            Stmt::ClusterSync => {
                let _ = writeln!(s, "{pad}cluster_sync");
            }
            Stmt::AsyncCommit => {
                let _ = writeln!(s, "{pad}commit");
            }
            Stmt::AsyncWait { pending } => {
                let _ = writeln!(s, "{pad}wait pending<={pending}");
            }
            Stmt::Load { tile, src } => {
                let _ = writeln!(s, "{pad}{} <- {}", k.tiles[tile.0 as usize].name, place(k, src));
            }
            Stmt::Store { tile, dst } => {
                let _ = writeln!(s, "{pad}{} -> {}", k.tiles[tile.0 as usize].name, place(k, dst));
            }
            Stmt::LoadVec { vec, src } => {
                let _ = writeln!(s, "{pad}{} <- {}", k.vecs[vec.0 as usize].name, vec_view(k, src));
            }
            Stmt::StoreVec { vec, dst } => {
                let _ = writeln!(s, "{pad}{} -> {}", k.vecs[vec.0 as usize].name, vec_view(k, dst));
            }
            Stmt::Scan { tile, scratch, op } => {
                let sname = k.shared.get(scratch.0 as usize).map_or("?", |d| &d.name);
                let _ =
                    writeln!(s, "{pad}{}[r,c] = scan_{op:?}_r {0}[..=r,c] via {sname}", k.tiles[tile.0 as usize].name);
            }
            Stmt::Threads { body: inner } => {
                let _ = writeln!(s, "{pad}threads {{");
                body(k, inner, depth + 1, s);
                let _ = writeln!(s, "{pad}}}");
            }
            Stmt::StoreScalar { tensor, index, value } => {
                let _ = writeln!(s, "{pad}{}[{}] := {}", tensor_name(k, tensor.0), expr(k, index), expr(k, value));
            }
            Stmt::SharedStore { buf, index, row, col, value } => {
                let _ = writeln!(s, "{pad}{} := {}", shared_elem(k, *buf, index, row, col), expr(k, value));
            }
            Stmt::Atomic { target, op, value, fetch } => {
                let t = match target {
                    AtomicTarget::Global { tensor, index } => {
                        format!("{}[{}]", tensor_name(k, tensor.0), expr(k, index))
                    }
                    AtomicTarget::Shared { buf, index, row, col } => shared_elem(k, *buf, index, row, col),
                };
                let lhs = fetch.map_or(String::new(), |v| format!("let {} = ", expr(k, &Expr::Var(v))));
                let _ = writeln!(s, "{pad}{lhs}atomic_{}({t}, {})", op.name(), expr(k, value));
            }
            Stmt::LetArray { arr, len, ty, init } => {
                let _ = writeln!(s, "{pad}let {}: {ty}[{len}] = {}", array_name(k, *arr), expr(k, init));
            }
            Stmt::ArraySet { arr, index, value } => {
                let _ = writeln!(s, "{pad}{}[{}] := {}", array_name(k, *arr), expr(k, index), expr(k, value));
            }
            Stmt::LoadWide { arr, at, tensor, index, lanes } => {
                let _ = writeln!(
                    s,
                    "{pad}{}[{at}..+{lanes}] := wide {}[{}..+{lanes}]",
                    array_name(k, *arr),
                    tensor_name(k, tensor.0),
                    expr(k, index)
                );
            }
            Stmt::StoreWide { tensor, index, arr, at, lanes } => {
                let _ = writeln!(
                    s,
                    "{pad}{}[{}..+{lanes}] := wide {}[{at}..+{lanes}]",
                    tensor_name(k, tensor.0),
                    expr(k, index),
                    array_name(k, *arr)
                );
            }
            Stmt::WarpShuffle { var, op, value } => {
                let _ = writeln!(s, "{pad}let {} = warp_{}({})", expr(k, &Expr::Var(*var)), op.name(), expr(k, value));
            }
            Stmt::WarpSync => {
                let _ = writeln!(s, "{pad}syncwarp");
            }
            Stmt::Fence => {
                let _ = writeln!(s, "{pad}fence");
            }
        }
    }
}

fn mbar_name(k: &Kernel, i: u32) -> String {
    k.mbarriers.get(i as usize).map_or(format!("mbar#{i}"), |m| m.name.clone())
}

fn mbar_ref(k: &Kernel, r: &crate::tma::MbarRef) -> String {
    format!("{}[{}]", mbar_name(k, r.bar.0), expr(k, &r.index))
}
