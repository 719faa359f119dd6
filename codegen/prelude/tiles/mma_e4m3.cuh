// k3k device prelude, E4M3 products (included only by kernels with an E4M3 `Stmt::Mma`, so every other kernel's
// source is unchanged): mma.sync m16n8k32 .e4m3.e4m3 (sm_89+), both operands from shared windows of u32 words of
// four E4M3 codes, K-contiguous, loaded by ldmatrix on their b16 view (8 rows x 16 codes = one 8-bit fragment).
namespace k3k {

__device__ __forceinline__ void mma16832_e4m3(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// acc[M,N] += A[M,K] @ B[N,K]^T: A a shared window stored [M][KW words], B one stored [N][KW words] (read
// transposed), K = 4 KW codes in k32 steps of 8 words. Each warp computes its own band of acc. The A fragment of
// m16n8k32 is four 8x16-byte matrices (rows 0-7 / 8-15, bytes 0-15 / 16-31 of the step), the B fragment of two
// n8 columns four more, as the 16-bit mma_ss loads them.
template <int KW, class LA, class LB, class ACC>
__device__ __forceinline__ void mma_ss_e4m3(ACC& acc, const unsigned char* ta, int ar0, int ac0,
                                            const unsigned char* tb, int br0, int bc0) {
  typedef typename ACC::L L;
  const int lane = lane_id(), idx = lane >> 3, i = lane & 7;
  const int m_base = L::G::wi() * L::WR, n_base = L::G::wj() * L::WC;
#pragma unroll
  for (int kk = 0; kk < KW; kk += 8) {
    unsigned a[L::NB][4];
#pragma unroll
    for (int b = 0; b < L::NB; ++b) {
      ldsm_x4(a[b], smem_u32(ta + LA::off(ar0 + m_base + b * 16 + (lane & 15), ac0 + kk + ((lane >> 4) << 2))));
    }
#pragma unroll
    for (int nf = 0; nf < L::NF; nf += 2) {
      unsigned bb[4];
      ldsm_x4(bb, smem_u32(tb + LB::off(br0 + n_base + nf * 8 + i + ((idx >> 1) << 3), bc0 + kk + ((idx & 1) << 2))));
#pragma unroll
      for (int b = 0; b < L::NB; ++b) {
        mma16832_e4m3(acc.v[b][nf], a[b], bb);
        mma16832_e4m3(acc.v[b][nf + 1], a[b], bb + 2);
      }
    }
  }
}

}  // namespace k3k
