//! Register tiles and row vectors: maps, reductions, scans, and their loads and stores (global and shared).

use super::*;

impl<'a> Renderer<'a> {
    pub(super) fn tile_stmt(&mut self, s: &Stmt) {
        let k = self.k;
        match s {
            Stmt::StoreCols { tile, col0, dst } => {
                let line = format!(
                    "k3k::store_shared_cols<{}, {}, {}, {col0}, {}>(t{}, {}, {}, {});",
                    self.tile_ty(*tile),
                    c_type(k.shared[dst.buf.0 as usize].dtype),
                    self.shared_layout(dst.buf),
                    dst.cols,
                    tile.0,
                    self.shared_ptr(dst),
                    dst.row0,
                    dst.col0
                );
                self.line(&line);
            }
            Stmt::Map { tile, value } => {
                let tt = self.tile_ty(*tile);
                let val = self.e(value, Ctx::Elem);
                self.line("#pragma unroll");
                self.line(&format!("for (int b_ = 0; b_ < {tt}::L::NB; ++b_)"));
                self.line("#pragma unroll");
                self.line(&format!("for (int f_ = 0; f_ < {tt}::L::NF; ++f_)"));
                self.line("#pragma unroll");
                self.line("for (int jp_ = 0; jp_ < 2; ++jp_) {");
                self.depth += 1;
                self.line(&format!("{tt}::elem_t e_[2];"));
                self.line("#pragma unroll");
                self.line("for (int h_ = 0; h_ < 2; ++h_) {");
                self.depth += 1;
                self.line("const int j_ = 2 * jp_ + h_;");
                self.line(&format!("const int r_ = {tt}::L::row(b_, j_), c_ = {tt}::L::col(f_, j_);"));
                self.line("(void)r_; (void)c_;");
                self.line(&format!("e_[h_] = {val};"));
                self.depth -= 1;
                self.line("}");
                self.line(&format!("t{}.set2(b_, f_, jp_, e_[0], e_[1]);", tile.0));
                self.depth -= 1;
                self.line("}");
            }
            Stmt::VecMap { vec, value } => {
                let val = self.e(value, Ctx::Row);
                let v = vec.0;
                self.line("#pragma unroll");
                self.line(&format!("for (int b_ = 0; b_ < decltype(v{v})::NB; ++b_)"));
                self.line("#pragma unroll");
                self.line("for (int h_ = 0; h_ < 2; ++h_) {");
                self.depth += 1;
                self.line(&format!("const int r_ = decltype(v{v})::row(b_, h_); (void)r_;"));
                self.line(&format!("v{v}.v[b_][h_] = {val};"));
                self.depth -= 1;
                self.line("}");
            }
            Stmt::Reduce { vec, tile, op, accumulate } => {
                let op = match op {
                    ReduceOp::Sum => "OpSum",
                    ReduceOp::Max => "OpMax",
                    ReduceOp::Min => "OpMin",
                };
                self.line(&format!("k3k::reduce_rows<k3k::{op}>(v{}, t{}, {accumulate});", vec.0, tile.0));
            }
            Stmt::Load { tile, src: place } | Stmt::Store { tile, dst: place } => {
                let verb = if matches!(s, Stmt::Load { .. }) { "load" } else { "store" };
                let line = match place {
                    Place::Global(v) => format!(
                        "k3k::{verb}_global<{}, {}, {}>(t{}, {});",
                        self.tile_ty(*tile),
                        c_type(k.tensors[v.tensor.0 as usize].dtype),
                        v.vec,
                        tile.0,
                        self.view_args(v)
                    ),
                    Place::Shared(r) => format!(
                        "k3k::{verb}_shared<{}, {}, {}>(t{}, {}, {}, {});",
                        self.tile_ty(*tile),
                        c_type(k.shared[r.buf.0 as usize].dtype),
                        self.shared_layout(r.buf),
                        tile.0,
                        self.shared_ptr(r),
                        r.row0,
                        r.col0
                    ),
                };
                self.line(&line);
            }
            Stmt::Scan { tile, scratch, op } => {
                let d = &k.tiles[tile.0 as usize];
                let op = match op {
                    ScanOp::Sum => "OpSum",
                };
                let line = format!(
                    "k3k::scan_cols<k3k::{op}, {}, {}, {}, {}>(t{}, s{});",
                    self.shared_layout(*scratch),
                    d.rows,
                    d.cols,
                    k.threads,
                    tile.0,
                    scratch.0
                );
                self.line(&line);
            }
            Stmt::LoadVec { vec, src: v } | Stmt::StoreVec { vec, dst: v } => {
                let f = if matches!(s, Stmt::LoadVec { .. }) { "load_vec" } else { "store_vec" };
                let line = format!(
                    "k3k::{f}(v{}, {}, {}, {}, {});",
                    vec.0,
                    tensor_arg(k, v.tensor),
                    self.e(&v.offset, Ctx::Scalar),
                    self.e(&v.stride, Ctx::Scalar),
                    self.e(&v.rows, Ctx::Scalar)
                );
                self.line(&line);
            }
            _ => unreachable!("not a tile statement"),
        }
    }
}
