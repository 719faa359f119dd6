//! The parts that the MXFP4 statements ([`crate::Stmt::DequantFp4`], [`crate::Stmt::DequantFp4Stream`],
//! [`crate::Stmt::Fp4Gemv`]) share: the weights' layout and scale promises, and the stream's prefetch views. The
//! fused GEMV's own fields and ring are in its extension module, [`crate::fp4_gemv`].

use crate::expr::Expr;
use crate::kernel::GlobalView;
use serde::{Deserialize, Serialize};

/// The weight layout and scale promises of an MXFP4 statement (see [`crate::Stmt::DequantFp4`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp4Flags {
    pub packed: bool,
    pub fold: bool,
    pub finite: bool,
}

/// The next views of a prefetching [`crate::Stmt::DequantFp4Stream`]: words and scales as the statement's own, and
/// `first` (a block-uniform bool): the statement loads its own views itself (the pipeline's first slice).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fp4Prefetch {
    pub words: GlobalView,
    pub scales: GlobalView,
    pub first: Expr,
}
