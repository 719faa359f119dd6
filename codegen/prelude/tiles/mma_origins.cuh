// k3k device prelude, `mma.sync` products addressed from per-thread origins (included only by kernels with
// `Kernel::mma_origins`, so every other kernel's source is unchanged). The same ldmatrix loads and products as
// mma_ss / mma_rs: each thread computes its row and column at step (0, 0) once per product, and every load adds
// its step (the k, m or n offset, a constant after unrolling) through `OffStep`, so the swizzle costs a few
// registers per product instead of address math per load (fewer instructions, but no faster in the kda intra
// kernel: H100, 2026-12-07, see kda's `MADDR` knob). (The register-tile moves `load_shared` /
// `store_shared` addressed the same way gave no fewer instructions in the kda intra kernel, 2026-12-07: their few
// accesses a statement do not pay for the setup.)
namespace k3k {

// SL<T, ROWS, COLS, SWZ>::off(r + dr, c + dc) for r, c >= 0 and steps dr, dc >= 0 known after unrolling. The
// swizzle's XOR repeats every RP rows and moves 16-byte chunks only inside groups of CP columns, so a dr that is
// a multiple of RP keeps the row's XOR and the multiple-of-CP part of dc adds a constant: only
// off(r, c + dc % CP) depends on the thread, and a loop over steps needs at most CP / 8 of those (the rest fold
// into the load's immediate offset).
template <class L> struct OffStep;
template <class T, int ROWS, int COLS, int SWZ> struct OffStep<SL<T, ROWS, COLS, SWZ>> {
  typedef SL<T, ROWS, COLS, SWZ> L;
  static constexpr int P = L::ROW_BYTES >= 128 ? 1 : 128 / L::ROW_BYTES;
  static constexpr int RP = L::M == 1 ? 1 : SWZ == 2 ? P * L::M : L::M;
  static constexpr int CP = L::M * 16 / (int)sizeof(T);
  __device__ __forceinline__ static int off(int r, int c, int dr, int dc) {
    if (dr % RP != 0) return L::off(r + dr, c + dc);
    return dr * L::ROW_BYTES + (dc - dc % CP) * (int)sizeof(T) + L::off(r, c + dc % CP);
  }
};

// The thread's origin of a B pair load (two neighbouring n8 fragments, see ld_b_pair) for the warp's columns
// n_base, and the pair at step (k0, n0) from it.
template <bool TB> struct BPairOrigin {
  int r, c;
  __device__ __forceinline__ BPairOrigin(int br0, int bc0, int n_base) {
    const int lane = lane_id(), idx = lane >> 3, i = lane & 7;
    r = TB ? br0 + n_base + i + ((idx >> 1) << 3) : br0 + i + ((idx & 1) << 3);
    c = TB ? bc0 + ((idx & 1) << 3) : bc0 + n_base + ((idx >> 1) << 3);
  }
};
template <bool TB, class LB>
__device__ __forceinline__ void ld_b_pair_o(unsigned* bb, unsigned tb, const BPairOrigin<TB>& o, int k0, int n0) {
  if (TB) {
    ldsm_x4(bb, tb + OffStep<LB>::off(o.r, o.c, n0, k0));
  } else {
    ldsm_x4_t(bb, tb + OffStep<LB>::off(o.r, o.c, k0, n0));
  }
}

// mma_ss (same arguments and result), addressed from origins: A's origin is row m_base + lane % 16 at column
// (lane / 16) * 8 with steps (b * 16, kk); transposed, row i + (idx / 2) * 8 at column m_base + (idx % 2) * 8 with
// steps (kk, b * 16).
template <class H, int K, bool TA, class LA, bool TB, class LB, class ACC>
__device__ __forceinline__ void mma_ss_o(ACC& acc, const unsigned char* ta, int ar0, int ac0, const unsigned char* tb,
                                         int br0, int bc0, int bshift = 0) {
  typedef typename ACC::L L;
  const int lane = lane_id(), idx = lane >> 3, i = lane & 7;
  br0 += L::G::wi() * bshift;
  const int m_base = L::G::wi() * L::WR, n_base = L::G::wj() * L::WC;
  const unsigned as = smem_u32(ta), bs = smem_u32(tb);
  const int ar = TA ? ar0 + i + ((idx >> 1) << 3) : ar0 + m_base + (lane & 15);
  const int ac = TA ? ac0 + m_base + ((idx & 1) << 3) : ac0 + ((lane >> 4) << 3);
  const BPairOrigin<TB> bo(br0, bc0, n_base);
#pragma unroll
  for (int kk = 0; kk < K; kk += 16) {
    unsigned a[L::NB][4];
#pragma unroll
    for (int b = 0; b < L::NB; ++b) {
      if (!TA) {
        ldsm_x4(a[b], as + OffStep<LA>::off(ar, ac, b * 16, kk));
      } else {
        ldsm_x4_t(a[b], as + OffStep<LA>::off(ar, ac, kk, b * 16));
      }
    }
#pragma unroll
    for (int nf = 0; nf < L::NF; nf += 2) {
      unsigned bb[4];
      ld_b_pair_o<TB, LB>(bb, bs, bo, kk, nf * 8);
#pragma unroll
      for (int b = 0; b < L::NB; ++b) {
        mma16816((H*)0, acc.v[b][nf], a[b], bb);
        mma16816((H*)0, acc.v[b][nf + 1], a[b], bb + 2);
      }
    }
  }
}

// mma_rs (same arguments and result), B addressed from origins.
template <class H, int K, bool TB, class LB, class ACC, class AT>
__device__ __forceinline__ void mma_rs_o(ACC& acc, const AT& at, const unsigned char* tb, int br0, int bc0,
                                         int bshift = 0) {
  typedef typename ACC::L L;
  br0 += L::G::wi() * bshift;
  const unsigned bs = smem_u32(tb);
  const BPairOrigin<TB> bo(br0, bc0, L::G::wj() * L::WC);
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
#pragma unroll
    for (int nf = 0; nf < L::NF; nf += 2) {
      unsigned bb[4];
      ld_b_pair_o<TB, LB>(bb, bs, bo, ks * 16, nf * 8);
#pragma unroll
      for (int b = 0; b < L::NB; ++b) {
        const unsigned a[4] = {at.v[b][2 * ks][0], at.v[b][2 * ks][1], at.v[b][2 * ks + 1][0], at.v[b][2 * ks + 1][1]};
        mma16816((H*)0, acc.v[b][nf], a, bb);
        mma16816((H*)0, acc.v[b][nf + 1], a, bb + 2);
      }
    }
  }
}

}  // namespace k3k
