//! The decode-side output projection with the fused gate: [`build_gate`].

use super::*;

/// What a gate kernel variant computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GateSpec {
    /// Multiply by `sigmoid(z)` (false: the plain W_UV projection).
    pub gate: bool,
    /// Latent width (512).
    pub dl: u32,
    /// Output head dim (128).
    pub dv: u32,
}

impl GateSpec {
    /// The K3 dims (512 -> 128).
    pub fn new(gate: bool) -> Self {
        GateSpec { gate, dl: 512, dv: 128 }
    }
}

knob_set! {
    /// The knobs of the gate projection ([`build_gate`]), read from a record by [`GateKnobs::from_knobs`]. The
    /// builder has always required all five, so none has an `absent` meaning.
    pub struct GateKnobs for "gated_mla_gate" {
        /// `BM`: tokens per block.
        bm: u32 = "BM" => { axis: "tokens per block" [16, 32, 64, 128], default: 64, },
        /// `BK`: latent slice per pipeline stage.
        bk: u32 = "BK" => { axis: "latent slice per pipeline stage" [32, 64], default: 64, },
        /// `STAGES`: the cp.async pipeline depth.
        stages: u32 = "STAGES" => { axis: "cp.async pipeline depth" [2, 3, 4], default: 3, },
        /// `WM`: warps along tokens.
        wm: u32 = "WM" => { axis: "warps along tokens" [1, 2, 4], default: 2, },
        /// `WN`: warps along the 128 outputs.
        wn: u32 = "WN" => { axis: "warps along the 128 outputs" [2, 4], default: 2, },
    }
}

/// The gate-projection tuning knobs (see [`GateKnobs`]).
pub fn gate_knob_space() -> KnobSpace {
    GateKnobs::space()
}

/// The gate-projection knobs used when no tuning record exists (see [`GateKnobs`]).
pub fn gate_default_knobs() -> Knobs {
    GateKnobs::defaults()
}

