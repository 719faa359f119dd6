// k3k device prelude, part 2: register tiles, row vectors, shared tiles, copies, reductions, tensor-core
// products. Generic primitives only (ThunderKittens-style); the IR decides what runs on which tiles.
namespace k3k {

// The 32-bit shared address of a generic pointer into shared memory, by the compiler's intrinsic: it folds into a
// 32-bit `shared base + offset` instead of materializing the 64-bit generic address (shared window + CTA id) at
// every use (the asm `cvta.to.shared.u64` form cost 3-4 instructions per ldmatrix / cp.async / shared access:
// -11% SASS in the kda state pass's chunk loop, codegen v8). Kernels of 384 threads or more and wgmma kernels keep
// the asm form (the renderer defines K3K_SMEM_ASM_CVTA for them, see `smem_asm_cvta` in render.rs): folded
// addresses stay live longer, a 384-thread gated-MLA prefill kernel (BM=192 BN=96, 168 registers at most) spilled
// 72 bytes with them, and the wgmma prefill ran 1.8% slower.
__device__ __forceinline__ unsigned smem_u32_folded(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
#ifdef K3K_SMEM_ASM_CVTA
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return (unsigned)a;
}
#else
__device__ __forceinline__ unsigned smem_u32(const void* p) { return smem_u32_folded(p); }
#endif
// A wgmma descriptor whose start-address field (bits 0-13, 16-byte units) moves by UNITS: added to the low word
// only (the field never carries: tiles end below the 256 KiB the 18-bit address spans), the high word untouched.
__device__ __forceinline__ unsigned long long wgmma_desc_add(unsigned long long d, unsigned units) {
  return (d & 0xFFFFFFFF00000000ull) | (unsigned long long)((unsigned)d + units);
}
__device__ __forceinline__ float shfl_xor(float v, int m) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(m));
  return r;
}
// The block's barrier: every thread, or with a producer warp (`K3K_CONSUMER_THREADS` defined: the consumer
// threads, warps 0.., the producer warp after them; see `Stmt::Producer`) the consumer threads only, on named
// barrier 1 (barrier 0 is __syncthreads, which the kernel's top-level barriers use with the producer warp).
__device__ __forceinline__ void barrier() {
#ifdef K3K_CONSUMER_THREADS
  asm volatile("bar.sync 1, %0;" ::"n"(K3K_CONSUMER_THREADS) : "memory");
#else
  __syncthreads();
#endif
}

// Ping-pong turns of the consumer warpgroups (`Stmt::InTurn`): warpgroup w's turn is named barrier 2 + w over
// 256 threads, completed by w's sync and the arrival of warpgroup w - 1 (mod WGS) passing the turn on.
// Warpgroup 0 holds the first turn (it arrives on its own barrier once).
__device__ __forceinline__ void turn_start() {
  if (threadIdx.x < 128) asm volatile("bar.arrive 2, 256;" ::: "memory");
}
template <int WGS>
__device__ __forceinline__ void turn_take() {
  asm volatile("bar.sync %0, 256;" ::"r"(2 + (int)(threadIdx.x / 128)) : "memory");
}
template <int WGS>
__device__ __forceinline__ void turn_pass() {
  asm volatile("bar.arrive %0, 256;" ::"r"(2 + ((int)(threadIdx.x / 128) + 1) % WGS) : "memory");
}

// ---------------------------------------------------------------------------------------------------------
// Warp grid: the warp's position in a WM x WN grid, column-major so that a [WM, 1] tile's row bands line up
// with those of any [WM, WN] tile; warps beyond WM*WN hold replicas.
template <int WM, int WN> struct WarpGrid {
  __device__ static int p() { return warp_id() % (WM * WN); }
  __device__ static int wi() { return p() % WM; }
  __device__ static int wj() { return p() / WM; }
  __device__ static int replica() { return warp_id() / (WM * WN); }
};

// Register tile layout: per warp a (R/WM) x (C/WN) band of 16x8 fragments in the m16n8 accumulator layout.
// Element j (0..3) of fragment (b, f): row b*16 + lane/4 + 8*(j/2), col f*8 + 2*(lane%4) + j%2.
template <int R, int C, int WM, int WN> struct RTLayout {
  static constexpr int WR = R / WM, WC = C / WN, NB = WR / 16, NF = WC / 8;
  typedef WarpGrid<WM, WN> G;
  __device__ static int row(int b, int j) { return G::wi() * WR + b * 16 + (lane_id() >> 2) + ((j >> 1) << 3); }
  __device__ static int col(int f, int j) { return G::wj() * WC + f * 8 + ((lane_id() & 3) << 1) + (j & 1); }
};

// f32 register tile.
template <class T, int R, int C, int WM, int WN> struct RT : RTLayout<R, C, WM, WN> {
  typedef RTLayout<R, C, WM, WN> L;
  typedef float elem_t;
  typedef float stor_t;  // what one element is stored as
  float v[L::NB][L::NF][4];
  __device__ __forceinline__ float get(int b, int f, int j) const { return v[b][f][j]; }
  __device__ __forceinline__ void set2(int b, int f, int jp, float e0, float e1) {
    v[b][f][2 * jp] = e0;
    v[b][f][2 * jp + 1] = e1;
  }
};
// i32 register tile (expressions see 64-bit ints).
template <int R, int C, int WM, int WN> struct RT<int, R, C, WM, WN> : RTLayout<R, C, WM, WN> {
  typedef RTLayout<R, C, WM, WN> L;
  typedef long long elem_t;
  typedef int stor_t;
  int v[L::NB][L::NF][4];
  __device__ __forceinline__ long long get(int b, int f, int j) const { return v[b][f][j]; }
  __device__ __forceinline__ void set2(int b, int f, int jp, long long e0, long long e1) {
    v[b][f][2 * jp] = (int)e0;
    v[b][f][2 * jp + 1] = (int)e1;
  }
};
// 16-bit register tiles: pairs of neighbouring columns packed in one register (directly an mma A fragment).
template <class H, int R, int C, int WM, int WN> struct RT16 : RTLayout<R, C, WM, WN> {
  typedef RTLayout<R, C, WM, WN> L;
  typedef float elem_t;
  typedef H stor_t;
  unsigned v[L::NB][L::NF][2];
  __device__ __forceinline__ float get(int b, int f, int j) const {
    return (j & 1) ? unpack_hi((H*)0, v[b][f][j >> 1]) : unpack_lo((H*)0, v[b][f][j >> 1]);
  }
  __device__ __forceinline__ void set2(int b, int f, int jp, float e0, float e1) { v[b][f][jp] = pack2((H*)0, e0, e1); }
};
template <int R, int C, int WM, int WN> struct RT<bf16, R, C, WM, WN> : RT16<bf16, R, C, WM, WN> {};
template <int R, int C, int WM, int WN> struct RT<f16, R, C, WM, WN> : RT16<f16, R, C, WM, WN> {};

// Row vector: the values of the rows a thread holds in a matching [R, *] tile on WM x WN warps.
template <int R, int WM, int WN> struct RV {
  static constexpr int NB = R / WM / 16;
  typedef WarpGrid<WM, WN> G;
  float v[NB][2];
  __device__ static int row(int b, int h) { return G::wi() * (R / WM) + b * 16 + (lane_id() >> 2) + h * 8; }
};

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

// ---------------------------------------------------------------------------------------------------------
// Element moves between register tiles and memory. Each thread moves its own neighbouring-column pairs.
template <class A, class B> struct same_t { static constexpr bool value = false; };
template <class A> struct same_t<A, A> { static constexpr bool value = true; };
template <class T> __device__ __forceinline__ float ld_elem(const T* p, float*) { return to_f32(*p); }
template <class T> __device__ __forceinline__ long long ld_elem(const T* p, long long*) { return to_i64(*p); }
template <class T> __device__ __forceinline__ void st_elem(T* p, float v) { *p = from_f32<T>::cvt(v); }
template <class T> __device__ __forceinline__ void st_elem(T* p, long long v) { *p = from_i64<T>::cvt(v); }
// Two neighbouring elements moved as one access (the view's VEC >= 2 promises the alignment).
template <class T> struct alignas(2 * sizeof(T)) Pair { T a, b; };
// Store two neighbouring elements as one access; f32 -> bf16/f16 pairs convert with one packed instruction.
template <class T, class E> __device__ __forceinline__ void st_pair(T* p, E e0, E e1) {
  Pair<T> pr;
  st_elem(&pr.a, e0);
  st_elem(&pr.b, e1);
  *(Pair<T>*)p = pr;
}
__device__ __forceinline__ void st_pair(bf16* p, float e0, float e1) { *(unsigned*)p = pack2((bf16*)0, e0, e1); }
__device__ __forceinline__ void st_pair(f16* p, float e0, float e1) { *(unsigned*)p = pack2((f16*)0, e0, e1); }

