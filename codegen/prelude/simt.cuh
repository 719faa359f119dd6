// k3k device prelude, part 3: what threads regions (per-thread SIMT code) use: addressing single elements of
// shared tiles, and atomic read-modify-writes of global or shared elements. Generic primitives only.
namespace k3k {

// Element (r, c) of tile `tile` of a shared buffer with layout L (swizzle included).
template <class T, class L>
__device__ __forceinline__ T* shared_elem(unsigned char* base, long long tile, long long r, long long c) {
  return (T*)(base + (int)tile * L::TILE_BYTES + L::off((int)r, (int)c));
}

// Atomics. The builtins let the compiler pick the state space (shared or global) from the pointer and turn
// an unused result into a reduction; i64 adds go through the u64 instruction (same bits). Float max/min have
// no instruction: a compare-and-swap loop with fmaxf/fminf semantics (a NaN operand is ignored).
__device__ __forceinline__ int atomic_add(int* p, int v) { return atomicAdd(p, v); }
__device__ __forceinline__ unsigned atomic_add(unsigned* p, unsigned v) { return atomicAdd(p, v); }
__device__ __forceinline__ unsigned long long atomic_add(unsigned long long* p, unsigned long long v) {
  return atomicAdd(p, v);
}
__device__ __forceinline__ long long atomic_add(long long* p, long long v) {
  return (long long)atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
__device__ __forceinline__ float atomic_add(float* p, float v) { return atomicAdd(p, v); }

#define K3K_ATOMIC_INT(NAME, BUILTIN)                                                                      \
  __device__ __forceinline__ int NAME(int* p, int v) { return BUILTIN(p, v); }                             \
  __device__ __forceinline__ unsigned NAME(unsigned* p, unsigned v) { return BUILTIN(p, v); }              \
  __device__ __forceinline__ long long NAME(long long* p, long long v) { return BUILTIN(p, v); }           \
  __device__ __forceinline__ unsigned long long NAME(unsigned long long* p, unsigned long long v) {         \
    return BUILTIN(p, v);                                                                                  \
  }
K3K_ATOMIC_INT(atomic_max, atomicMax)
K3K_ATOMIC_INT(atomic_min, atomicMin)
#undef K3K_ATOMIC_INT

template <class OP> __device__ __forceinline__ float atomic_float_cas(float* p, float v) {
  unsigned* w = (unsigned*)p;
  unsigned old = *(volatile unsigned*)w;
  while (true) {
    const unsigned want = __float_as_uint(OP::f(__uint_as_float(old), v));
    if (want == old) return __uint_as_float(old);
    const unsigned seen = atomicCAS(w, old, want);
    if (seen == old) return __uint_as_float(old);
    old = seen;
  }
}
struct OpFmax { __device__ static float f(float a, float b) { return fmaxf(a, b); } };
struct OpFmin { __device__ static float f(float a, float b) { return fminf(a, b); } };
__device__ __forceinline__ float atomic_max(float* p, float v) { return atomic_float_cas<OpFmax>(p, v); }
__device__ __forceinline__ float atomic_min(float* p, float v) { return atomic_float_cas<OpFmin>(p, v); }

// Wide per-thread global accesses (IR LoadWide / StoreWide): N elements of T as one 8- or 16-byte access
// (ld/st.global.v2/v4; tensor bases are 16-byte aligned at launch, the validator rejects element indices it can
// prove are not a multiple of N and the CPU backends check every access; an unaligned index here faults), converted element by element to/from the register array's type (float or long long). Element j is
// at byte j * sizeof(T) of the access (little-endian), as in memory.
template <int B> struct wide_word;
template <> struct wide_word<8> { typedef uint2 t; };
template <> struct wide_word<16> { typedef uint4 t; };
template <class T, int N> union wide_u {
  typename wide_word<sizeof(T) * N>::t w;
  T e[N];
  unsigned u[sizeof(T) * N / 4];
};
__device__ __forceinline__ void wide_get(float& d, float v) { d = v; }
__device__ __forceinline__ void wide_get(float& d, bf16 v) { d = to_f32(v); }
__device__ __forceinline__ void wide_get(float& d, f16 v) { d = to_f32(v); }
template <class T> __device__ __forceinline__ void wide_get(long long& d, T v) { d = to_i64(v); }
template <class T> __device__ __forceinline__ T wide_put(float v) { return from_f32<T>::cvt(v); }
template <class T> __device__ __forceinline__ T wide_put(long long v) { return from_i64<T>::cvt(v); }
// Generic: element by element; 16-bit floats go by 32-bit word pairs (one cvt.rn.bf16x2 / f16x2 per pair).
template <class T, int N, class A> struct wide_cvt {
  __device__ static void get(const wide_u<T, N>& v, A* a) {
#pragma unroll
    for (int j = 0; j < N; ++j) wide_get(a[j], v.e[j]);
  }
  __device__ static void put(wide_u<T, N>& v, const A* a) {
#pragma unroll
    for (int j = 0; j < N; ++j) v.e[j] = wide_put<T>(a[j]);
  }
};
template <class T, int N> struct wide_cvt16 {
  __device__ static void get(const wide_u<T, N>& v, float* a) {
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      a[2 * j] = unpack_lo((T*)0, v.u[j]);
      a[2 * j + 1] = unpack_hi((T*)0, v.u[j]);
    }
  }
  __device__ static void put(wide_u<T, N>& v, const float* a) {
#pragma unroll
    for (int j = 0; j < N / 2; ++j) v.u[j] = pack2((T*)0, a[2 * j], a[2 * j + 1]);
  }
};
template <int N> struct wide_cvt<bf16, N, float> : wide_cvt16<bf16, N> {};
template <int N> struct wide_cvt<f16, N, float> : wide_cvt16<f16, N> {};
template <int N, class T, class A> __device__ __forceinline__ void ld_wide(const T* p, A* a) {
  static_assert(sizeof(T) * N == 8 || sizeof(T) * N == 16, "wide accesses move 8 or 16 bytes");
  wide_u<T, N> v;
  v.w = *(const typename wide_word<sizeof(T) * N>::t*)p;
  wide_cvt<T, N, A>::get(v, a);
}
template <int N, class T, class A> __device__ __forceinline__ void st_wide(T* p, const A* a) {
  static_assert(sizeof(T) * N == 8 || sizeof(T) * N == 16, "wide accesses move 8 or 16 bytes");
  wide_u<T, N> v;
  wide_cvt<T, N, A>::put(v, a);
  *(typename wide_word<sizeof(T) * N>::t*)p = v.w;
}

}  // namespace k3k
