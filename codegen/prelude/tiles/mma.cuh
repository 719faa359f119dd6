// ---------------------------------------------------------------------------------------------------------
// Tensor cores: mma.sync m16n8k16 with ldmatrix operand loads.
__device__ __forceinline__ void ldsm_x4(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma16816(bf16*, float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma16816(f16*, float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// B fragments for two neighbouring n8 fragments at (k0, n0) from a shared window stored [N][K] (TB) or [K][N].
template <bool TB, class LB>
__device__ __forceinline__ void ld_b_pair(unsigned* bb, const unsigned char* tb, int br0, int bc0, int k0, int n0) {
  const int lane = lane_id(), idx = lane >> 3, i = lane & 7;
  if (TB) {
    ldsm_x4(bb, smem_u32(tb + LB::off(br0 + n0 + i + ((idx >> 1) << 3), bc0 + k0 + ((idx & 1) << 3))));
  } else {
    ldsm_x4_t(bb, smem_u32(tb + LB::off(br0 + k0 + i + ((idx & 1) << 3), bc0 + n0 + ((idx >> 1) << 3))));
  }
}

// acc[M,N] += A[M,K] @ B[K,N]; A from a shared window stored [M][K] (or [K][M] when TA), B stored [K][N] (or
// [N][K] when TB). Each warp computes its own band of acc. A banded B (bshift > 0) starts bshift rows further
// down for each warp row band (block-diagonal products).
template <class H, int K, bool TA, class LA, bool TB, class LB, class ACC>
__device__ __forceinline__ void mma_ss(ACC& acc, const unsigned char* ta, int ar0, int ac0, const unsigned char* tb,
                                       int br0, int bc0, int bshift = 0) {
  typedef typename ACC::L L;
  const int lane = lane_id();
  br0 += L::G::wi() * bshift;
  const int m_base = L::G::wi() * L::WR, n_base = L::G::wj() * L::WC;
#pragma unroll
  for (int kk = 0; kk < K; kk += 16) {
    unsigned a[L::NB][4];
#pragma unroll
    for (int b = 0; b < L::NB; ++b) {
      const int m0 = m_base + b * 16;
      if (!TA) {
        ldsm_x4(a[b], smem_u32(ta + LA::off(ar0 + m0 + (lane & 15), ac0 + kk + ((lane >> 4) << 3))));
      } else {
        const int idx = lane >> 3, i = lane & 7;
        ldsm_x4_t(a[b], smem_u32(ta + LA::off(ar0 + kk + i + ((idx >> 1) << 3), ac0 + m0 + ((idx & 1) << 3))));
      }
    }
#pragma unroll
    for (int nf = 0; nf < L::NF; nf += 2) {
      unsigned bb[4];
      ld_b_pair<TB, LB>(bb, tb, br0, bc0, kk, n_base + nf * 8);
#pragma unroll
      for (int b = 0; b < L::NB; ++b) {
        mma16816((H*)0, acc.v[b][nf], a[b], bb);
        mma16816((H*)0, acc.v[b][nf + 1], a[b], bb + 2);
      }
    }
  }
}

// acc[M,N] += A[M,K] @ B[K,N] with A a 16-bit register tile on [WM, 1] warps (its packed pairs are the A
// fragments), B from shared memory as in mma_ss.
template <class H, int K, bool TB, class LB, class ACC, class AT>
__device__ __forceinline__ void mma_rs(ACC& acc, const AT& at, const unsigned char* tb, int br0, int bc0,
                                       int bshift = 0) {
  typedef typename ACC::L L;
  br0 += L::G::wi() * bshift;
  const int n_base = L::G::wj() * L::WC;
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
#pragma unroll
    for (int nf = 0; nf < L::NF; nf += 2) {
      unsigned bb[4];
      ld_b_pair<TB, LB>(bb, tb, br0, bc0, ks * 16, n_base + nf * 8);
#pragma unroll
      for (int b = 0; b < L::NB; ++b) {
        const unsigned a[4] = {at.v[b][2 * ks][0], at.v[b][2 * ks][1], at.v[b][2 * ks + 1][0], at.v[b][2 * ks + 1][1]};
        mma16816((H*)0, acc.v[b][nf], a, bb);
        mma16816((H*)0, acc.v[b][nf + 1], a, bb + 2);
      }
    }
  }
}

