namespace k3k {
// Kernel::pinned_wide_stores: a 16-byte global StoreWide as the vector instruction itself (`st_global_v4`,
// moves.cuh), which the compiler cannot split: a plain uint4 store (st_wide, simt.cuh) came out as four 4-byte
// stores on one of two unrolled rows, each filling a 32-byte sector in parts. The same conversion and bytes.
template <int N, class T, class A> __device__ __forceinline__ void st_wide_v(T* p, const A* a) {
  static_assert(sizeof(T) * N == 16, "pinned wide stores move 16 bytes");
  wide_u<T, N> v;
  wide_cvt<T, N, A>::put(v, a);
  st_global_v4(p, v.u[0], v.u[1], v.u[2], v.u[3]);
}
}  // namespace k3k