template <class TT, class T, int VEC>
__device__ __forceinline__ void load_global(TT& t, const T* __restrict__ g, long long off, long long stride,
                                            long long rows, long long cols) {
  typedef typename TT::elem_t E;
  // One 64-bit row address per row of the thread (the row does not depend on the fragment column f), the
  // columns as offsets from it: the row multiply and its bounds test leave the column loop.
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = TT::L::row(b, 2 * jp);
      const bool rok = r < rows;
      const T* const rp = g + off + (long long)r * stride;
#pragma unroll
      for (int f = 0; f < TT::L::NF; ++f) {
        const int c = TT::L::col(f, 2 * jp);
        E e0 = 0, e1 = 0;
        if (rok) {
          const T* p = rp + c;
          if (VEC >= 2 && c + 1 < cols) {
            const Pair<T> pr = *(const Pair<T>*)p;
            e0 = ld_elem(&pr.a, (E*)0);
            e1 = ld_elem(&pr.b, (E*)0);
          } else {
            if (c < cols) e0 = ld_elem(p, (E*)0);
            if (c + 1 < cols) e1 = ld_elem(p + 1, (E*)0);
          }
        }
        t.set2(b, f, jp, e0, e1);
      }
    }
}

// The packed 16-bit pair (element 2 jp, 2 jp + 1 of fragment (b, f)) of an f32 or 16-bit register tile as T.
template <class T, class TT> __device__ __forceinline__ unsigned packed_pair(const TT& t, int b, int f, int jp) {
  if constexpr (same_t<typename TT::stor_t, T>::value) {
    return t.v[b][f][jp];
  } else {
    return pack2((T*)0, t.get(b, f, 2 * jp), t.get(b, f, 2 * jp + 1));
  }
}

// The words of `w` (this lane's packed pair of each of N neighbouring fragments, N = 2 or 4, in the quad of lanes
// that shares a row) regrouped so that lane q of the quad holds N consecutive pairs of one fragment: fragment q
// (N = 4: pairs 0..3, 16 bytes) or fragment q % 2 (N = 2: pairs 2 (q / 2)... of it, 8 bytes). A transpose of the
// quad's N x N (lane, fragment) words by N / 2 rounds of exchanges with the lanes q ^ 2 and q ^ 1 (N = 4) or one
// with q ^ 1 (N = 2); every lane of the warp takes part (call it outside any row test).
template <int N> __device__ __forceinline__ void quad_transpose(unsigned (&w)[N]) {
  const int q = lane_id() & 3;
  if constexpr (N == 4) {
    const bool hi2 = (q & 2) != 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const unsigned r = __shfl_xor_sync(0xffffffffu, hi2 ? w[k] : w[k + 2], 2);
      if (hi2) w[k] = r; else w[k + 2] = r;
    }
  }
  const bool hi1 = (q & 1) != 0;
#pragma unroll
  for (int k = 0; k < N; k += 2) {
    const unsigned r = __shfl_xor_sync(0xffffffffu, hi1 ? w[k] : w[k + 1], 1);
    if (hi1) w[k] = r; else w[k + 1] = r;
  }
}

// One 16- or 8-byte global store, as the vector instruction itself (NVRTC split a plain `uint4` store of
// regrouped words into four 32-bit ones where it could prove the store unconditional).
__device__ __forceinline__ void st_global_v4(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
  asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %0; st.global.v4.b32 [g], {%1, %2, %3, %4}; }"
               ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void st_global_v2(void* p, unsigned a, unsigned b) {
  asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %0; st.global.v2.b32 [g], {%1, %2}; }"
               ::"l"(p), "r"(a), "r"(b) : "memory");
}

// 16-bit stores of N neighbouring fragments per row as one 8- or 16-byte access per lane (`quad_transpose`):
// a warp instruction then writes 32 or 64 contiguous bytes of each of its 8 rows instead of 16 (the pair path:
// half a sector per row, twice the L2 sectors and 2-4 times the L1 requests per byte). Columns past the view take
// the pair and element path on the regrouped words.
template <int N, class TT, class T>
__device__ __forceinline__ void store_global_wide(const TT& t, T* __restrict__ g, long long off, long long stride,
                                                  long long rows, long long cols) {
  static_assert(sizeof(T) == 2 && TT::L::NF % N == 0, "wide stores: 16-bit outputs, whole fragment groups");
  const int q = lane_id() & 3;
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = TT::L::row(b, 2 * jp);
      T* const rp = g + off + (long long)r * stride;
#pragma unroll
      for (int f0 = 0; f0 < TT::L::NF; f0 += N) {
        unsigned w[N];
#pragma unroll
        for (int i = 0; i < N; ++i) w[i] = packed_pair<T>(t, b, f0 + i, jp);
        quad_transpose<N>(w);
        if (r >= rows) continue;
        // N = 4: lane q holds fragment f0 + q, columns 0..7; N = 2: fragment f0 + q % 2, columns 4 (q / 2)...
        const int c = N == 4 ? TT::L::col(f0 + q, 0) - 2 * q : TT::L::col(f0 + (q & 1), 0) - 2 * (q & 1);
        T* const p = rp + c;
        if (c + 2 * N - 1 < cols) {
          if constexpr (N == 4) {
            st_global_v4(p, w[0], w[1], w[2], w[3]);
          } else {
            st_global_v2(p, w[0], w[1]);
          }
        } else {
#pragma unroll
          for (int i = 0; i < N; ++i) {
            if (c + 2 * i + 1 < cols) {
              *(unsigned*)(p + 2 * i) = w[i];
            } else if (c + 2 * i < cols) {
              *(unsigned short*)(p + 2 * i) = (unsigned short)(w[i] & 0xffffu);
            }
          }
        }
      }
    }
}

template <class TT, class T, int VEC>
__device__ __forceinline__ void store_global(const TT& t, T* __restrict__ g, long long off, long long stride,
                                             long long rows, long long cols) {
  if (TT::L::G::replica() != 0) return;
  // 16-bit outputs from f32 or 16-bit tiles, rows aligned to the access (the view's promise): the wide path.
  if constexpr (sizeof(T) == 2 && same_t<typename TT::elem_t, float>::value && VEC >= 8 && TT::L::NF % 4 == 0) {
    store_global_wide<4>(t, g, off, stride, rows, cols);
    return;
  } else if constexpr (sizeof(T) == 2 && same_t<typename TT::elem_t, float>::value && VEC >= 4 &&
                       TT::L::NF % 2 == 0) {
    store_global_wide<2>(t, g, off, stride, rows, cols);
    return;
  }
  // As `load_global`: one row address per row of the thread.
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = TT::L::row(b, 2 * jp);
      if (r >= rows) continue;
      T* const rp = g + off + (long long)r * stride;
#pragma unroll
      for (int f = 0; f < TT::L::NF; ++f) {
        const int c = TT::L::col(f, 2 * jp);
        T* p = rp + c;
        if (VEC >= 2 && c + 1 < cols) {
          // Both elements valid and pair-aligned (the program promised offset and stride are multiples of VEC).
          st_pair(p, t.get(b, f, 2 * jp), t.get(b, f, 2 * jp + 1));
        } else {
          if (c < cols) st_elem(p, t.get(b, f, 2 * jp));
          if (c + 1 < cols) st_elem(p + 1, t.get(b, f, 2 * jp + 1));
        }
      }
    }
}


// Shared tiles whose rows hold whole pairs move a thread's neighbouring-column pair as one access (the swizzle
// permutes 16-byte chunks, so an even column and the next share a chunk); 16-bit tiles into a buffer of their
// own type move their packed register directly. Windows at odd columns take the element path.
template <class TT, class T, class L>
__device__ __forceinline__ void load_shared(TT& t, const unsigned char* tile, int row0, int col0) {
  typedef typename TT::elem_t E;
  if (L::ROW_BYTES % (2 * (int)sizeof(T)) == 0 && (col0 & 1) == 0) {
#pragma unroll
    for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
      for (int f = 0; f < TT::L::NF; ++f)
#pragma unroll
        for (int jp = 0; jp < 2; ++jp) {
          const unsigned char* p = tile + L::off(row0 + TT::L::row(b, 2 * jp), col0 + TT::L::col(f, 2 * jp));
          if constexpr (same_t<typename TT::stor_t, T>::value && sizeof(T) == 2) {
            t.v[b][f][jp] = *(const unsigned*)p;
          } else {
            const Pair<T> pr = *(const Pair<T>*)p;
            t.set2(b, f, jp, ld_elem(&pr.a, (E*)0), ld_elem(&pr.b, (E*)0));
          }
        }
    return;
  }
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int f = 0; f < TT::L::NF; ++f)
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const int r = row0 + TT::L::row(b, 2 * jp), c = col0 + TT::L::col(f, 2 * jp);
        t.set2(b, f, jp, ld_elem((const T*)(tile + L::off(r, c)), (E*)0),
               ld_elem((const T*)(tile + L::off(r, c + 1)), (E*)0));
      }
}

