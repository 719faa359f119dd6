//! Register tiles and row vectors: maps, reductions, tensor-core products, loads and stores, scans.

use super::*;

/// Print one tile statement.
pub(super) fn tile_stmt(k: &Kernel, st: &Stmt, pad: &str, s: &mut String) {
    match st {
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
        Stmt::Mma { acc, a, b } => {
            // The E4M3 form (u32 words of four codes) is marked; the 16-bit forms print as they always did.
            let e4m3 = match a {
                Operand::Shared { src, .. } if k.shared[src.buf.0 as usize].dtype == crate::DType::U32 => " e4m3",
                _ => "",
            };
            let _ = writeln!(s, "{pad}{} += {} @ {}{e4m3}", k.tiles[acc.0 as usize].name, operand(k, a), operand(k, b));
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
        Stmt::StoreCols { tile, col0, dst } => {
            let t = &k.tiles[tile.0 as usize];
            let _ = writeln!(s, "{pad}{}[:, {col0}..{}] -> {}", t.name, col0 + dst.cols, shared_ref(k, dst));
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
            let _ = writeln!(s, "{pad}{}[r,c] = scan_{op:?}_r {0}[..=r,c] via {sname}", k.tiles[tile.0 as usize].name);
        }
        _ => unreachable!("not a tile statement"),
    }
}
