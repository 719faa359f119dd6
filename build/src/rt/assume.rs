//! Assumptions a faster kernel makes about its inputs, as values a launcher takes: the assumption shows in the
//! signature, and the value is made either by checking the data or by an `unsafe` assertion.

use super::Error;

/// Proof that every E8M0 scale byte of some MXFP4 weights is at most 128 or is 255 (NaN): what the kernels of
/// a request built with `Builder::assume_folded_scales()` need (they fold `2^126 * 2^(s-127)` into one f32
/// multiplier, which a byte over 128 overflows). Check the bytes once, when the weights are loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldedScales(());

impl FoldedScales {
    /// Check the scale bytes (`[.., K/32]` E8M0 bytes as stored): an error names the first byte that breaks the
    /// assumption.
    pub fn check(scale_bytes: &[u8]) -> Result<FoldedScales, Error> {
        match scale_bytes.iter().position(|&b| b > 128 && b != 255) {
            None => Ok(FoldedScales(())),
            Some(i) => Err(Error::Assumption {
                what: "FoldedScales::check".into(),
                why: format!(
                    "scale byte {i} is {} (2^{}); the folded-scale kernels need every byte <= 128 or 255: build \
                     without `assume_folded_scales()` for these weights",
                    scale_bytes[i],
                    scale_bytes[i] as i32 - 127
                ),
            }),
        }
    }

    /// Assert the assumption without checking.
    ///
    /// # Safety
    /// Every scale byte of the weights given to the launches this value is passed to is at most 128 or is
    /// 255; otherwise the kernels return wrong values (infinities) without an error.
    pub unsafe fn assume() -> FoldedScales {
        FoldedScales(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_the_first_wide_byte() {
        assert!(FoldedScales::check(&[0, 117, 128, 255]).is_ok());
        let e = FoldedScales::check(&[120, 128, 129, 200]).unwrap_err();
        assert!(e.to_string().contains("scale byte 2 is 129"), "{e}");
        assert!(FoldedScales::check(&[254]).is_err());
    }
}