// `Stmt::StoreCols`: columns C0 .. C0+W of the tile (multiples of 8: whole fragments) into the window at
// (row0, col0); a thread's neighbouring-column pairs move as one access where the rows allow.
template <class TT, class T, class L, int C0, int W>
__device__ __forceinline__ void store_shared_cols(const TT& t, unsigned char* tile, int row0, int col0) {
  if (TT::L::G::replica() != 0) return;
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int f = 0; f < TT::L::NF; ++f) {
      // The fragment's first column (the lane's offset inside it is below 8).
      const int c8 = TT::L::G::wj() * TT::L::WC + f * 8;
      if (c8 < C0 || c8 >= C0 + W) continue;
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const int r = row0 + TT::L::row(b, 2 * jp), c = col0 + TT::L::col(f, 2 * jp) - C0;
        if (L::ROW_BYTES % (2 * (int)sizeof(T)) == 0 && (col0 & 1) == 0) {
          unsigned char* p = tile + L::off(r, c);
          if constexpr (same_t<typename TT::stor_t, T>::value && sizeof(T) == 2) {
            *(unsigned*)p = t.v[b][f][jp];
          } else {
            st_pair((T*)p, t.get(b, f, 2 * jp), t.get(b, f, 2 * jp + 1));
          }
        } else {
          st_elem((T*)(tile + L::off(r, c)), t.get(b, f, 2 * jp));
          st_elem((T*)(tile + L::off(r, c + 1)), t.get(b, f, 2 * jp + 1));
        }
      }
    }
}

template <class TT, class T, class L>
__device__ __forceinline__ void store_shared(const TT& t, unsigned char* tile, int row0, int col0) {
  if (TT::L::G::replica() != 0) return;
  if (L::ROW_BYTES % (2 * (int)sizeof(T)) == 0 && (col0 & 1) == 0) {
#pragma unroll
    for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
      for (int f = 0; f < TT::L::NF; ++f)
#pragma unroll
        for (int jp = 0; jp < 2; ++jp) {
          unsigned char* p = tile + L::off(row0 + TT::L::row(b, 2 * jp), col0 + TT::L::col(f, 2 * jp));
          if constexpr (same_t<typename TT::stor_t, T>::value && sizeof(T) == 2) {
            *(unsigned*)p = t.v[b][f][jp];
          } else {
            st_pair((T*)p, t.get(b, f, 2 * jp), t.get(b, f, 2 * jp + 1));
          }
        }
    return;
  }
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int f = 0; f < TT::L::NF; ++f)
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const int r = row0 + TT::L::row(b, 2 * jp), c = col0 + TT::L::col(f, 2 * jp);
        st_elem((T*)(tile + L::off(r, c)), t.get(b, f, 2 * jp));
        st_elem((T*)(tile + L::off(r, c + 1)), t.get(b, f, 2 * jp + 1));
      }
}

template <class V, class T>
__device__ __forceinline__ void load_vec(V& v, const T* __restrict__ g, long long off, long long stride, long long rows) {
#pragma unroll
  for (int b = 0; b < V::NB; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = V::row(b, h);
      v.v[b][h] = r < rows ? to_f32(g[off + (long long)r * stride]) : 0.0f;
    }
}

template <class V, class T>
__device__ __forceinline__ void store_vec(const V& v, T* __restrict__ g, long long off, long long stride, long long rows) {
  if (V::G::replica() != 0 || V::G::wj() != 0 || (lane_id() & 3) != 0) return;
#pragma unroll
  for (int b = 0; b < V::NB; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = V::row(b, h);
      if (r < rows) g[off + (long long)r * stride] = from_f32<T>::cvt(v.v[b][h]);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Row reductions (over a warp's whole column band; the tile must have WN = 1).
struct OpSum { __device__ static float f(float a, float b) { return a + b; } };
struct OpMax { __device__ static float f(float a, float b) { return fmaxf(a, b); } };
struct OpMin { __device__ static float f(float a, float b) { return fminf(a, b); } };

template <class OP, class V, class TT>
__device__ __forceinline__ void reduce_rows(V& out, const TT& t, bool accumulate) {
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float a = OP::f(t.get(b, 0, 2 * h), t.get(b, 0, 2 * h + 1));
#pragma unroll
      for (int f = 1; f < TT::L::NF; ++f) a = OP::f(a, OP::f(t.get(b, f, 2 * h), t.get(b, f, 2 * h + 1)));
      a = OP::f(a, shfl_xor(a, 1));
      a = OP::f(a, shfl_xor(a, 2));
      out.v[b][h] = accumulate ? OP::f(out.v[b][h], a) : a;
    }
}

// ---------------------------------------------------------------------------------------------------------
// Inclusive scan down the rows of each column of an f32 R x C register tile, through an f32 shared scratch
// tile of layout L: store, one thread per column scans sequentially (row 0 first, so the result is bitwise
// the interpreter's), reload. Begins with a barrier so earlier readers of the scratch are done.
template <class OP, class L, int R, int C, int THREADS, class TT>
__device__ __forceinline__ void scan_cols(TT& t, unsigned char* scratch) {
  barrier();
  store_shared<TT, float, L>(t, scratch, 0, 0);
  barrier();
  for (int c = (int)threadIdx.x; c < C; c += THREADS) {
    if constexpr (R <= 64) {
      // The whole column first (independent loads in flight together), then the same sequential sums.
      float v[R];
#pragma unroll
      for (int r = 0; r < R; ++r) v[r] = *(const float*)(scratch + L::off(r, c));
#pragma unroll
      for (int r = 1; r < R; ++r) {
        v[r] = OP::f(v[r - 1], v[r]);
        *(float*)(scratch + L::off(r, c)) = v[r];
      }
    } else {
      float s = *(const float*)(scratch + L::off(0, c));
#pragma unroll
      for (int r = 1; r < R; ++r) {
        float* p = (float*)(scratch + L::off(r, c));
        s = OP::f(s, *p);
        *p = s;
      }
    }
  }
  barrier();
  load_shared<TT, float, L>(t, scratch, 0, 0);
}

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

// ---------------------------------------------------------------------------------------------------------
// MXFP4 decode into a bf16 register tile (the A operand of mma_rs). Lane l (l = lane % 4) of a lane quad needs
// columns 2l + 8f + h (f = 0..3, h = 0..1) of each 32-column block: its fragment pair f is columns 2l + 8f and
// 2l + 8f + 1. Either way a pair becomes the bf16 bits of e2m1(q) * 2^-126 in both halves (sign at bit 15,
// exponent and mantissa bits at 8..6; e = 0 is the subnormal 0.5 * 2^-126), then one bf16x2 multiply by 2^126 *
// 2^(s-127) (exact: a power of two) gives the values; without `FOLD` (scale bytes above 128) two multiplies.
// - Packed layout (`k3k_ir::fp4`): word l of the block holds exactly the lane's eight values, pair f where
//   `fp4_packed_bits` builds it: pairs 0..2 at rotations by 0, 3 and 6 bits of the bit mask (one funnel shift
//   and one AND), pair 3 by one multiply that adds three shifted copies without carries, and the AND.
// - Natural layout (SPEC 1 bytes as words): the lane's pair f is byte l of word f; three prmt gather them into
//   one word with pair f in byte f (low nibble first), and per pair one prmt puts the low nibble (shifted up by
//   4) in byte 1 and the high nibble in byte 3, then sign bits stay and the three exponent/mantissa bits move
//   down 6.
__device__ __forceinline__ unsigned fp4_packed_bits(unsigned q, int f) {
  return f == 3 ? ((q & 0x001B001Bu) * 0x4108u) & 0x81C081C0u : __funnelshift_r(q, q, 3 * f) & 0x81C081C0u;
}
__device__ __forceinline__ unsigned hmul2_bf16(unsigned a, unsigned b) {
  unsigned r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
template <bool FOLD, bool FINITE> __device__ __forceinline__ unsigned fp4_scale2(unsigned s) {
  if (FOLD) {
    const unsigned m = s * 0x00800080u + 0x3F003F00u;  // bf16 2^(s-1) in both halves
    return (!FINITE && s == 255u) ? 0x7FC07FC0u : m;
  }
  const unsigned m = s == 0u ? 0x00400040u : s * 0x00800080u;  // bf16 2^(s-127); s = 0: subnormal 2^-127
  return (!FINITE && s == 255u) ? 0x7FC07FC0u : m;
}
template <bool FOLD> __device__ __forceinline__ unsigned fp4_scaled(unsigned v, unsigned scale2) {
  return FOLD ? hmul2_bf16(v, scale2) : hmul2_bf16(hmul2_bf16(v, 0x7E807E80u), scale2);
}
template <bool FOLD> __device__ __forceinline__ unsigned fp4_pair(unsigned q4, unsigned q, int f, unsigned scale2) {
  const unsigned u = __byte_perm(q4, q, (unsigned)(f | (f << 4) | ((4 + f) << 8) | ((4 + f) << 12)));
  return fp4_scaled<FOLD>((u & 0x80008000u) | ((u & 0x70007000u) >> 6), scale2);
}
template <bool FOLD> __device__ __forceinline__ unsigned fp4_pair_packed(unsigned q, int f, unsigned scale2) {
#ifdef K3K_XP_NOSCALE
  // Timing experiment (K3K_EXPERIMENT, wrong values on purpose): no scale multiply.
  return fp4_packed_bits(q, f) | (scale2 & 0u);
#else
  return fp4_scaled<FOLD>(fp4_packed_bits(q, f), scale2);
#endif
}
// Natural layout (SPEC 1 bytes as words: word w of a block holds columns 8w..8w+7): the lane's pair f is byte
// l of word f, so one 16-byte load of the block's four words (one swizzle chunk) and three prmt build the
// lane's packed word.
template <bool PACKED, bool FOLD, bool FINITE, class TT, class LQ, class LS>
__device__ __forceinline__ void dequant_fp4(TT& t, const unsigned char* qt, int qr0, int qc0, const unsigned char* st,
                                            int sr0, int sc0) {
  static_assert(TT::L::NF % 4 == 0, "dequant_fp4: 32-column blocks per warp");
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = TT::L::row(b, 2 * jp);
#pragma unroll
      for (int blk = 0; blk < TT::L::NF / 4; ++blk) {
        const int bi = TT::L::col(4 * blk, 0) >> 5;
        unsigned q;
        if (PACKED) {
          q = *(const unsigned*)(qt + LQ::off(qr0 + r, qc0 + 4 * bi + (lane_id() & 3)));
        } else {
          const uint4 w4 = *(const uint4*)(qt + LQ::off(qr0 + r, qc0 + 4 * bi));
          const unsigned l = (unsigned)(lane_id() & 3), sel = l | ((l + 4) << 4);
          q = __byte_perm(__byte_perm(w4.x, w4.y, sel), __byte_perm(w4.z, w4.w, sel), 0x5410);
        }
        const unsigned s = *(st + LS::off(sr0 + r, sc0 + bi));
        const unsigned sc = fp4_scale2<FOLD, FINITE>(s);
        const unsigned q4 = q << 4;
#pragma unroll
        for (int f = 0; f < 4; ++f)
          t.v[b][4 * blk + f][jp] = PACKED ? fp4_pair_packed<FOLD>(q, f, sc) : fp4_pair<FOLD>(q4, q, f, sc);
      }
    }
}

// Streaming decode straight from global memory (`Stmt::DequantFp4Stream`): `dequant_fp4` with the words and
// scale bytes loaded from global memory into registers, every load of the tile issued before the first decode
// (a thread keeps NB * 2 * blocks loads in flight). Packed layout: one 32-bit load per row and block (the
// quad's four lanes read the block's 16 bytes); natural: one 16-byte load of the block and three prmt. Blocks
// past the views decode to zero.
// The raw words and scale bytes of one streamed tile, per thread (register-resident: every index is a
// compile-time constant after unrolling). Packed: only `.x` of each word is used.
template <class TT> struct Fp4StreamRaw {
  static constexpr int NBK = TT::L::NF / 4;
  uint4 w[TT::L::NB][2][NBK];
  unsigned sc[TT::L::NB][2][NBK];
};

template <bool PACKED, class TT>
__device__ __forceinline__ void fp4_stream_load(Fp4StreamRaw<TT>& raw, const unsigned* __restrict__ q,
                                                long long qoff, long long qstride, long long qrows,
                                                long long qcols, const unsigned char* __restrict__ sg,
                                                long long soff, long long sstride, long long srows,
                                                long long scols) {
  static_assert(TT::L::NF % 4 == 0, "dequant_fp4_stream: 32-column blocks per warp");
  constexpr int NBK = TT::L::NF / 4;
  const unsigned l = (unsigned)(lane_id() & 3);
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = TT::L::row(b, 2 * jp);
#pragma unroll
      for (int blk = 0; blk < NBK; ++blk) {
        const int bi = TT::L::col(4 * blk, 0) >> 5;
        const bool ok = r < qrows && r < srows && bi < (qcols >> 2) && bi < scols;
        const unsigned* p = q + qoff + (long long)r * qstride + 4 * bi;
        if (PACKED) {
          raw.w[b][jp][blk].x = ok ? __ldg(p + l) : 0u;
        } else {
          raw.w[b][jp][blk] = ok ? __ldg((const uint4*)p) : make_uint4(0u, 0u, 0u, 0u);
        }
        raw.sc[b][jp][blk] = ok ? (unsigned)__ldg(sg + soff + (long long)r * sstride + bi) : 127u;
      }
    }
}

template <bool PACKED, bool FOLD, bool FINITE, class TT>
__device__ __forceinline__ void fp4_stream_decode(TT& t, const Fp4StreamRaw<TT>& raw) {
  constexpr int NBK = TT::L::NF / 4;
  const unsigned l = (unsigned)(lane_id() & 3);
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp)
#pragma unroll
      for (int blk = 0; blk < NBK; ++blk) {
        const uint4 w4 = raw.w[b][jp][blk];
        unsigned qq;
        if (PACKED) {
          qq = w4.x;
        } else {
          const unsigned sel = l | ((l + 4) << 4);
          qq = __byte_perm(__byte_perm(w4.x, w4.y, sel), __byte_perm(w4.z, w4.w, sel), 0x5410);
        }
        const unsigned s2 = fp4_scale2<FOLD, FINITE>(raw.sc[b][jp][blk]);
        const unsigned q4 = qq << 4;
#pragma unroll
        for (int f = 0; f < 4; ++f)
          t.v[b][4 * blk + f][jp] = PACKED ? fp4_pair_packed<FOLD>(qq, f, s2) : fp4_pair<FOLD>(q4, qq, f, s2);
      }
}

