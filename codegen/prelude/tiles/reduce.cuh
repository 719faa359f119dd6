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

