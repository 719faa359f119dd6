//! What a kernel variant computes, fixed by the problem rather than tuned: the fused epilogue ([`Epilogue`])
//! and the variant ([`GemmSpec`]: grouped or dense, routing weights, access widths).

/// The fused epilogue over the two halves of N (gate = first N/2 columns, up = last N/2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Epilogue {
    None,
    /// `h = [4 tanh(a/4) sigmoid(a)] * [25 tanh(b/25)]`.
    SituGlu,
    /// `h = silu(a) * b`.
    SwiGlu,
}

impl Epilogue {
    /// True for the gated forms (output has N/2 columns).
    pub fn is_glu(self) -> bool {
        self != Epilogue::None
    }
    /// Output column `j` of one row in f64 (the reference), from the row's product `acc` over all N columns (the
    /// gated forms: gate `acc[j]`, up `acc[j + N/2]`).
    pub fn reference(self, acc: &[f64], j: usize) -> f64 {
        let no = acc.len() / 2;
        match self {
            Epilogue::None => acc[j],
            Epilogue::SituGlu => k3k_reference::gemm::situ_glu(acc[j], acc[j + no]),
            Epilogue::SwiGlu => k3k_reference::gemm::swiglu(acc[j], acc[j + no]),
        }
    }
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Epilogue::None => "none",
            Epilogue::SituGlu => "situ_glu",
            Epilogue::SwiGlu => "swiglu",
        }
    }
}

/// What a kernel variant computes (fixed by the problem, not tuned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GemmSpec {
    /// Grouped over `offs` (false: one dense [M, K] x [N, K]^T product).
    pub grouped: bool,
    pub epilogue: Epilogue,
    /// Multiply each output row by a routing weight `p[r]`.
    pub row_scale: bool,
    /// Elements per global load of x and w: 8 when K % 8 == 0 (16-byte cp.async), else 4, 2 or 1.
    pub in_vec: u32,
    /// Elements per store of y: 8, 4, 2 or 1, the widest the output width divides (8: 16-byte stores).
    pub out_vec: u32,
}

impl GemmSpec {
    /// The variant for a problem shape: the widest accesses K and the output width allow.
    pub fn for_shape(grouped: bool, epilogue: Epilogue, row_scale: bool, k: usize, n_out: usize) -> Self {
        let in_vec = [8u32, 4, 2, 1].into_iter().find(|v| k.is_multiple_of(*v as usize)).unwrap_or(1);
        let out_vec = [8u32, 4, 2, 1].into_iter().find(|v| n_out.is_multiple_of(*v as usize)).unwrap_or(1);
        GemmSpec { grouped, epilogue, row_scale, in_vec, out_vec }
    }
    /// The alignment class, part of the tuning key.
    pub fn alignment(&self) -> String {
        format!("in{}_out{}", self.in_vec, self.out_vec)
    }
}
