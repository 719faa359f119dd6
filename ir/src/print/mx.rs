//! The MXFP4 statements: shared and streamed FP4 decodes and the FP4 GEMV (printed by [`fp4_gemv`]).

mod fp4_gemv;

use super::*;

/// Print one MXFP4 statement.
pub(super) fn mx_stmt(k: &Kernel, st: &Stmt, pad: &str, s: &mut String) {
    match st {
        Stmt::Fp4Gemv(g) => fp4_gemv::fp4_gemv_stmt(k, g, pad, s),
        Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch } => {
            let _ = writeln!(
                s,
                "{pad}{} = dequant_fp4_stream({}, {}){}{}",
                k.tiles[tile.0 as usize].name,
                global_view(k, words),
                global_view(k, scales),
                fp4_flags(*packed, *fold, *finite),
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
                "{pad}{} = dequant_fp4({}, {}){}",
                k.tiles[tile.0 as usize].name,
                shared_ref(k, words),
                shared_ref(k, scales),
                fp4_flags(*packed, *fold, *finite)
            );
        }
        _ => unreachable!("not a MXFP4 statement"),
    }
}

/// The weight flags of a decode statement as printed: ` packed` or ` natural`, then ` fold` and ` finite` where set.
fn fp4_flags(packed: bool, fold: bool, finite: bool) -> String {
    let layout = if packed { " packed" } else { " natural" };
    format!("{layout}{}{}", if fold { " fold" } else { "" }, if finite { " finite" } else { "" })
}
