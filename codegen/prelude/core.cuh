// k3k device prelude, part 1: scalar types, conversions and math. Self-contained: no toolkit headers.
// Everything here is a generic primitive; operators are written in the IR, never here.
// The thread that issues a block's single-thread operations (TMA copies, expect_tx arrivals, elected waits,
// barrier initialization): thread 0, or the producer warp's lane 0 (the renderer defines it, see
// `Stmt::Producer`).
#ifndef K3K_ELECTED_TID
#define K3K_ELECTED_TID 0
#endif
namespace k3k {

struct bf16 { unsigned short x; };
struct f16 { unsigned short x; };
struct e4m3 { unsigned char x; };
struct e8m0 { unsigned char x; };

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __uint_as_float(((unsigned)v.x) << 16); }
__device__ __forceinline__ float to_f32(f16 v) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f;
}
// E4M3 -> f32 through the hardware fp8 -> f16x2 conversion (sm_89+); exact.
__device__ __forceinline__ float to_f32(e4m3 v) {
  unsigned short h2; unsigned packed;
  asm("{ .reg .b16 lo; mov.b16 lo, %1; cvt.rn.f16x2.e4m3x2 %0, lo; }" : "=r"(packed) : "h"((unsigned short)v.x));
  h2 = (unsigned short)(packed & 0xffff);
  f16 h; h.x = h2; return to_f32(h);
}
// E8M0 scale byte -> 2^(e-127); 255 is NaN; 0 is the subnormal 2^-127.
__device__ __forceinline__ float to_f32(e8m0 v) {
  if (v.x == 255) return __uint_as_float(0x7fc00000u);
  if (v.x == 0) return __uint_as_float(0x00400000u);
  return __uint_as_float(((unsigned)v.x) << 23);
}
__device__ __forceinline__ float to_f32(int v) { return (float)v; }
__device__ __forceinline__ float to_f32(unsigned v) { return (float)v; }
__device__ __forceinline__ float to_f32(unsigned char v) { return (float)v; }
__device__ __forceinline__ float to_f32(long long v) { return (float)v; }
__device__ __forceinline__ float to_f32(unsigned long long v) { return (float)v; }

__device__ __forceinline__ long long to_i64(int v) { return v; }
__device__ __forceinline__ long long to_i64(unsigned v) { return v; }
__device__ __forceinline__ long long to_i64(unsigned char v) { return v; }
__device__ __forceinline__ long long to_i64(long long v) { return v; }
__device__ __forceinline__ long long to_i64(unsigned long long v) { return (long long)v; }

template <class T> struct from_f32;
template <> struct from_f32<float> { __device__ static float cvt(float f) { return f; } };
template <> struct from_f32<bf16> {
  __device__ static bf16 cvt(float f) { bf16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(f)); return r; }
};
template <> struct from_f32<f16> {
  __device__ static f16 cvt(float f) { f16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(f)); return r; }
};
// f32 -> E4M3: round to nearest even, saturating to +-448 (the `satfinite` rule the host encoder follows).
template <> struct from_f32<e4m3> {
  __device__ static e4m3 cvt(float f) {
    unsigned short h;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.0f), "f"(f));
    e4m3 r; r.x = (unsigned char)(h & 0xff); return r;
  }
};
template <class T> struct from_i64 { __device__ static T cvt(long long v) { return (T)v; } };

// Two floats -> one 32-bit register of two 16-bit values, `lo` in the low half.
__device__ __forceinline__ unsigned pack2(bf16*, float lo, float hi) {
  unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
__device__ __forceinline__ unsigned pack2(f16*, float lo, float hi) {
  unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
__device__ __forceinline__ float unpack_lo(bf16*, unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float unpack_hi(bf16*, unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float unpack_lo(f16*, unsigned w) { f16 h; h.x = (unsigned short)(w & 0xffff); return to_f32(h); }
__device__ __forceinline__ float unpack_hi(f16*, unsigned w) { f16 h; h.x = (unsigned short)(w >> 16); return to_f32(h); }

__device__ __forceinline__ float round_bf16(float f) { return to_f32(from_f32<bf16>::cvt(f)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
// 2^x with subnormal results (and inputs) flushed to zero: one MUFU.EX2, without exp2f's range test and
// rescaling for subnormal results (IR `exp2_ftz`).
__device__ __forceinline__ float exp2_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
__device__ __forceinline__ float recip(float x) { return 1.0f / x; }
// Exact unbiased exponent of a finite nonzero float, from its bits (subnormals handled).
__device__ __forceinline__ float ilogb_exact(float x) {
  unsigned b = __float_as_uint(x) & 0x7fffffffu;
  int e = (int)(b >> 23);
  if (e == 0) { return (float)(-118 - __clz(b)); }  // subnormal: highest set bit p gives p - 149
  return (float)(e - 127);
}
__device__ __forceinline__ float ldexp_f(float x, long long n) { return ldexpf(x, (int)n); }
template <class T> __device__ __forceinline__ T min_(T a, T b) { return a < b ? a : b; }
template <class T> __device__ __forceinline__ T max_(T a, T b) { return a > b ? a : b; }
__device__ __forceinline__ float min_(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float max_(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ bool isnan_(float x) { return x != x; }
__device__ __forceinline__ bool isfinite_(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }
__device__ __forceinline__ float nan_f32() { return __uint_as_float(0x7fc00000u); }
__device__ __forceinline__ float inf_f32() { return __uint_as_float(0x7f800000u); }

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int warp_id() { return threadIdx.x >> 5; }

}  // namespace k3k
namespace k3k {
__device__ __forceinline__ long long abs_(long long v) { return v < 0 ? -v : v; }
__device__ __forceinline__ float abs_(float v) { return fabsf(v); }
}  // namespace k3k