template <bool PACKED, bool FOLD, bool FINITE, class TT>
__device__ __forceinline__ void dequant_fp4_stream(TT& t, const unsigned* __restrict__ q, long long qoff,
                                                   long long qstride, long long qrows, long long qcols,
                                                   const unsigned char* __restrict__ sg, long long soff,
                                                   long long sstride, long long srows, long long scols) {
  Fp4StreamRaw<TT> raw;
  fp4_stream_load<PACKED, TT>(raw, q, qoff, qstride, qrows, qcols, sg, soff, sstride, srows, scols);
  fp4_stream_decode<PACKED, FOLD, FINITE, TT>(t, raw);
}

// The software-pipelined form (`Stmt::DequantFp4Stream` with `prefetch`): `raw` (one per tile, declared at the
// kernel's top, kept across loop iterations) holds this statement's words, loaded by the previous statement's
// prefetch, unless `first`; decode them, then issue the next views' loads into `raw`, left in flight.
template <bool PACKED, bool FOLD, bool FINITE, class TT>
__device__ __forceinline__ void dequant_fp4_stream_pf(
    TT& t, Fp4StreamRaw<TT>& raw, bool first, const unsigned* __restrict__ q, long long qoff, long long qstride,
    long long qrows, long long qcols, const unsigned char* __restrict__ sg, long long soff, long long sstride,
    long long srows, long long scols, const unsigned* __restrict__ nq, long long nqoff, long long nqstride,
    long long nqrows, long long nqcols, const unsigned char* __restrict__ nsg, long long nsoff,
    long long nsstride, long long nsrows, long long nscols) {
  if (first) fp4_stream_load<PACKED, TT>(raw, q, qoff, qstride, qrows, qcols, sg, soff, sstride, srows, scols);
  fp4_stream_decode<PACKED, FOLD, FINITE, TT>(t, raw);
  fp4_stream_load<PACKED, TT>(raw, nq, nqoff, nqstride, nqrows, nqcols, nsg, nsoff, nsstride, nsrows, nscols);
}

