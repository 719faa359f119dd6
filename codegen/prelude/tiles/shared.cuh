// ---------------------------------------------------------------------------------------------------------
// Shared tile layout: row-major, optionally with the 16-byte chunks of row r XOR-ed by r mod M (SWZ = 1) or by
// 2 (r / P) mod M (SWZ = 2: 4-byte elements moved as pairs; P rows per 128-byte bank line), where M is the
// largest power of two (<= 8) dividing the chunks per row (so a swizzled chunk stays inside its row).
__host__ __device__ constexpr int swizzle_group(int chunks) {
  return chunks % 8 == 0 ? 8 : chunks % 4 == 0 ? 4 : chunks % 2 == 0 ? 2 : 1;
}
template <class T, int ROWS, int COLS, int SWZ> struct SL {
  static constexpr int ROW_BYTES = COLS * (int)sizeof(T);
  static constexpr int M = SWZ ? swizzle_group(ROW_BYTES / 16) : 1;
  static constexpr int TILE_BYTES = ROWS * ROW_BYTES;
  __device__ __forceinline__ static int off(int r, int c) {
    int byte = c * (int)sizeof(T);
    // (SWZ = 2: P rows share a 128-byte bank line, so the XOR advances by 2 chunks every P rows.)
    constexpr int P = ROW_BYTES >= 128 ? 1 : 128 / ROW_BYTES;
    if (M > 1) byte ^= (SWZ == 2 ? ((r / P) << 5) & ((M - 1) << 4) : (r % M) << 4);
    return r * ROW_BYTES + byte;
  }
};

// ---------------------------------------------------------------------------------------------------------
// Global -> shared copy of a WR x WC window, VEC elements per access; invalid elements become zero.
template <class T, int VEC, int THREADS, class L, int WR, int WC>
__device__ __forceinline__ void copy_async(unsigned char* tile, int row0, int col0, const T* __restrict__ g,
                                           long long off, long long stride, long long rows, long long cols) {
  constexpr int VPR = WC / VEC, NV = WR * VPR, BYTES = VEC * (int)sizeof(T);
  // Window fully inside the view (the common case; the test is block-uniform): no per-access bounds, and when
  // every thread keeps its column across the unrolled steps, the addresses advance by constant strides (one
  // 64-bit add per access instead of a multiply, a compare and a select), the swizzle too when the row step
  // is a multiple of the swizzle period.
  if constexpr (BYTES == 16 && THREADS % VPR == 0 && NV % THREADS == 0) {
    if (rows >= WR && cols >= WC) {
      constexpr int RSTEP = THREADS / VPR;
      const int r0 = (int)threadIdx.x / VPR, c = ((int)threadIdx.x % VPR) * VEC;
      const T* src = g + off + (long long)r0 * stride + c;
      const long long sstep = (long long)RSTEP * stride;
      if constexpr (RSTEP % L::M == 0) {
        // (row0 + r0 + k*RSTEP) % M == (row0 + r0) % M: the swizzled chunk is the same for every step.
        const unsigned dst = smem_u32(tile + L::off(row0 + r0, col0 + c));
#pragma unroll
        for (int k = 0; k < NV / THREADS; ++k) {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + k * RSTEP * L::ROW_BYTES),
                       "l"(src + k * sstep));
        }
      } else {
#pragma unroll
        for (int k = 0; k < NV / THREADS; ++k) {
          const unsigned dst = smem_u32(tile + L::off(row0 + r0 + k * RSTEP, col0 + c));
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + k * sstep));
        }
      }
      return;
    }
  }
  // Partial windows (16-byte chunks, whole rows per pass): every thread keeps one column and steps down by RSTEP rows,
  // so its column bounds, source pointer and (RSTEP a multiple of the swizzle period) shared offset are set up
  // once and each chunk costs a compare, selects, a pointer add and the copy. Bounds are clamped to the window
  // once so the per-chunk compares are 32-bit. Same copies and zero fills as the general loop below. Only for
  // at most four chunks per thread: with more, the precomputed addresses raise register pressure elsewhere.
  constexpr int RSTEP = THREADS / VPR;
  if constexpr (BYTES == 16 && THREADS % VPR == 0 && RSTEP > 0 && RSTEP % L::M == 0 && NV % THREADS == 0 &&
                NV / THREADS <= 4) {
    const int r0 = (int)threadIdx.x / VPR, c = ((int)threadIdx.x % VPR) * VEC;
    const int rows_c = rows <= 0 ? 0 : rows >= WR ? WR : (int)rows;
    const long long cv = cols - c;
    const int nc = cv <= 0 ? 0 : cv >= VEC ? VEC : (int)cv;
    const T* p = g + off + (long long)r0 * stride + c;
    const long long pstep = (long long)RSTEP * stride;
    const unsigned d0 = smem_u32(tile + L::off(row0 + r0, col0 + c));
#pragma unroll
    for (int it = 0; it < NV / THREADS; ++it) {
      const int n = (r0 + it * RSTEP < rows_c) ? nc : 0;
      const T* q = p + it * pstep;  // formed unconditionally (plain adds), used only when in bounds
      const T* src = n > 0 ? q : g;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d0 + it * RSTEP * L::ROW_BYTES), "l"(src),
                   "r"(n * (int)sizeof(T)));
    }
    return;
  }
#pragma unroll
  for (int i0 = 0; i0 < NV; i0 += THREADS) {
    const int i = i0 + (int)threadIdx.x;
    if (NV % THREADS == 0 || i < NV) {
      const int r = i / VPR, c = (i % VPR) * VEC;
      unsigned char* dst = tile + L::off(row0 + r, col0 + c);
      const long long cv = cols - c;
      const int n = (r < rows && cv > 0) ? (cv >= VEC ? VEC : (int)cv) : 0;
      const T* src = n > 0 ? g + off + (long long)r * stride + c : g;
      if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                     "r"(n * (int)sizeof(T)));
      } else if constexpr (BYTES == 8 || BYTES == 4) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_u32(dst)), "l"(src), "n"(BYTES),
                     "r"(n * (int)sizeof(T)));
      } else {
        const unsigned char* s = (const unsigned char*)src;
#pragma unroll
        for (int e = 0; e < BYTES; ++e) dst[e] = e < n * (int)sizeof(T) ? s[e] : (unsigned char)0;
      }
    }
  }
}
__device__ __forceinline__ void async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waiting also fences the async proxy, so what the copies (or this thread's plain stores) wrote is visible to
// wgmma and the bulk-copy engine after the following barrier.
template <int N> __device__ __forceinline__ void async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

