// ---------------------------------------------------------------------------------------------------------
// MXFP4 decode into a bf16 register tile (the A operand of mma_rs). Lane l (l = lane % 4) of a lane quad needs
// columns 2l + 8f + h (f = 0..3, h = 0..1) of each 32-column block: its fragment pair f is columns 2l + 8f and
// 2l + 8f + 1. Either way a pair becomes the bf16 bits of e2m1(q) * 2^-126 in both halves (sign at bit 15,
// exponent and mantissa bits at 8..6; e = 0 is the subnormal 0.5 * 2^-126), then one bf16x2 multiply by 2^126 *
// 2^(s-127) (exact: a power of two) gives the values; without `FOLD` (scale bytes above 128) two multiplies.
// - Packed layout (`k3k_ir::fp4`): word l of the block holds exactly the lane's eight values, pair f where
//   `fp4_packed_bits` builds it: pairs 0..2 at rotations by 0, 3 and 6 bits of the bit mask (one funnel shift
//   and one AND), pair 3 by one multiply that adds three shifted copies without carries, and the AND.
// - Natural layout (SPEC 1 bytes as words): the lane's pair f is byte l of word f; three prmt gather them into
//   one word with pair f in byte f (low nibble first), and per pair one prmt puts the low nibble (shifted up by
//   4) in byte 1 and the high nibble in byte 3, then sign bits stay and the three exponent/mantissa bits move
//   down 6.
__device__ __forceinline__ unsigned fp4_packed_bits(unsigned q, int f) {
  return f == 3 ? ((q & 0x001B001Bu) * 0x4108u) & 0x81C081C0u : __funnelshift_r(q, q, 3 * f) & 0x81C081C0u;
}
__device__ __forceinline__ unsigned hmul2_bf16(unsigned a, unsigned b) {
  unsigned r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
template <bool FOLD, bool FINITE> __device__ __forceinline__ unsigned fp4_scale2(unsigned s) {
  if (FOLD) {
    const unsigned m = s * 0x00800080u + 0x3F003F00u;  // bf16 2^(s-1) in both halves
    return (!FINITE && s == 255u) ? 0x7FC07FC0u : m;
  }
  const unsigned m = s == 0u ? 0x00400040u : s * 0x00800080u;  // bf16 2^(s-127); s = 0: subnormal 2^-127
  return (!FINITE && s == 255u) ? 0x7FC07FC0u : m;
}
template <bool FOLD> __device__ __forceinline__ unsigned fp4_scaled(unsigned v, unsigned scale2) {
  return FOLD ? hmul2_bf16(v, scale2) : hmul2_bf16(hmul2_bf16(v, 0x7E807E80u), scale2);
}
template <bool FOLD> __device__ __forceinline__ unsigned fp4_pair(unsigned q4, unsigned q, int f, unsigned scale2) {
  const unsigned u = __byte_perm(q4, q, (unsigned)(f | (f << 4) | ((4 + f) << 8) | ((4 + f) << 12)));
  return fp4_scaled<FOLD>((u & 0x80008000u) | ((u & 0x70007000u) >> 6), scale2);
}
template <bool FOLD> __device__ __forceinline__ unsigned fp4_pair_packed(unsigned q, int f, unsigned scale2) {
#ifdef K3K_XP_NOSCALE
  // Timing experiment (K3K_EXPERIMENT, wrong values on purpose): no scale multiply.
  return fp4_packed_bits(q, f) | (scale2 & 0u);
#else
  return fp4_scaled<FOLD>(fp4_packed_bits(q, f), scale2);
#endif
}
// Natural layout (SPEC 1 bytes as words: word w of a block holds columns 8w..8w+7): the lane's pair f is byte
// l of word f, so one 16-byte load of the block's four words (one swizzle chunk) and three prmt build the
// lane's packed word.
template <bool PACKED, bool FOLD, bool FINITE, class TT, class LQ, class LS>
__device__ __forceinline__ void dequant_fp4(TT& t, const unsigned char* qt, int qr0, int qc0, const unsigned char* st,
                                            int sr0, int sc0) {
  static_assert(TT::L::NF % 4 == 0, "dequant_fp4: 32-column blocks per warp");
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = TT::L::row(b, 2 * jp);
#pragma unroll
      for (int blk = 0; blk < TT::L::NF / 4; ++blk) {
        const int bi = TT::L::col(4 * blk, 0) >> 5;
        unsigned q;
        if (PACKED) {
          q = *(const unsigned*)(qt + LQ::off(qr0 + r, qc0 + 4 * bi + (lane_id() & 3)));
        } else {
          const uint4 w4 = *(const uint4*)(qt + LQ::off(qr0 + r, qc0 + 4 * bi));
          const unsigned l = (unsigned)(lane_id() & 3), sel = l | ((l + 4) << 4);
          q = __byte_perm(__byte_perm(w4.x, w4.y, sel), __byte_perm(w4.z, w4.w, sel), 0x5410);
        }
        const unsigned s = *(st + LS::off(sr0 + r, sc0 + bi));
        const unsigned sc = fp4_scale2<FOLD, FINITE>(s);
        const unsigned q4 = q << 4;
#pragma unroll
        for (int f = 0; f < 4; ++f)
          t.v[b][4 * blk + f][jp] = PACKED ? fp4_pair_packed<FOLD>(q, f, sc) : fp4_pair<FOLD>(q4, q, f, sc);
      }
    }
}

