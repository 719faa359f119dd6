//! The knobs of `mx.quantize` and `mx.dequantize`, declared once ([`MxKnobs`]): both kernels take the same two,
//! the MX blocks a CTA handles and its warps. Both have been in every record since the operators were added
//! (2026-11-29, da0aafd), so neither has an `absent` meaning: a record without one is `KnobError::Missing`.

use crate::OpError;
use crate::typed_knobs::{Knobs, knob_set};

knob_set! {
    /// The knobs of both MX (de)quantization kernels, read from a record by [`MxKnobs::resolve`]. The builders
    /// also take values off the axes that pass [`MxKnobs::check`] (BR = 32 with W = 1, say).
    pub struct MxKnobs for "mx" {
        /// `BR`: MX blocks (rows of the `[R*K/32, 32]` view) per CTA, a multiple of 16 W, at most 512.
        br: u32 = "BR" => { axis: "MX blocks (rows of the [R*K/32, 32] view) per CTA" [64, 128, 256], default: 128, },
        /// `W`: warps per CTA, 1 to 16.
        w: u32 = "W" => { axis: "warps per CTA" [1, 2, 4, 8], default: 4, },
    }
}

impl MxKnobs {
    /// Read record `k` for operator `op` (named in errors) and [`check`](Self::check) it.
    pub fn resolve(op: &'static str, k: &Knobs) -> Result<Self, OpError> {
        let m = Self::from_knobs(k)?;
        m.check(op, k)?;
        Ok(m)
    }

    /// The values the kernels can be built with: W in 1..=16 and BR a positive multiple of 16 W (each warp takes
    /// whole 16-row fragments), at most 512.
    pub fn check(&self, op: &'static str, k: &Knobs) -> Result<(), OpError> {
        let MxKnobs { br, w } = *self;
        if w == 0 || w > 16 || br == 0 || !br.is_multiple_of(16 * w) || br > 512 {
            return Err(OpError::InvalidKnobs {
                op,
                knobs: k.to_string(),
                why: format!("BR={br} must be a multiple of 16*W (W={w}), W in 1..=16, BR <= 512"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typed_knobs::{KnobError, KnobValue};

    #[test]
    fn the_declaration_gives_the_old_space_and_defaults() {
        // The literal record and axes of the string-knob code this declaration replaced.
        assert_eq!(MxKnobs::defaults(), Knobs::new().with("BR", 128i64).with("W", 4i64));
        let s = MxKnobs::space();
        assert_eq!(s.axes.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["BR", "W"]);
        let ints = |v: &[i64]| v.iter().map(|&x| KnobValue::Int(x)).collect::<Vec<_>>();
        assert_eq!(s.axes[0].values, ints(&[64, 128, 256]));
        assert_eq!(s.axes[1].values, ints(&[1, 2, 4, 8]));
        assert!(s.accepted.is_empty());
    }

    #[test]
    fn records_read_and_check() {
        let rec = |br: i64, w: i64| Knobs::new().with("BR", br).with("W", w);
        assert_eq!(MxKnobs::resolve("mx.quantize", &rec(32, 1)).unwrap(), MxKnobs { br: 32, w: 1 });
        assert_eq!(MxKnobs::resolve("mx.quantize", &rec(512, 16)).unwrap(), MxKnobs { br: 512, w: 16 });
        for (br, w) in [(48, 2), (0, 1), (64, 0), (1024, 2), (256, 32)] {
            let e = MxKnobs::resolve("mx.dequantize", &rec(br, w)).unwrap_err();
            assert!(matches!(e, OpError::InvalidKnobs { op: "mx.dequantize", .. }), "{br} {w}: {e}");
            assert!(e.to_string().contains(&format!("BR={br} must be a multiple of 16*W (W={w})")), "{e}");
        }
        let missing = MxKnobs::resolve("mx.quantize", &Knobs::new().with("BR", 64i64)).unwrap_err();
        assert!(matches!(missing, OpError::Knob(KnobError::Missing { ref name }) if name == "W"), "{missing}");
        let word = MxKnobs::resolve("mx.quantize", &Knobs::new().with("BR", "big").with("W", 4i64)).unwrap_err();
        assert!(matches!(word, OpError::Knob(_)), "{word}");
    }
}
