// k3k device prelude, part 5 (included only by kernels with a thread-block cluster): cluster barriers, remote
// mbarrier arrivals and multicast bulk tensor copies on sm_90a. Generic primitives only.
namespace k3k {

// Every thread of every CTA of the cluster meets (release/acquire at cluster scope, the defaults of
// barrier.cluster.arrive / wait). All threads of each warp execute it (.aligned).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
// Lane 0 of every warp (after the warp converges) arrives once on the barrier at BAR's offset in the shared
// memory of cluster CTA CTA: mapa maps the local address to the peer's. The arrival has mbarrier.arrive's default
// semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive: it tells a peer's producer that this
// warp's reads of a slot are complete, which needs no cluster-scope fence (a `.release.cluster` arrival cost the
// latent GEMM's pairs 40% of their warps' cycles in MEMBAR stalls on the H200, 2026-12-04 10:01 UTC).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned char* bar, unsigned cta) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    asm volatile(
        "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, "
        "[ra];\n}\n" ::"r"(smem_u32_folded(bar)),
        "r"(cta)
        : "memory");
  }
}
// Thread 0 starts the copy of one box into DST of every cluster CTA in MASK (same shared offset), completing its
// bytes on the barrier at BAR's offset in each of them.
__device__ __forceinline__ void tma_load_mc(unsigned char* dst, const TensorMap* map, unsigned char* bar,
                                            unsigned short mask, int c0) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%4}], [%2], %3;\n" ::"r"(smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "h"(mask), "r"(c0)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load_mc(unsigned char* dst, const TensorMap* map, unsigned char* bar,
                                            unsigned short mask, int c0, int c1) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%4, %5}], [%2], %3;\n" ::"r"(smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "h"(mask), "r"(c0), "r"(c1)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load_mc(unsigned char* dst, const TensorMap* map, unsigned char* bar,
                                            unsigned short mask, int c0, int c1, int c2) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%4, %5, %6}], [%2], %3;\n" ::"r"(smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "h"(mask), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load_mc(unsigned char* dst, const TensorMap* map, unsigned char* bar,
                                            unsigned short mask, int c0, int c1, int c2, int c3) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%4, %5, %6, %7}], [%2], %3;\n" ::"r"(smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "h"(mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
  }
}
__device__ __forceinline__ void tma_load_mc(unsigned char* dst, const TensorMap* map, unsigned char* bar,
                                            unsigned short mask, int c0, int c1, int c2, int c3, int c4) {
  if (threadIdx.x == K3K_ELECTED_TID) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%4, %5, %6, %7, %8}], [%2], %3;\n" ::"r"(smem_u32_folded(dst)),
        "l"((unsigned long long)map), "r"(smem_u32_folded(bar)), "h"(mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
        : "memory");
  }
}

}  // namespace k3k
