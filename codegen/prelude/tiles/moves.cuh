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

