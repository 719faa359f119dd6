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