// Streaming decode straight from global memory (`Stmt::DequantFp4Stream`): `dequant_fp4` with the words and
// scale bytes loaded from global memory into registers, every load of the tile issued before the first decode
// (a thread keeps NB * 2 * blocks loads in flight). Packed layout: one 32-bit load per row and block (the
// quad's four lanes read the block's 16 bytes); natural: one 16-byte load of the block and three prmt. Blocks
// past the views decode to zero.
// The raw words and scale bytes of one streamed tile, per thread (register-resident: every index is a
// compile-time constant after unrolling). Packed: only `.x` of each word is used.
template <class TT> struct Fp4StreamRaw {
  static constexpr int NBK = TT::L::NF / 4;
  uint4 w[TT::L::NB][2][NBK];
  unsigned sc[TT::L::NB][2][NBK];
};

template <bool PACKED, class TT>
__device__ __forceinline__ void fp4_stream_load(Fp4StreamRaw<TT>& raw, const unsigned* __restrict__ q,
                                                long long qoff, long long qstride, long long qrows,
                                                long long qcols, const unsigned char* __restrict__ sg,
                                                long long soff, long long sstride, long long srows,
                                                long long scols) {
  static_assert(TT::L::NF % 4 == 0, "dequant_fp4_stream: 32-column blocks per warp");
  constexpr int NBK = TT::L::NF / 4;
  const unsigned l = (unsigned)(lane_id() & 3);
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = TT::L::row(b, 2 * jp);
#pragma unroll
      for (int blk = 0; blk < NBK; ++blk) {
        const int bi = TT::L::col(4 * blk, 0) >> 5;
        const bool ok = r < qrows && r < srows && bi < (qcols >> 2) && bi < scols;
        const unsigned* p = q + qoff + (long long)r * qstride + 4 * bi;
        if (PACKED) {
          raw.w[b][jp][blk].x = ok ? __ldg(p + l) : 0u;
        } else {
          raw.w[b][jp][blk] = ok ? __ldg((const uint4*)p) : make_uint4(0u, 0u, 0u, 0u);
        }
        raw.sc[b][jp][blk] = ok ? (unsigned)__ldg(sg + soff + (long long)r * sstride + bi) : 127u;
      }
    }
}

template <bool PACKED, bool FOLD, bool FINITE, class TT>
__device__ __forceinline__ void fp4_stream_decode(TT& t, const Fp4StreamRaw<TT>& raw) {
  constexpr int NBK = TT::L::NF / 4;
  const unsigned l = (unsigned)(lane_id() & 3);
#pragma unroll
  for (int b = 0; b < TT::L::NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp)
#pragma unroll
      for (int blk = 0; blk < NBK; ++blk) {
        const uint4 w4 = raw.w[b][jp][blk];
        unsigned qq;
        if (PACKED) {
          qq = w4.x;
        } else {
          const unsigned sel = l | ((l + 4) << 4);
          qq = __byte_perm(__byte_perm(w4.x, w4.y, sel), __byte_perm(w4.z, w4.w, sel), 0x5410);
        }
        const unsigned s2 = fp4_scale2<FOLD, FINITE>(raw.sc[b][jp][blk]);
        const unsigned q4 = qq << 4;
#pragma unroll
        for (int f = 0; f < 4; ++f)
          t.v[b][4 * blk + f][jp] = PACKED ? fp4_pair_packed<FOLD>(qq, f, s2) : fp4_pair<FOLD>(q4, qq, f, s2);
      }
}

template <bool PACKED, bool FOLD, bool FINITE, class TT>
__device__ __forceinline__ void dequant_fp4_stream(TT& t, const unsigned* __restrict__ q, long long qoff,
                                                   long long qstride, long long qrows, long long qcols,
                                                   const unsigned char* __restrict__ sg, long long soff,
                                                   long long sstride, long long srows, long long scols) {
  Fp4StreamRaw<TT> raw;
  fp4_stream_load<PACKED, TT>(raw, q, qoff, qstride, qrows, qcols, sg, soff, sstride, srows, scols);
  fp4_stream_decode<PACKED, FOLD, FINITE, TT>(t, raw);
}

// The software-pipelined form (`Stmt::DequantFp4Stream` with `prefetch`): `raw` (one per tile, declared at the
// kernel's top, kept across loop iterations) holds this statement's words, loaded by the previous statement's
// prefetch, unless `first`; decode them, then issue the next views' loads into `raw`, left in flight.
template <bool PACKED, bool FOLD, bool FINITE, class TT>
__device__ __forceinline__ void dequant_fp4_stream_pf(
    TT& t, Fp4StreamRaw<TT>& raw, bool first, const unsigned* __restrict__ q, long long qoff, long long qstride,
    long long qrows, long long qcols, const unsigned char* __restrict__ sg, long long soff, long long sstride,
    long long srows, long long scols, const unsigned* __restrict__ nq, long long nqoff, long long nqstride,
    long long nqrows, long long nqcols, const unsigned char* __restrict__ nsg, long long nsoff,
    long long nsstride, long long nsrows, long long nscols) {
  if (first) fp4_stream_load<PACKED, TT>(raw, q, qoff, qstride, qrows, qcols, sg, soff, sstride, srows, scols);
  fp4_stream_decode<PACKED, FOLD, FINITE, TT>(t, raw);
  fp4_stream_load<PACKED, TT>(raw, nq, nqoff, nqstride, nqrows, nqcols, nsg, nsoff, nsstride, nsrows, nscols);
}