// ---------------------------------------------------------------------------------------------------------
// MXFP4 weights times a few bf16 activation rows (`Stmt::Fp4Gemv`): out[R, T] = W[R, K] x[T, K]^T, for decode.
// The K range is cut into quads of four 32-column blocks (64 bytes of a weight row, 4 bytes of its scales); in
// quad q, lane (g, l) = (lane / 4, lane % 4) loads the whole 16-byte block 4q + l of its weight rows 16b + g and
// 16b + g + 8 (b < R / 16) with its scale bytes: every weight load is 16 bytes and a quad of lanes reads 64
// contiguous bytes of a row. Warp w takes the batches w, w + WARPS, ... of U consecutive quads (so a warp's loads
// of one row cover 64U contiguous bytes), in order, through a ring of S register slots of one quad each: the
// first S quads are loaded before the first is used, and after a slot's quad is consumed the slot is refilled
// with the quad S steps ahead, so S quads (S x 2 x R/16 x 16 bytes per lane) stay in flight while the warp
// decodes and multiplies. Loads are predicated, not branched around (see `nfull`). The sum over K is taken in a
// lane-specific order that both operands share: the lane's 16 value pairs (w, f) of a block (word w, pair f: two
// consecutive columns, the lower first; natural: byte f of the word) are the A pairs of its 8 mma.m16n8k16 k-steps and its B pairs are the
// activations of the same two columns of token 8 tt + g (tt < T / 8), read as four 16-byte loads per block and
// token when the block is used (step: x chunk i, word pair j, so each B fragment is an aligned register pair of
// a load). The warps' f32 partials go to `scratch` tiles (one per warp) and are summed in warp order into `out`,
// between barriers.
// Predicated read-only loads without branches: `_if` leaves zeros (or `dflt`) when `ok` is false, `_keep` leaves
// the destination as it was.
__device__ __forceinline__ uint4 ldg_nc_v4_if(const void* p, bool ok) {
  uint4 v;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=&r"(v.x), "=&r"(v.y), "=&r"(v.z), "=&r"(v.w)
      : "l"(p), "r"((int)ok));
  return v;
}
__device__ __forceinline__ void ldg_nc_v4_keep(uint4& v, const void* p, bool ok) {
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
      : "l"(p), "r"((int)ok));
}
__device__ __forceinline__ unsigned ldg_nc_u8_if(const unsigned char* p, bool ok, unsigned dflt) {
  unsigned v;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b32 %0, %3;\n @p ld.global.nc.u8 %0, [%1];\n}\n"
      : "=&r"(v)
      : "l"(p), "r"((int)ok), "r"(dflt));
  return v;
}
__device__ __forceinline__ void ldg_nc_u8_keep(unsigned& v, const unsigned char* p, bool ok) {
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p ld.global.nc.u8 %0, [%1];\n}\n" : "+r"(v) : "l"(p), "r"((int)ok));
}
// The bf16 pair (f = 0..3) of `fp4_pair` from a word's even nibbles `lo = q & 0x0F0F0F0F` and odd nibbles
// `hi = (q >> 4) & 0x0F0F0F0F`: one prmt puts nibble 2f in byte 0 and nibble 2f + 1 in byte 2 (bytes 1 and 3 are
// the zero sign-fill of a byte below 0x80), one multiply by 0x1040 adds the copies shifted by 12 (sign to bit 15)
// and by 6 (exponent and mantissa to bits 8..6), one mask keeps those bits: the bits of `fp4_pair`'s v.
// The zero bytes need the PTX prmt's sign-replicate mode (selector msb), so the prmt is inline PTX: `__byte_perm`
// keeps only the low 3 bits of each selector nibble (NVRTC masks the selector with 0x7777), which made bytes 1 and
// 3 copies of `lo`'s byte 0 and corrupted sign and exponent of every decoded pair.
__device__ __forceinline__ unsigned prmt_b32(unsigned a, unsigned b, unsigned sel) {
  unsigned r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
template <bool FOLD> __device__ __forceinline__ unsigned fp4_pair_lh(unsigned lo, unsigned hi, int f, unsigned scale2) {
  const unsigned y = prmt_b32(lo, hi, (unsigned)(f | (8 << 4) | ((4 + f) << 8) | (8 << 12)));
  return fp4_scaled<FOLD>((y * 0x1040u) & 0x81C081C0u, scale2);
}
// 0, computed from `v` in a way the compilers do not fold: an address offset that makes a load wait for `v`.
__device__ __forceinline__ int opaque_zero(float v) {
  unsigned z;
  asm("prmt.b32 %0, %1, 0, 0x4444;" : "=r"(z) : "r"(__float_as_uint(v)));
  return (int)z;
}
// A compile-time bool as a value (to instantiate a generic lambda for both cases).
template <bool B> struct BoolC {
  static constexpr bool value = B;
};
// `cp.async` of 16 bytes (`.cg`, L2 only) or 4 bytes (`.ca`) with an L2 prefetch size (`.L2::<L2PF>B`: L2 fetches
// the aligned L2PF bytes around the copy from DRAM; 0: no qualifier) and, for the `_n` forms, a source size (the
// rest of the destination is zero-filled).
#define K3K_CP_ASYNC_L2PF(L2PF, OP, ...)                                                              \
  if constexpr (L2PF == 256) asm volatile(OP ".L2::256B" __VA_ARGS__ : "memory");                       \
  else if constexpr (L2PF == 128) asm volatile(OP ".L2::128B" __VA_ARGS__ : "memory");                  \
  else if constexpr (L2PF == 64) asm volatile(OP ".L2::64B" __VA_ARGS__ : "memory");                    \
  else asm volatile(OP __VA_ARGS__ : "memory");
template <int L2PF> __device__ __forceinline__ void cp_async16_pf(unsigned dst, const void* src) {
  K3K_CP_ASYNC_L2PF(L2PF, "cp.async.cg.shared.global", " [%0], [%1], 16;\n" ::"r"(dst), "l"(src))
}
template <int L2PF> __device__ __forceinline__ void cp_async4_pf(unsigned dst, const void* src) {
  K3K_CP_ASYNC_L2PF(L2PF, "cp.async.ca.shared.global", " [%0], [%1], 4;\n" ::"r"(dst), "l"(src))
}
template <int L2PF> __device__ __forceinline__ void cp_async16_pf_n(unsigned dst, const void* src, int n) {
  K3K_CP_ASYNC_L2PF(L2PF, "cp.async.cg.shared.global", " [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n))
}
template <int L2PF> __device__ __forceinline__ void cp_async4_pf_n(unsigned dst, const void* src, int n) {
  K3K_CP_ASYNC_L2PF(L2PF, "cp.async.ca.shared.global", " [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n))
}
#undef K3K_CP_ASYNC_L2PF
// The bulk copies of `fp4_gemv`'s BULK ring (per-warp, lane 0 issuing; addresses of the executing CTA's shared
// memory): a barrier per stage counting one arrival plus the copies' bytes, the copies completing on it.
__device__ __forceinline__ void gemv_mbar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void gemv_mbar_inval(unsigned bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void gemv_mbar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void gemv_mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nK3K_GEMV_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@p bra "
      "K3K_GEMV_DONE;\nbra K3K_GEMV_WAIT;\nK3K_GEMV_DONE:\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// `bytes` (a multiple of 16) from 16-byte aligned `src` to 16-byte aligned shared `dst`, completing on `bar`.
__device__ __forceinline__ void gemv_bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
template <int NB> struct Fp4GemvSlot {
  uint4 w[NB][2];
  unsigned s[NB][2];
};

template <bool PACKED, bool FOLD, bool FINITE, int R, int T, int WARPS, int U, int S, class LO, class LP,
          bool STAGED = false, int L2PF = 0, bool TILED = false, bool BULK = false, bool XA2 = false>
__device__ __forceinline__ void fp4_gemv(unsigned char* ot, int or0, int oc0, unsigned char* pt,
                                         const unsigned* __restrict__ q, long long qoff, long long qstride,
                                         long long qrows, long long qcols, const unsigned char* __restrict__ sg,
                                         long long soff, long long sstride, long long srows, long long scols,
                                         const bf16* __restrict__ x, long long xoff, long long xstride,
                                         long long xrows, long long xcols) {
  static_assert(R % 16 == 0 && (T == 8 || T == 16) && (U == 1 || U == 2 || U == 4 || U == 8) && S >= 1 && S <= 8,
                "fp4_gemv shape");
  static_assert(!TILED || (STAGED && PACKED && T == 8), "fp4_gemv tiled: staged ring, packed words, 8 tokens");
  static_assert(!BULK || (TILED && L2PF == 0), "fp4_gemv bulk: tiled words, no L2 prefetch size");
  static_assert(!XA2 || STAGED, "fp4_gemv x_two_ahead: staged ring");
  constexpr int NB = R / 16, TT = T / 8;
  // STAGED: the bytes of one warp's stage (SCOMPACT: tile-major scales copied whole; see the ring below) and where
  // the stages start (the scratch's first 16-byte boundary).
  constexpr bool SCOMPACT = TILED && !BULK;
  constexpr int SLOT = SCOMPACT ? NB * 1088 : NB * 2 * 32 * 20;
  unsigned char* const stages0 = pt + ((16u - (smem_u32(pt) & 15u)) & 15u);
  const int lane = lane_id(), g = lane >> 2, l = lane & 3, wid = warp_id();
  const long long vrows = qrows < srows ? qrows : srows;
  const long long nblk64 = (qcols >> 2) < scols ? (qcols >> 2) : scols;
  const int nblk = nblk64 > 0 ? (int)nblk64 : 0;
  const int nq = (nblk + 3) >> 2;
  // The valid rows and tokens of the tile as 32-bit counts (R and T at most), for cheap per-lane compares.
  const int vr = vrows < 0 ? 0 : (vrows > R ? R : (int)vrows), vt = xrows < 0 ? 0 : (xrows > T ? T : (int)xrows);
  // Whole 8-column groups of x only (a group reaching past x's columns reads as zeros): the lane's block bi has
  // its group i valid when 32 bi + 8 i + 8 <= xcols.
  const int xlim = xcols < 0 ? 0 : (xcols > 0x3FFFFFFFLL ? 0x3FFFFFFF : (int)xcols);
  // Quads below `nfull` have all four blocks and their x columns valid: they go through the ring, their loads
  // predicated by the row or token only (an invalid row's or token's registers keep their zeros: they reach only
  // that row's or token's outputs, which are discarded). The other quads, after the ring, load zeros (weights, x)
  // and 127 (scales) where a block, row, token or column group is invalid.
  const int nfull = (nblk >> 2) < (xlim >> 7) ? (nblk >> 2) : (xlim >> 7);
  // Per-lane row offsets from one base per operand, fixed for the whole K loop (block 4q + l of a row at
  // base + offset + 4q, in 16-byte units; 32-bit offsets within the tile keep the loop's address arithmetic to one
  // wide multiply-add per load). An invalid row's or token's address is never loaded from.
  const uint4* const wb = (const uint4*)(q + qoff) + l;
  const unsigned char* const sb = sg + soff + l;
  const uint4* const xb = (const uint4*)(x + xoff) + 4 * l;
  int wro[NB][2], sro[NB][2];
  bool rok[NB][2];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = 16 * b + g + 8 * jp;
      rok[b][jp] = r < vr;
      wro[b][jp] = r * (int)(qstride >> 2);
      sro[b][jp] = r * (int)sstride;
    }
  int xro[TT];
  bool tok[TT];
#pragma unroll
  for (int tt = 0; tt < TT; ++tt) {
    const int t = 8 * tt + g;
    tok[tt] = t < vt;
    xro[tt] = t * (int)(xstride >> 3);
  }
  // The warp's n-th quad: batch w + (n / U) WARPS, quad n % U of it.
  auto quad = [&](int n) { return (wid + (n / U) * WARPS) * U + n % U; };
  // Full quads (below `nfull`): predicated by the row only.
  auto load = [&](Fp4GemvSlot<NB>& sl, int qd, int after) {
    qd += after;
    const bool qok = qd < nfull;
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        ldg_nc_v4_keep(sl.w[b][jp], wb + (wro[b][jp] + 4 * qd), qok && rok[b][jp]);
        ldg_nc_u8_keep(sl.s[b][jp], sb + (sro[b][jp] + 4 * qd), qok && rok[b][jp]);
      }
  };
  // The quads past `nfull`: zeros (scale 127) where a block or row is invalid.
  auto load_tail = [&](Fp4GemvSlot<NB>& sl, int qd) {
    const bool bok = 4 * qd + l < nblk;
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const bool ok = bok && rok[b][jp];
        sl.w[b][jp] = ldg_nc_v4_if(wb + (wro[b][jp] + 4 * qd), ok);
        sl.s[b][jp] = ldg_nc_u8_if(sb + (sro[b][jp] + 4 * qd), ok, 127u);
      }
  };
  float acc[NB][TT][4];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[b][tt][i] = 0.f;
  // The activations of the lane's block of the current quad: xv[tt][i] holds columns 32 bi + 8i .. 32 bi + 8i + 7
  // of token 8tt + g (kept across quads: an invalid token's registers keep whatever they held).
  uint4 xv[TT][4];
#pragma unroll
  for (int tt = 0; tt < TT; ++tt)
#pragma unroll
    for (int i = 0; i < 4; ++i) xv[tt][i] = make_uint4(0u, 0u, 0u, 0u);
  // The products of one quad: the slot's weights times the activations `xr` of the same columns.
  auto product = [&](const Fp4GemvSlot<NB>& sl, const uint4 (&xr)[TT][4]) {
#if defined(K3K_XP_NOMMA) || defined(K3K_XP_NOMATH)
    // Timing experiments: what the removed products would have read is summed into one register that reaches the
    // output (ptxas drops work whose results go nowhere; a sum, since an XOR cancels the raw words NOMATH reads
    // four times): two IADD3 per removed mma, two per activation chunk.
    unsigned sink = 0;
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i) sink += xr[tt][i].x + xr[tt][i].y + xr[tt][i].z + xr[tt][i].w;
#endif
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const unsigned s0 = fp4_scale2<FOLD, FINITE>(sl.s[b][0]), s1 = fp4_scale2<FOLD, FINITE>(sl.s[b][1]);
      const uint4 w0 = sl.w[b][0], w1 = sl.w[b][1];
      const unsigned q0[4] = {w0.x, w0.y, w0.z, w0.w}, q1[4] = {w1.x, w1.y, w1.z, w1.w};
#pragma unroll
      for (int st = 0; st < 8; ++st) {
        // Step st multiplies x chunk i, words 2j and 2j + 1 (columns 8i + 4j .. 8i + 4j + 3: an aligned register
        // pair, the B fragment as loaded) with the weight pairs of the same columns: packed, pair i of words 2j
        // and 2j + 1 (word w holds columns 8f + 2w + h as value 2f + h); natural, bytes 2j and 2j + 1 of word i
        // (the order keeps each word's nibble planes live for consecutive steps only).
        const int i = PACKED ? (st & 3) : (st >> 1), j = PACKED ? (st >> 2) : (st & 1);
        const int wa = PACKED ? 2 * j : i, wb = PACKED ? 2 * j + 1 : i;
        const int fa = PACKED ? i : 2 * j, fb = PACKED ? i : 2 * j + 1;
        unsigned a[4];
#if defined(K3K_XP_NODECODE) || defined(K3K_XP_NOMATH)
        // Timing experiments (K3K_EXPERIMENT, wrong values on purpose): the raw words, no decode, no scale.
        (void)s0, (void)s1, (void)fa, (void)fb;
        a[0] = q0[wa], a[1] = q1[wa], a[2] = q0[wb], a[3] = q1[wb];
#else
        if (PACKED) {
          a[0] = fp4_pair_packed<FOLD>(q0[wa], fa, s0);
          a[1] = fp4_pair_packed<FOLD>(q1[wa], fa, s1);
          a[2] = fp4_pair_packed<FOLD>(q0[wb], fb, s0);
          a[3] = fp4_pair_packed<FOLD>(q1[wb], fb, s1);
        } else {
          const unsigned la0 = q0[wa] & 0x0F0F0F0Fu, ha0 = (q0[wa] >> 4) & 0x0F0F0F0Fu;
          const unsigned la1 = q1[wa] & 0x0F0F0F0Fu, ha1 = (q1[wa] >> 4) & 0x0F0F0F0Fu;
          const unsigned lb0 = q0[wb] & 0x0F0F0F0Fu, hb0 = (q0[wb] >> 4) & 0x0F0F0F0Fu;
          const unsigned lb1 = q1[wb] & 0x0F0F0F0Fu, hb1 = (q1[wb] >> 4) & 0x0F0F0F0Fu;
          a[0] = fp4_pair_lh<FOLD>(la0, ha0, fa, s0);
          a[1] = fp4_pair_lh<FOLD>(la1, ha1, fa, s1);
          a[2] = fp4_pair_lh<FOLD>(lb0, hb0, fb, s0);
          a[3] = fp4_pair_lh<FOLD>(lb1, hb1, fb, s1);
        }
#endif
#pragma unroll
        for (int tt = 0; tt < TT; ++tt) {
          const uint4 xc = xr[tt][i];
          const unsigned bb[2] = {j ? xc.z : xc.x, j ? xc.w : xc.y};
#if defined(K3K_XP_NOMMA) || defined(K3K_XP_NOMATH)
          (void)bb;
          if (tt == 0) sink += a[0] + a[1] + a[2] + a[3];
#else
          mma16816((bf16*)0, acc[b][tt], a, bb);
#endif
        }
      }
    }
#if defined(K3K_XP_NOMMA) || defined(K3K_XP_NOMATH)
    acc[0][0][0] += __uint_as_float(sink);
#endif
  };
  auto compute = [&](const Fp4GemvSlot<NB>& sl, int qd, bool tail) {
    const int bi = 4 * qd + l;
    if (!tail) {
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        // One pointer per token row and quad (immediate offsets for the four loads) at 8 tokens; 16 tokens keep
        // the per-load index (ptxas spilled 16 bytes of the 16-token, 32-row primitive case with the pointer).
        const uint4* const xp = xb + (xro[tt] + (TT == 1 ? 16 * qd : 0));
#pragma unroll
        for (int i = 0; i < 4; ++i) ldg_nc_v4_keep(xv[tt][i], TT == 1 ? xp + i : xp + (16 * qd + i), tok[tt]);
      }
    } else {
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        const uint4* const xp = xb + (xro[tt] + 16 * qd);
#pragma unroll
        for (int i = 0; i < 4; ++i)
          xv[tt][i] = ldg_nc_v4_if(xp + i, tok[tt] && bi < nblk && 32 * bi + 8 * i + 8 <= xlim);
      }
    }
    product(sl, xv);
  };
  // The ring: S slots, slot s holding the warp's quads s, s + S, ... (below `nfull`); each is consumed, then
  // refilled S ahead.
  if constexpr (STAGED) {
    // The staged ring (STAGED): the full quads go global -> shared memory by `cp.async` (each lane copies its own
    // 16-byte blocks and the aligned 4-byte scale word of each of its rows into its own slots of the warp's S-stage
    // ring, and reads them back itself: no barrier), S - 1 quads in flight while one is multiplied. The copies
    // complete in commit-group order (`cp.async.wait_group`, a counted wait in SASS), so unlike a register ring
    // (whose loads ptxas tracks on one of six scoreboards and waits for all at once) every stage stays in flight.
    // The activations of the next quad are loaded into registers one quad ahead. Staging starts after the warps'
    // partial tiles, 16-byte aligned; a stage is NB x 2 x 32 x 20 bytes (blocks, then scale words).
    // Lane piece p = 2b + jp (p < 2 NB) is tile row g + 8p. Two forms of the copies' addresses:
    // - FAST (8-token tiles whose rows are all valid and whose scale rows are a multiple of 4 bytes, the decode
    //   presets' case): the lane's
    //   sources (row g) of the next quad and its addresses in the next slots to fill and to read are loop-carried
    //   (advanced per quad, so ptxas has nothing to rematerialize), plus p times a row step the whole warp
    //   shares; no predicates. Under the register caps of many resident CTAs the general form's per-piece
    //   offsets, selects, the slot's remainder by S and the lane's shared address were rebuilt from the thread
    //   index at every quad (~150 of ~480 instructions per quad step, session 17 ncu of the 28 x 4 decode; the
    //   loop went from 845 to 613 SASS instructions per two quads).
    // - general: per-piece offsets (invalid rows copy the view's first row with a zero source size, their values
    //   reach only their own, discarded outputs) and per-piece byte selects.
    // Every copy asks L2 for L2PF bytes around it (`Stmt::Fp4Gemv` l2_prefetch; 0 none).
    // BULK (tiled words, FAST form only): lane 0 copies a quad's 16-row blocks whole, each 1 KB of words and 64
    // bytes of scales, by `cp.async.bulk` (the copy engine) completing on the stage's barrier (`mbarrier`, at
    // byte WOFF + 64 NB of the stage, which the copies leave alone); every lane waits for the barrier's phase. A
    // block's tile-major bytes land where the per-lane copies put them (lane 4g + l's 16 bytes of row g + 8(p % 2)
    // at 512 (p % 2) + 16 lane), its scales as 16 rows of 4 bytes (row g + 8(p % 2) at 32 (p % 2) + 4g).
    // TILED per-lane copies (SCOMPACT): a stage is NB x 1088 bytes, the blocks' 16 x 4 scale bytes copied whole by
    // the first 4 NB lanes (16 bytes each) as the BULK ring lays them out; the other forms keep 32 per-lane scale
    // words per piece (NB x 1280; BULK's barrier sits past its scales). The stages start at the scratch's first
    // 16-byte boundary (`Stmt::Fp4Gemv`: 16 + WARPS x S x SLOT bytes), and each warp's partials go to its own first
    // stage once its ring has drained.
    constexpr int WOFF = NB * 2 * 32 * 16;
    unsigned char* const stg = stages0 + wid * S * SLOT;
    const unsigned sbase = smem_u32(stg);
    // Row-major scale bytes: each lane copies the aligned 4-byte word holding its byte (row r's block 4q + l at
    // sb + r sstride + 4q: the word's position is the same for every quad) and picks the byte with one prmt.
    const unsigned char* const swb = (const unsigned char*)((unsigned long long)sb & ~3ull);
    const int smis = (int)((unsigned long long)sb & 3ull);
    // The activations of the warp's n-th quad (full quads only; kept when past them), `after` added to the offset.
    auto load_x = [&](uint4 (&xr)[TT][4], int n, int after) {
      const int qd = quad(n);
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        const uint4* const xp = xb + (xro[tt] + 16 * qd + after);
#pragma unroll
        for (int i = 0; i < 4; ++i) ldg_nc_v4_keep(xr[tt][i], xp + i, tok[tt] && qd < nfull);
      }
    };
    auto ring = [&](auto fast_c) {
      constexpr bool FAST = decltype(fast_c)::value;
      // General form: per-piece offsets and selects (unused by FAST).
      unsigned ssel[NB][2];
      int swo[NB][2], wrc[NB][2];
      // FAST form: the lane's sources of its next issued quad (row g; loop-carried, so no compiler rebuilds them
      // from the thread index under a register cap), advanced by the quads between two issues, and the warp's
      // row steps (8 rows, in bytes).
      // TILED (`k3k_ir::fp4::tile_major`): each 16-row block's quad is 1 KB of words (row r % 16 at 64 r) and 64
      // bytes of scales (at 4 r), the tile's first row on a 16-row boundary; row g + 8p is in block p / 2 at row
      // g + 8 (p % 2) of it.
      // (BULK: the blocks' first bytes, the same for every lane.)
      const unsigned char* wq = BULK    ? (const unsigned char*)(q + qoff) + 1024 * quad(0)
                                : TILED ? (const unsigned char*)(q + qoff) + (64 * g + 16 * l + 1024 * quad(0))
                                        : (const unsigned char*)(wb + (wro[0][0] + 4 * quad(0)));
      const unsigned char* sq = BULK    ? (const unsigned char*)(sg + soff) + 64 * quad(0)
                                : TILED ? (const unsigned char*)(sg + soff) +
                                              (64 * quad(0) + (lane >> 2) * 16u * (unsigned)sstride + 16 * l)
                                        : swb + (((sro[0][0] + smis) & ~3) + 4 * quad(0));
      const unsigned fsel = TILED ? (unsigned)l | 0x4440u : (unsigned)((sro[0][0] + smis) & 3) | 0x4440u;
      const unsigned wstep = 8u * 16u * (unsigned)(qstride >> 2), sstep = 8u * (unsigned)sstride;
      if constexpr (!FAST) {
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
          for (int jp = 0; jp < 2; ++jp) {
            const int o = rok[b][jp] ? sro[b][jp] + smis : 0;
            swo[b][jp] = o & ~3;
            ssel[b][jp] = (unsigned)(o & 3) | 0x4440u;
            wrc[b][jp] = rok[b][jp] ? wro[b][jp] : 0;
          }
      }
      // FAST: the next slot to fill and the next to read (running counters, S need not be a power of two) and the
      // lane's first piece in each (loop-carried addresses, advanced with the counters). The general form takes
      // the slot as `n % S` (two more live counters made ptxas spill at 16 tokens).
      // BULK: the barrier phase the next read waits for (flips when the read slot wraps).
      int wslot = 0, rslot = 0;
      unsigned wdst = sbase + 16u * lane, rsrc = wdst, rpar = 0;
      auto next_slot = [&](int& slot, unsigned& addr) {
        if constexpr (FAST) {
          addr = slot == S - 1 ? addr - (S - 1) * SLOT : addr + SLOT;
          slot = slot == S - 1 ? 0 : slot + 1;
        }
      };
      constexpr unsigned BAR = WOFF + 64 * NB;  // a stage's barrier, past its scales (BULK)
      if constexpr (BULK && FAST) {
        if (lane == 0) {
#pragma unroll
          for (int s = 0; s < S; ++s) gemv_mbar_init(sbase + s * SLOT + BAR);
          asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
          asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        __syncwarp();
      }
      auto issue = [&](int n) {
        const int qd = quad(n);
        const unsigned dst = sbase + (unsigned)((n % S) * SLOT);
        if constexpr (BULK && FAST) {
          // Every lane has read the slot's previous quad (its values are in the last product's registers).
          __syncwarp();
          if (qd < nfull && lane == 0) {
            const unsigned slot = wdst - 16u * lane, bar = slot + BAR;
            gemv_mbar_expect(bar, NB * (1024u + 64u));
#pragma unroll
            for (int b = 0; b < NB; ++b) {
              gemv_bulk_copy(slot + 1024 * b, wq + b * 64u * (unsigned)qstride, 1024u, bar);
              gemv_bulk_copy(slot + WOFF + 64 * b, sq + b * 16u * (unsigned)sstride, 64u, bar);
            }
          }
        } else if (qd < nfull) {
#pragma unroll
          for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int jp = 0; jp < 2; ++jp) {
              const int p = 2 * b + jp, piece = p * 32 + lane;
              if constexpr (FAST) {
                if constexpr (TILED) {
                  cp_async16_pf<L2PF>(wdst + 16 * 32 * p, wq + ((p >> 1) * 64u * (unsigned)qstride + (p & 1) * 512u));
                } else if constexpr (L2PF == 0) {
                  // (L2PF = 0 keeps its own statements: the helpers' inlining reorders NVVM's PTX.)
                  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(wdst + 16 * 32 * p),
                               "l"(wq + p * wstep)
                               : "memory");
                  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(wdst + (WOFF - 12 * lane) + 4 * 32 * p),
                               "l"(sq + p * sstep)
                               : "memory");
                } else {
                  cp_async16_pf<L2PF>(wdst + 16 * 32 * p, wq + p * wstep);
                  cp_async4_pf<L2PF>(wdst + (WOFF - 12 * lane) + 4 * 32 * p, sq + p * sstep);
                }
              } else {
                const int ok = rok[b][jp] ? 16 : 0;
                if constexpr (L2PF == 0) {
                  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + 16 * piece),
                               "l"(wb + (wrc[b][jp] + 4 * qd)), "r"(ok)
                               : "memory");
                  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst + WOFF + 4 * piece),
                               "l"(swb + (swo[b][jp] + 4 * qd)), "r"(ok >> 2)
                               : "memory");
                } else {
                  cp_async16_pf_n<L2PF>(dst + 16 * piece, wb + (wrc[b][jp] + 4 * qd), ok);
                  cp_async4_pf_n<L2PF>(dst + WOFF + 4 * piece, swb + (swo[b][jp] + 4 * qd), ok >> 2);
                }
              }
            }
          // SCOMPACT: lane 4b + i (b < NB) copies bytes 16i .. 16i + 15 of block b's 64 scale bytes (row r % 16 at
          // 4 (r % 16)), to 64 b + 16 i past the stage's words.
          if constexpr (SCOMPACT && FAST) {
            if (lane < 4 * NB) cp_async16_pf<L2PF>(wdst + WOFF, sq);
          }
        }
        if constexpr (!(BULK && FAST)) asm volatile("cp.async.commit_group;\n" ::: "memory");
        next_slot(wslot, wdst);
        if constexpr (FAST) {
          // quad(n + 1) - quad(n): the next quad of the batch, or the first of the warp's next batch.
          const int dq = n % U == U - 1 ? (WARPS - 1) * U + 1 : 1;
          wq += (TILED ? 1024 : 64) * dq;
          sq += (TILED ? 64 : 4) * dq;
        }
      };
