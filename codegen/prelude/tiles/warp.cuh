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

