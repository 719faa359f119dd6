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