#pragma unroll
      for (int s = 0; s + 1 < S; ++s) issue(s);
      load_x(xv, 0, 0);
      // One quad: its stage is waited for and read, multiplied with the activations `cx`, then the next quad's
      // activations are loaded into `nx` (the two register sets alternate, so none is copied; XA2: the quad after
      // next into `cx`, whose values the product has used, while `nx` holds the next one's). Those loads depend
      // on the last product (`opaque_zero`): issued before it, they would share its scoreboard with `cx`'s loads
      // and the product would wait for them too (ptxas waits for every load of a scoreboard at once).
      auto step = [&](int n, uint4 (&cx)[TT][4], uint4 (&nx)[TT][4]) {
        issue(n + S - 1);
        if constexpr (BULK && FAST) {
          gemv_mbar_wait(rsrc - 16u * lane + BAR, rpar);
          rpar ^= rslot == S - 1 ? 1u : 0u;
        } else {
          asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 1) : "memory");
        }
        const unsigned src = sbase + (unsigned)((n % S) * SLOT), rl = rsrc;
        next_slot(rslot, rsrc);
        Fp4GemvSlot<NB> sl;
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
          for (int jp = 0; jp < 2; ++jp) {
            const int p = 2 * b + jp, piece = p * 32 + lane;
            const unsigned wa = FAST ? rl + 16 * 32 * p : src + 16 * piece;
            const unsigned sa = TILED  ? rl + (WOFF - 16 * lane + 4 * g) + 64 * (p >> 1) + 32 * (p & 1)
                                : FAST ? rl + (WOFF - 12 * lane) + 4 * 32 * p
                                       : src + WOFF + 4 * piece;
            uint4 w;
            unsigned sv;
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                         : "r"(wa)
                         : "memory");
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(sv) : "r"(sa) : "memory");
            sl.w[b][jp] = w;
            sl.s[b][jp] = prmt_b32(sv, 0u, FAST ? fsel : ssel[b][jp]);
          }
        product(sl, cx);
        if constexpr (XA2) {
          load_x(cx, n + 2, opaque_zero(acc[NB - 1][TT - 1][3]));
        } else {
          load_x(nx, n + 1, opaque_zero(acc[NB - 1][TT - 1][3]));
        }
      };
      uint4 xw[TT][4];
