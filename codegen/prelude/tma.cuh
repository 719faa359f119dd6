// k3k device prelude, part 4 (included only by kernels that use them): shared-memory barriers (mbarrier) and
// bulk tensor copies (TMA, cp.async.bulk.tensor) on sm_90. Generic primitives only.
namespace k3k {

// A CUtensorMap as the driver encodes it on the host (128 opaque bytes, passed by value as a
// `const __grid_constant__` kernel argument, so its address is a parameter-space address the copy engine reads).
struct alignas(64) TensorMap {
  unsigned long long v[16];
};

// Thread 0 initializes N barriers with COUNT expected arrivals each, makes the initialization visible to the
// async proxy (the copy engine) and the cluster, then the block synchronizes.
__device__ __forceinline__ void mbar_init(unsigned char* bars, int n, unsigned count) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    for (int i = 0; i < n; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32_folded(bars + 8 * i)), "r"(count) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
}
// Thread 0 announces BYTES of transactions for the current phase and arrives (one arrival).
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned char* bar, unsigned bytes) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32_folded(bar)), "r"(bytes)
                 : "memory");
  }
}
// Every calling thread arrives once.
__device__ __forceinline__ void mbar_arrive(unsigned char* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32_folded(bar)) : "memory");
}
// Lane 0 of every warp (after the warp converges, so the arrival releases what all its lanes did) arrives once.
__device__ __forceinline__ void mbar_arrive_warp(unsigned char* bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32_folded(bar)) : "memory");
  }
}
// Wait until the phase of parity PARITY has completed (try_wait suspends for a bounded time per attempt). The
// retry loop is one asm block with labels local to its braces (as CUTLASS's ClusterBarrier::wait).
__device__ __forceinline__ void mbar_wait(unsigned char* bar, int parity) {
  asm volatile(
      "{\n.reg .pred p;\nK3K_MBAR_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@p bra "
      "K3K_MBAR_DONE;\nbra K3K_MBAR_WAIT;\nK3K_MBAR_DONE:\n}\n" ::"r"(smem_u32_folded(bar)),
      "r"(parity)
      : "memory");
}
// Thread 0 alone waits (a producer); its warp reconverges before going on.
__device__ __forceinline__ void mbar_wait_elected(unsigned char* bar, int parity) {
  if (threadIdx.x == K3K_ELECTED_TID) mbar_wait(bar, parity);
  __syncwarp();
}
// Thread 0 starts the copy of one box at element coordinates C (innermost first) into DST, completing its
// bytes on BAR. Elements outside the tensor are written as zero.
__device__ __forceinline__ void tma_load(unsigned char* dst, const TensorMap* map, unsigned char* bar, int c0, int c1) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
            smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "r"(c0), "r"(c1)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load(unsigned char* dst, const TensorMap* map, unsigned char* bar, int c0, int c1,
                                         int c2) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load(unsigned char* dst, const TensorMap* map, unsigned char* bar, int c0) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n" ::"r"(
            smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "r"(c0)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load(unsigned char* dst, const TensorMap* map, unsigned char* bar, int c0, int c1,
                                         int c2, int c3) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
        "[%2];\n" ::"r"(smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load(unsigned char* dst, const TensorMap* map, unsigned char* bar, int c0, int c1,
                                         int c2, int c3, int c4) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], "
        "[%2];\n" ::"r"(smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
        : "memory");
  }
}

// Bulk tensor stores, shared -> global (`Stmt::TmaStore`): every consumer thread makes its shared writes visible
// to the async proxy, the consumers synchronize, then thread 0 (a consumer thread) starts the copy of one box at
// element coordinates C (innermost first) from SRC and commits it as one bulk group. Box elements outside the
// tensor are not written.
__device__ __forceinline__ void tma_store_fence() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  barrier();
}
__device__ __forceinline__ void tma_store(unsigned char* src, const TensorMap* map, int c0) {
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];\n" ::"l"(
                     (unsigned long long)map),
                 "r"(smem_u32_folded(src)), "r"(c0)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  }
}
__device__ __forceinline__ void tma_store(unsigned char* src, const TensorMap* map, int c0, int c1) {
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     (unsigned long long)map),
                 "r"(smem_u32_folded(src)), "r"(c0), "r"(c1)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  }
}
__device__ __forceinline__ void tma_store(unsigned char* src, const TensorMap* map, int c0, int c1, int c2) {
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                     (unsigned long long)map),
                 "r"(smem_u32_folded(src)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  }
}
// `Stmt::TmaStoreWait`: thread 0 waits until at most N of its bulk stores still read shared memory; then the
// consumers synchronize, so any of them may overwrite the sources of the others.
template <int N>
__device__ __forceinline__ void tma_store_wait() {
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  barrier();
}
// The end of a kernel with bulk stores: thread 0 waits for all of them to complete (writes included).
__device__ __forceinline__ void tma_store_drain() {
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

}  // namespace k3k
