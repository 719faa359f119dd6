//! Threads regions with warp statements (shuffles and syncs), run in lockstep as the interpreter's
//! `lockstep` does.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    /// A threads region with warp statements (validated to sit at its top level), as the interpreter's
    /// `lockstep`: the statements between two warp statements run for every thread, each with its own
    /// variables and arrays (kept in its record of the lane area between segments, see `rt::Layout`), then the
    /// warp statement runs for all threads together (a shuffle: every thread evaluates its value at the end of
    /// the segment before, then `rt::host_warp` gives each its source lane's). Every thread starts from the
    /// variables' values at the region's start and no arrays; afterwards the variables and the block's arrays
    /// are as they were before the region.
    pub(super) fn lockstep(&mut self, body: &[Stmt]) -> Result<(), JitError> {
        let l = self.layout;
        let (n, stride) = (self.k.threads as i64, l.lane_stride as i64);
        let arr_words = ((l.size - l.arrays_at) / 8) as i64;
        let tys: Vec<Type> = self.types.vars.iter().map(|t| t.unwrap_or(Ty::I).clif()).collect();
        let lanes = self.b.ins().load(self.ptr, self.trusted, self.ctx, offset_of!(Ctx, lanes) as i32);
        let saved = self.b.ins().iadd_imm_s(lanes, n * stride);
        let frame_arrays = self.b.ins().iadd_imm_s(self.frame, l.arrays_at as i64);
        let entry: Vec<Value> = self.vars.iter().map(|v| self.b.use_var(*v)).collect();
        // Save the block's arrays; every thread starts with the entry values and arrays of length 0.
        self.copy_words(saved, frame_arrays, arr_words)?;
        self.for_range(n, &mut |s, t| {
            let rec = s.lane_record(lanes, t, stride);
            for (i, v) in entry.iter().enumerate() {
                s.b.ins().store(s.trusted, *v, rec, 8 * i as i32);
            }
            let z = s.iconst(0);
            for a in &l.arrays {
                let off = l.lane_arrays + (a - l.arrays_at);
                s.b.ins().store(s.trusted, z, rec, off as i32);
            }
            Ok(())
        })?;
        let t = self.b.declare_var(types::I64);
        let mut seg = 0;
        loop {
            let end = body[seg..].iter().position(rt::is_warp_stmt).map_or(body.len(), |p| seg + p);
            let warp = body.get(end);
            self.for_range(n, &mut |s, tv| {
                s.b.def_var(t, tv);
                let outer = s.thread.replace(t);
                let rec = s.lane_record(lanes, tv, stride);
                // The thread's state: its variables and arrays.
                for (i, ty) in tys.iter().enumerate() {
                    let v = s.b.ins().load(*ty, s.trusted, rec, 8 * i as i32);
                    s.b.def_var(s.vars[i], v);
                }
                let rec_arrays = s.b.ins().iadd_imm_s(rec, l.lane_arrays as i64);
                s.copy_words(frame_arrays, rec_arrays, arr_words)?;
                s.stmts(&body[seg..end])?;
                if let Some(Stmt::WarpShuffle { value, .. }) = warp {
                    let (v, _) = s.expr(value)?;
                    s.b.ins().store(s.trusted, v, rec, l.lane_value as i32);
                }
                for i in 0..tys.len() {
                    let v = s.b.use_var(s.vars[i]);
                    s.b.ins().store(s.trusted, v, rec, 8 * i as i32);
                }
                s.copy_words(rec_arrays, frame_arrays, arr_words)?;
                s.thread = outer;
                Ok(())
            })?;
            if let Some(w @ Stmt::WarpShuffle { .. }) = warp {
                let sp = self.b.ins().iconst(self.ptr, w as *const Stmt as i64);
                let ptr = self.ptr;
                self.call(rt::host_warp as *const u8, &[ptr, ptr], types::I32, &[self.ctx, sp]);
            }
            if end >= body.len() {
                break;
            }
            seg = end + 1;
        }
        // The block's arrays and the variables as before the region.
        self.copy_words(frame_arrays, saved, arr_words)?;
        for (v, e) in self.vars.clone().into_iter().zip(entry) {
            self.b.def_var(v, e);
        }
        Ok(())
    }

    /// The address of thread `t`'s record in the lane area.
    pub(super) fn lane_record(&mut self, lanes: Value, t: Value, stride: i64) -> Value {
        let off = self.b.ins().imul_imm_s(t, stride);
        self.b.ins().iadd(lanes, off)
    }

    /// Copy `words` 8-byte words from `src` to `dst` (distinct areas).
    pub(super) fn copy_words(&mut self, dst: Value, src: Value, words: i64) -> Result<(), JitError> {
        if words == 0 {
            return Ok(());
        }
        self.for_range(words, &mut |s, i| {
            let off = s.b.ins().imul_imm_s(i, 8);
            let (d, a) = (s.b.ins().iadd(dst, off), s.b.ins().iadd(src, off));
            let v = s.b.ins().load(types::I64, s.trusted, a, 0);
            s.b.ins().store(s.trusted, v, d, 0);
            Ok(())
        })
    }
}