#pragma unroll
      for (int tt = 0; tt < TT; ++tt)
#pragma unroll
        for (int i = 0; i < 4; ++i) xw[tt][i] = make_uint4(0u, 0u, 0u, 0u);
      // XA2 (`x_two_ahead`): the second set holds the next quad's activations from the start.
      if constexpr (XA2) load_x(xw, 1, 0);
#pragma unroll 1
      for (int n = 0; quad(n) < nfull; n += 2) {
        step(n, xv, xw);
        if (quad(n + 1) >= nfull) break;
        step(n + 1, xw, xv);
      }
      if constexpr (BULK && FAST) {
        // Every issued copy was waited for; the barriers' memory is a plain stage again.
        __syncwarp();
        if (lane == 0) {
#pragma unroll
          for (int s = 0; s < S; ++s) gemv_mbar_inval(sbase + s * SLOT + BAR);
        }
      }
    };
    // FAST only for 8-token tiles (the decode shapes it was measured on, session 17 call 7): with 16 tokens the
    // activations' registers double, and keeping both forms made ptxas spill (8 bytes at M16 under MINB=4, 20 in
    // the 4-variant primitive case).
    if constexpr (TT == 1) {
      if (vr == R && (sstride & 3) == 0) {
        ring(BoolC<true>());
      } else if constexpr (TILED) {
        __trap();  // tiled words are read by the fast form only (the program promised full tiles: see Stmt::Fp4Gemv)
      } else {
        ring(BoolC<false>());
      }
    } else {
      ring(BoolC<false>());
    }
    // No copy may still be writing the staging area when the statement ends (the groups past the warp's quads
    // are empty, but the wait is cheap).
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  } else {
  Fp4GemvSlot<NB> ring[S];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        ring[s].w[b][jp] = make_uint4(0u, 0u, 0u, 0u);
        ring[s].s[b][jp] = 127u;
      }
