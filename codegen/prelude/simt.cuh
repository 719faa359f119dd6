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

}  // namespace k3k