/// Build the decode-side output projection `y[t, h, :] = sigmoid(z[t, h, :]) * (o_latent[t, h, :] @
/// W_UV[h]^T)`.
///
/// Tensor arguments, in order: `o_latent [T, H, DL]` bf16, `w_uv [H, DV, DL]` bf16, `z [T, H, DV]` bf16 (when
/// gated), output `y [T, H, DV]` bf16. Grid: `(ceil(T / BM), H, 1)`.
pub fn build_gate(spec: &GateSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    const OP: &str = GateKnobs::OP;
    let GateKnobs { bm, bk, stages: st, wm, wn } = GateKnobs::from_knobs(knobs)?;
    let (dl, dv) = (spec.dl, spec.dv);
    if wm == 0 || wn == 0 || wm * wn > 16 || bm == 0 || bm % (16 * wm) != 0 || dv % (16 * wn) != 0 {
        return invalid(OP, knobs, format!("BM={bm} WM={wm} WN={wn} do not tile {bm}x{dv}"));
    }
    if bk == 0 || bk % 16 != 0 || dl % bk != 0 || st < 2 {
        return invalid(OP, knobs, format!("BK={bk} must be a multiple of 16 dividing {dl}, STAGES >= 2"));
    }
    let threads = 32 * wm * wn;
    // Measured over the space: 4+ warps, warp column bands of at most 64 and at most 64 accumulator
    // registers per thread assemble without spills at BK <= 64.
    if threads < 128 || dv / wn > 64 || bm * dv / threads > 64 || bk > 64 {
        return invalid(OP, knobs, "needs >= 4 warps, WN >= DV/64, <= 64 accumulator registers, BK <= 64".into());
    }
    let smem = 2 * (st * (bm + dv) * bk + if spec.gate { bm * dv } else { 0 }) as usize;
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, knobs, format!("{smem} bytes of shared memory"));
    }
    let name = format!(
        "k3k_mla_gate_wuv{}_{}x{}_{}",
        if spec.gate { "_sigmoid" } else { "" },
        dl,
        dv,
        knobs.id().to_lowercase()
    );
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(knobs.clone());
    let t = b.dim("T");
    let h = b.dim("H");
    let ol = b.tensor("o_latent", DType::Bf16, &[t.clone(), h.clone(), Expr::from(dl)], Access::Read);
    let w = b.tensor("w_uv", DType::Bf16, &[h.clone(), Expr::from(dv), Expr::from(dl)], Access::Read);
    let z = spec.gate.then(|| b.tensor("z", DType::Bf16, &[t.clone(), h.clone(), Expr::from(dv)], Access::Read));
    let y = b.tensor("y", DType::Bf16, &[t.clone(), h.clone(), Expr::from(dv)], Access::Write);
    b.grid(t.ceil_div(bm as i64), h.clone(), 1i64);

    let warps = [wm, wn];
    let sa = b.shared("sA", DType::Bf16, bm, bk, st, Swizzle::Xor16B);
    let sb = b.shared("sB", DType::Bf16, dv, bk, st, Swizzle::Xor16B);
    let sz = spec.gate.then(|| b.shared("sZ", DType::Bf16, bm, dv, 1, Swizzle::Xor16B));
    let acc = b.tile("acc", DType::F32, bm, dv, warps);
    let zt = spec.gate.then(|| b.tile("zt", DType::Bf16, bm, dv, warps));

    let t0 = b.let_("t0", Expr::block_idx(0) * bm as i64);
    let hh = b.let_("head", Expr::block_idx(1));
    let rows = b.let_("rows", t.clone() - t0.clone());
    let k_tiles = (dl / bk) as i64;
    let load_stage = |b: &mut KernelBuilder, kt: Expr| {
        let slot = kt.clone() % st as i64;
        let k0 = kt * bk as i64;
        let asrc = view(
            ol,
            (t0.clone() * h.clone() + hh.clone()) * dl as i64 + k0.clone(),
            h.clone() * dl as i64,
            rows.clone(),
            bk as i64,
            8,
        );
        let bsrc = view(w, hh.clone() * (dv * dl) as i64 + k0, dl as i64, dv as i64, bk as i64, 8);
        let (ad, bd) = (b.slot(sa, slot.clone()), b.slot(sb, slot));
        b.copy_async(ad, asrc);
        b.copy_async(bd, bsrc);
    };
    let out_off = (t0.clone() * h.clone() + hh.clone()) * dv as i64;
    if let (Some(z), Some(sz)) = (z, sz) {
        // Prefetch the gate tile with the first stage; it is read only in the epilogue.
        let zd = b.slot(sz, 0i64);
        b.copy_async(zd, view(z, out_off.clone(), h.clone() * dv as i64, rows.clone(), dv as i64, 8));
    }
    for i in 0..st - 1 {
        if (i as i64) < k_tiles {
            load_stage(&mut b, Expr::Int(i as i64));
        }
        b.commit();
    }
    b.map(acc, 0.0f64);
    b.for_("kt", 0i64, k_tiles, 1i64, |b, kt| {
        b.wait(st - 2);
        b.barrier();
        let next = &kt + (st - 1) as i64;
        b.if_(next.lt(k_tiles), |b| load_stage(b, next.clone()));
        b.commit();
        let slot = &kt % st as i64;
        let a = Operand::Shared { src: b.slot(sa, slot.clone()), transpose: false };
        let bt = Operand::Shared { src: b.slot(sb, slot), transpose: true };
        b.mma(acc, a, bt);
    });
    b.wait(0);
    if let (Some(zt), Some(sz)) = (zt, sz) {
        b.barrier();
        let zs = b.slot(sz, 0i64);
        b.load(zt, Place::Shared(zs));
        b.map(acc, el(acc) * el(zt).sigmoid());
    }
    b.store(acc, Place::Global(view(y, out_off, h * dv as i64, rows, dv as i64, 8)));
    Ok(b.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_record_reads_as_declared_and_every_knob_is_required() {
        let written =
            Knobs::new().with("BM", 64i64).with("BK", 64i64).with("STAGES", 3i64).with("WM", 2i64).with("WN", 2i64);
        assert_eq!(gate_default_knobs(), written);
        let t = GateKnobs::from_knobs(&written).unwrap();
        assert_eq!(t, GateKnobs { bm: 64, bk: 64, stages: 3, wm: 2, wn: 2 });
        let mut no_bk = written;
        no_bk.0.remove("BK");
        let e = build_gate(&GateSpec::new(true), &no_bk).unwrap_err().to_string();
        assert!(e.contains("`BK` is missing"), "{e}");
    }
}