#pragma unroll
  for (int s = 0; s < S; ++s) load(ring[s], quad(s), 0);
  for (int n0 = 0; quad(n0) < nfull; n0 += S) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const int qd = quad(n0 + s);
      if (qd < nfull) {
        compute(ring[s], qd, false);
        // Refill the slot once its quad is consumed: the loads' offset depends on the last product (so no
        // compiler hoists them, with the decode of the slot's words, ahead of it: registers for nothing).
        load(ring[s], quad(n0 + s + S), opaque_zero(acc[NB - 1][TT - 1][3]));
      }
    }
  }
  }
  // The partial quads (at most one, or more where x's columns end first), one per warp, after the ring.
  if constexpr (TILED) {
    if (nfull < nq) __trap();  // no partial quads in tiled words (the program promised whole quads)
  }
  for (int qd = nfull + wid; qd < nq; qd += WARPS) {
    Fp4GemvSlot<NB> tl;
    load_tail(tl, qd);
    compute(tl, qd, true);
  }
  // The warps' partials (C fragment: rows 16b + g (+8), tokens 8tt + 2l (+1)) as flat [R, T] f32 tiles of
  // `scratch` (its layout is irrelevant: only this function reads them), then their sum in warp order. STAGED:
  // each warp's tile is the start of its own ring, which it has drained (`cp.async.wait_group 0` above), at least
  // R x T x 4 bytes (S x NB x 1088 >= 64 NB T); else tile `wid` of `scratch`.
  auto part = [&](int w) {
    if constexpr (STAGED) {
      return stages0 + w * S * SLOT;
    } else {
      return pt + w * LP::TILE_BYTES;
    }
  };
  unsigned char* mine = part(wid);
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 16 * b + g + 8 * (i >> 1), c = 8 * tt + 2 * l + (i & 1);
        *(float*)(mine + (r * T + c) * 4) = acc[b][tt][i];
      }
  barrier();
  for (int e = threadIdx.x; e < R * T; e += WARPS * 32) {
    const int r = e / T, c = e % T;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) sum += *(const float*)(part(w) + e * 4);
    *(float*)(ot + LO::off(or0 + r, oc0 + c)) = (r < vr && c < vt) ? sum : 0.f;
  }
  barrier();
}

// ---------------------------------------------------------------------------------------------------------
// Warpgroup tensor cores (sm_90a wgmma). Operands are K-major shared tiles with 128-byte swizzled rows; a
// descriptor names the start (16-byte units), the 1024-byte stride between 8-row atoms and the swizzle mode.
// The per-shape instruction wrappers (`wgmma_n<N>`) are emitted by the renderer for the shapes a kernel uses.
__device__ __forceinline__ unsigned long long wgmma_desc_sw128(unsigned saddr) {
  unsigned long long d = 0;
  d |= (unsigned long long)((saddr & 0x3FFFFu) >> 4);
  d |= 1ull << 16;                        // leading byte offset: unused for swizzled K-major operands
  d |= (unsigned long long)(1024 >> 4) << 32;  // stride byte offset: one 8-row x 128-byte atom
  d |= 1ull << 62;                        // 128-byte swizzle
  return d;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keep the compiler from moving reads or writes of a tile's registers (accumulators, register A operands)
// across an asynchronous tensor-core operation.
__device__ __forceinline__ void fence_reg(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_reg(unsigned& r) { asm volatile("" : "+r"(r)::"memory"); }
template <class TT> __device__ __forceinline__ void fence_operand(TT& t) {
  constexpr int N = (int)(sizeof(t.v) / sizeof(t.v[0][0][0])), J = (int)(sizeof(t.v[0][0]) / sizeof(t.v[0][0][0]));
#pragma unroll
  for (int i = 0; i < N; ++i) fence_reg(t.v[i / (J * TT::L::NF)][(i / J) % TT::L::NF][i % J]);
}

}  // namespace k3k
