// ---------------------------------------------------------------------------------------------------------
// MXFP4 weights times a few bf16 activation rows (`Stmt::Fp4Gemv`): out[R, T] = W[R, K] x[T, K]^T, for decode.
// The K range is cut into quads of four 32-column blocks (64 bytes of a weight row, 4 bytes of its scales); in
// quad q, lane (g, l) = (lane / 4, lane % 4) loads the whole 16-byte block 4q + l of its weight rows 16b + g and
// 16b + g + 8 (b < R / 16) with its scale bytes: every weight load is 16 bytes and a quad of lanes reads 64
// contiguous bytes of a row. Warp w takes the batches w, w + WARPS, ... of U consecutive quads (so a warp's loads
// of one row cover 64U contiguous bytes), in order, through a ring of S register slots of one quad each: the
// first S quads are loaded before the first is used, and after a slot's quad is consumed the slot is refilled
// with the quad S steps ahead, so S quads (S x 2 x R/16 x 16 bytes per lane) stay in flight while the warp
// decodes and multiplies. Loads are predicated, not branched around (see `nfull`). The sum over K is taken in a
// lane-specific order that both operands share: the lane's 16 value pairs (w, f) of a block (word w, pair f: two
// consecutive columns, the lower first; natural: byte f of the word) are the A pairs of its 8 mma.m16n8k16 k-steps and its B pairs are the
// activations of the same two columns of token 8 tt + g (tt < T / 8), read as four 16-byte loads per block and
// token when the block is used (step: x chunk i, word pair j, so each B fragment is an aligned register pair of
// a load). The warps' f32 partials go to `scratch` tiles (one per warp) and are summed in warp order into `out`,
// between barriers.
// Predicated read-only loads without branches: `_if` leaves zeros (or `dflt`) when `ok` is false, `_keep` leaves
// the destination as it was.
__device__ __forceinline__ uint4 ldg_nc_v4_if(const void* p, bool ok) {
  uint4 v;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=&r"(v.x), "=&r"(v.y), "=&r"(v.z), "=&r"(v.w)
      : "l"(p), "r"((int)ok));
  return v;
}
__device__ __forceinline__ void ldg_nc_v4_keep(uint4& v, const void* p, bool ok) {
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
      : "l"(p), "r"((int)ok));
}
__device__ __forceinline__ unsigned ldg_nc_u8_if(const unsigned char* p, bool ok, unsigned dflt) {
  unsigned v;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b32 %0, %3;\n @p ld.global.nc.u8 %0, [%1];\n}\n"
      : "=&r"(v)
      : "l"(p), "r"((int)ok), "r"(dflt));
  return v;
}
__device__ __forceinline__ void ldg_nc_u8_keep(unsigned& v, const unsigned char* p, bool ok) {
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p ld.global.nc.u8 %0, [%1];\n}\n" : "+r"(v) : "l"(p), "r"((int)ok));
}
// The bf16 pair (f = 0..3) of `fp4_pair` from a word's even nibbles `lo = q & 0x0F0F0F0F` and odd nibbles
// `hi = (q >> 4) & 0x0F0F0F0F`: one prmt puts nibble 2f in byte 0 and nibble 2f + 1 in byte 2 (bytes 1 and 3 are
// the zero sign-fill of a byte below 0x80), one multiply by 0x1040 adds the copies shifted by 12 (sign to bit 15)
// and by 6 (exponent and mantissa to bits 8..6), one mask keeps those bits: the bits of `fp4_pair`'s v.
// The zero bytes need the PTX prmt's sign-replicate mode (selector msb), so the prmt is inline PTX: `__byte_perm`
// keeps only the low 3 bits of each selector nibble (NVRTC masks the selector with 0x7777), which made bytes 1 and
// 3 copies of `lo`'s byte 0 and corrupted sign and exponent of every decoded pair.
__device__ __forceinline__ unsigned prmt_b32(unsigned a, unsigned b, unsigned sel) {
  unsigned r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
template <bool FOLD> __device__ __forceinline__ unsigned fp4_pair_lh(unsigned lo, unsigned hi, int f, unsigned scale2) {
  const unsigned y = prmt_b32(lo, hi, (unsigned)(f | (8 << 4) | ((4 + f) << 8) | (8 << 12)));
  return fp4_scaled<FOLD>((y * 0x1040u) & 0x81C081C0u, scale2);
}
// 0, computed from `v` in a way the compilers do not fold: an address offset that makes a load wait for `v`.
__device__ __forceinline__ int opaque_zero(float v) {
  unsigned z;
  asm("prmt.b32 %0, %1, 0, 0x4444;" : "=r"(z) : "r"(__float_as_uint(v)));
  return (int)z;
}
// A compile-time bool as a value (to instantiate a generic lambda for both cases).
template <bool B> struct BoolC {
  static constexpr bool value = B;
};
// `cp.async` of 16 bytes (`.cg`, L2 only) or 4 bytes (`.ca`) with an L2 prefetch size (`.L2::<L2PF>B`: L2 fetches
// the aligned L2PF bytes around the copy from DRAM; 0: no qualifier) and, for the `_n` forms, a source size (the
// rest of the destination is zero-filled).
#define K3K_CP_ASYNC_L2PF(L2PF, OP, ...)                                                              \
  if constexpr (L2PF == 256) asm volatile(OP ".L2::256B" __VA_ARGS__ : "memory");                       \
  else if constexpr (L2PF == 128) asm volatile(OP ".L2::128B" __VA_ARGS__ : "memory");                  \
  else if constexpr (L2PF == 64) asm volatile(OP ".L2::64B" __VA_ARGS__ : "memory");                    \
  else asm volatile(OP __VA_ARGS__ : "memory");
template <int L2PF> __device__ __forceinline__ void cp_async16_pf(unsigned dst, const void* src) {
  K3K_CP_ASYNC_L2PF(L2PF, "cp.async.cg.shared.global", " [%0], [%1], 16;\n" ::"r"(dst), "l"(src))
}
template <int L2PF> __device__ __forceinline__ void cp_async4_pf(unsigned dst, const void* src) {
  K3K_CP_ASYNC_L2PF(L2PF, "cp.async.ca.shared.global", " [%0], [%1], 4;\n" ::"r"(dst), "l"(src))
}
template <int L2PF> __device__ __forceinline__ void cp_async16_pf_n(unsigned dst, const void* src, int n) {
  K3K_CP_ASYNC_L2PF(L2PF, "cp.async.cg.shared.global", " [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n))
}
template <int L2PF> __device__ __forceinline__ void cp_async4_pf_n(unsigned dst, const void* src, int n) {
  K3K_CP_ASYNC_L2PF(L2PF, "cp.async.ca.shared.global", " [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n))
}
#undef K3K_CP_ASYNC_L2PF
// The bulk copies of `fp4_gemv`'s BULK ring (per-warp, lane 0 issuing; addresses of the executing CTA's shared
// memory): a barrier per stage counting one arrival plus the copies' bytes, the copies completing on it.
__device__ __forceinline__ void gemv_mbar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void gemv_mbar_inval(unsigned bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void gemv_mbar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void gemv_mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nK3K_GEMV_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@p bra "
      "K3K_GEMV_DONE;\nbra K3K_GEMV_WAIT;\nK3K_GEMV_DONE:\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// `bytes` (a multiple of 16) from 16-byte aligned `src` to 16-byte aligned shared `dst`, completing on `bar`.
__device__ __forceinline__ void gemv_bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
template <int NB> struct Fp4GemvSlot {
  uint4 w[NB][2];
  unsigned s[NB][2];
};

template <bool PACKED, bool FOLD, bool FINITE, int R, int T, int WARPS, int U, int S, class LO, class LP,
          bool STAGED = false, int L2PF = 0, bool TILED = false, bool BULK = false, bool XA2 = false>
__device__ __forceinline__ void fp4_gemv(unsigned char* ot, int or0, int oc0, unsigned char* pt,
                                         const unsigned* __restrict__ q, long long qoff, long long qstride,
                                         long long qrows, long long qcols, const unsigned char* __restrict__ sg,
                                         long long soff, long long sstride, long long srows, long long scols,
                                         const bf16* __restrict__ x, long long xoff, long long xstride,
                                         long long xrows, long long xcols) {
  static_assert(R % 16 == 0 && (T == 8 || T == 16) && (U == 1 || U == 2 || U == 4 || U == 8) && S >= 1 && S <= 8,
                "fp4_gemv shape");
  static_assert(!TILED || (STAGED && PACKED && T == 8), "fp4_gemv tiled: staged ring, packed words, 8 tokens");
  static_assert(!BULK || (TILED && L2PF == 0), "fp4_gemv bulk: tiled words, no L2 prefetch size");
  static_assert(!XA2 || STAGED, "fp4_gemv x_two_ahead: staged ring");
  constexpr int NB = R / 16, TT = T / 8;
  // STAGED: the bytes of one warp's stage (SCOMPACT: tile-major scales copied whole; see the ring below) and where
  // the stages start (the scratch's first 16-byte boundary).
  constexpr bool SCOMPACT = TILED && !BULK;
  constexpr int SLOT = SCOMPACT ? NB * 1088 : NB * 2 * 32 * 20;
  unsigned char* const stages0 = pt + ((16u - (smem_u32(pt) & 15u)) & 15u);
  const int lane = lane_id(), g = lane >> 2, l = lane & 3, wid = warp_id();
  const long long vrows = qrows < srows ? qrows : srows;
  const long long nblk64 = (qcols >> 2) < scols ? (qcols >> 2) : scols;
  const int nblk = nblk64 > 0 ? (int)nblk64 : 0;
  const int nq = (nblk + 3) >> 2;
  // The valid rows and tokens of the tile as 32-bit counts (R and T at most), for cheap per-lane compares.
  const int vr = vrows < 0 ? 0 : (vrows > R ? R : (int)vrows), vt = xrows < 0 ? 0 : (xrows > T ? T : (int)xrows);
  // Whole 8-column groups of x only (a group reaching past x's columns reads as zeros): the lane's block bi has
  // its group i valid when 32 bi + 8 i + 8 <= xcols.
  const int xlim = xcols < 0 ? 0 : (xcols > 0x3FFFFFFFLL ? 0x3FFFFFFF : (int)xcols);
  // Quads below `nfull` have all four blocks and their x columns valid: they go through the ring, their loads
  // predicated by the row or token only (an invalid row's or token's registers keep their zeros: they reach only
  // that row's or token's outputs, which are discarded). The other quads, after the ring, load zeros (weights, x)
  // and 127 (scales) where a block, row, token or column group is invalid.
  const int nfull = (nblk >> 2) < (xlim >> 7) ? (nblk >> 2) : (xlim >> 7);
  // Per-lane row offsets from one base per operand, fixed for the whole K loop (block 4q + l of a row at
  // base + offset + 4q, in 16-byte units; 32-bit offsets within the tile keep the loop's address arithmetic to one
  // wide multiply-add per load). An invalid row's or token's address is never loaded from.
  const uint4* const wb = (const uint4*)(q + qoff) + l;
  const unsigned char* const sb = sg + soff + l;
  const uint4* const xb = (const uint4*)(x + xoff) + 4 * l;
  int wro[NB][2], sro[NB][2];
  bool rok[NB][2];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      const int r = 16 * b + g + 8 * jp;
      rok[b][jp] = r < vr;
      wro[b][jp] = r * (int)(qstride >> 2);
      sro[b][jp] = r * (int)sstride;
    }
  int xro[TT];
  bool tok[TT];
#pragma unroll
  for (int tt = 0; tt < TT; ++tt) {
    const int t = 8 * tt + g;
    tok[tt] = t < vt;
    xro[tt] = t * (int)(xstride >> 3);
  }
  // The warp's n-th quad: batch w + (n / U) WARPS, quad n % U of it.
  auto quad = [&](int n) { return (wid + (n / U) * WARPS) * U + n % U; };
  // Full quads (below `nfull`): predicated by the row only.
  auto load = [&](Fp4GemvSlot<NB>& sl, int qd, int after) {
    qd += after;
    const bool qok = qd < nfull;
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        ldg_nc_v4_keep(sl.w[b][jp], wb + (wro[b][jp] + 4 * qd), qok && rok[b][jp]);
        ldg_nc_u8_keep(sl.s[b][jp], sb + (sro[b][jp] + 4 * qd), qok && rok[b][jp]);
      }
  };
  // The quads past `nfull`: zeros (scale 127) where a block or row is invalid.
  auto load_tail = [&](Fp4GemvSlot<NB>& sl, int qd) {
    const bool bok = 4 * qd + l < nblk;
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const bool ok = bok && rok[b][jp];
        sl.w[b][jp] = ldg_nc_v4_if(wb + (wro[b][jp] + 4 * qd), ok);
        sl.s[b][jp] = ldg_nc_u8_if(sb + (sro[b][jp] + 4 * qd), ok, 127u);
      }
  };
  float acc[NB][TT][4];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[b][tt][i] = 0.f;
  // The activations of the lane's block of the current quad: xv[tt][i] holds columns 32 bi + 8i .. 32 bi + 8i + 7
  // of token 8tt + g (kept across quads: an invalid token's registers keep whatever they held).
  uint4 xv[TT][4];
#pragma unroll
  for (int tt = 0; tt < TT; ++tt)
#pragma unroll
    for (int i = 0; i < 4; ++i) xv[tt][i] = make_uint4(0u, 0u, 0u, 0u);
  // The products of one quad: the slot's weights times the activations `xr` of the same columns.
  auto product = [&](const Fp4GemvSlot<NB>& sl, const uint4 (&xr)[TT][4]) {
#if defined(K3K_XP_NOMMA) || defined(K3K_XP_NOMATH)
    // Timing experiments: what the removed products would have read is summed into one register that reaches the
    // output (ptxas drops work whose results go nowhere; a sum, since an XOR cancels the raw words NOMATH reads
    // four times): two IADD3 per removed mma, two per activation chunk.
    unsigned sink = 0;
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i) sink += xr[tt][i].x + xr[tt][i].y + xr[tt][i].z + xr[tt][i].w;
#endif
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const unsigned s0 = fp4_scale2<FOLD, FINITE>(sl.s[b][0]), s1 = fp4_scale2<FOLD, FINITE>(sl.s[b][1]);
      const uint4 w0 = sl.w[b][0], w1 = sl.w[b][1];
      const unsigned q0[4] = {w0.x, w0.y, w0.z, w0.w}, q1[4] = {w1.x, w1.y, w1.z, w1.w};
#pragma unroll
      for (int st = 0; st < 8; ++st) {
        // Step st multiplies x chunk i, words 2j and 2j + 1 (columns 8i + 4j .. 8i + 4j + 3: an aligned register
        // pair, the B fragment as loaded) with the weight pairs of the same columns: packed, pair i of words 2j
        // and 2j + 1 (word w holds columns 8f + 2w + h as value 2f + h); natural, bytes 2j and 2j + 1 of word i
        // (the order keeps each word's nibble planes live for consecutive steps only).
        const int i = PACKED ? (st & 3) : (st >> 1), j = PACKED ? (st >> 2) : (st & 1);
        const int wa = PACKED ? 2 * j : i, wb = PACKED ? 2 * j + 1 : i;
        const int fa = PACKED ? i : 2 * j, fb = PACKED ? i : 2 * j + 1;
        unsigned a[4];
#if defined(K3K_XP_NODECODE) || defined(K3K_XP_NOMATH)
        // Timing experiments (K3K_EXPERIMENT, wrong values on purpose): the raw words, no decode, no scale.
        (void)s0, (void)s1, (void)fa, (void)fb;
        a[0] = q0[wa], a[1] = q1[wa], a[2] = q0[wb], a[3] = q1[wb];
#else
        if (PACKED) {
          a[0] = fp4_pair_packed<FOLD>(q0[wa], fa, s0);
          a[1] = fp4_pair_packed<FOLD>(q1[wa], fa, s1);
          a[2] = fp4_pair_packed<FOLD>(q0[wb], fb, s0);
          a[3] = fp4_pair_packed<FOLD>(q1[wb], fb, s1);
        } else {
          const unsigned la0 = q0[wa] & 0x0F0F0F0Fu, ha0 = (q0[wa] >> 4) & 0x0F0F0F0Fu;
          const unsigned la1 = q1[wa] & 0x0F0F0F0Fu, ha1 = (q1[wa] >> 4) & 0x0F0F0F0Fu;
          const unsigned lb0 = q0[wb] & 0x0F0F0F0Fu, hb0 = (q0[wb] >> 4) & 0x0F0F0F0Fu;
          const unsigned lb1 = q1[wb] & 0x0F0F0F0Fu, hb1 = (q1[wb] >> 4) & 0x0F0F0F0Fu;
          a[0] = fp4_pair_lh<FOLD>(la0, ha0, fa, s0);
          a[1] = fp4_pair_lh<FOLD>(la1, ha1, fa, s1);
          a[2] = fp4_pair_lh<FOLD>(lb0, hb0, fb, s0);
          a[3] = fp4_pair_lh<FOLD>(lb1, hb1, fb, s1);
        }
#endif
#pragma unroll
        for (int tt = 0; tt < TT; ++tt) {
          const uint4 xc = xr[tt][i];
          const unsigned bb[2] = {j ? xc.z : xc.x, j ? xc.w : xc.y};
#if defined(K3K_XP_NOMMA) || defined(K3K_XP_NOMATH)
          (void)bb;
          if (tt == 0) sink += a[0] + a[1] + a[2] + a[3];
#else
          mma16816((bf16*)0, acc[b][tt], a, bb);
#endif
        }
      }
    }
#if defined(K3K_XP_NOMMA) || defined(K3K_XP_NOMATH)
    acc[0][0][0] += __uint_as_float(sink);
#endif
  };
  auto compute = [&](const Fp4GemvSlot<NB>& sl, int qd, bool tail) {
    const int bi = 4 * qd + l;
    if (!tail) {
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        // One pointer per token row and quad (immediate offsets for the four loads) at 8 tokens; 16 tokens keep
        // the per-load index (ptxas spilled 16 bytes of the 16-token, 32-row primitive case with the pointer).
        const uint4* const xp = xb + (xro[tt] + (TT == 1 ? 16 * qd : 0));
#pragma unroll
        for (int i = 0; i < 4; ++i) ldg_nc_v4_keep(xv[tt][i], TT == 1 ? xp + i : xp + (16 * qd + i), tok[tt]);
      }
    } else {
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        const uint4* const xp = xb + (xro[tt] + 16 * qd);
#pragma unroll
        for (int i = 0; i < 4; ++i)
          xv[tt][i] = ldg_nc_v4_if(xp + i, tok[tt] && bi < nblk && 32 * bi + 8 * i + 8 <= xlim);
      }
    }
    product(sl, xv);
  };
  // The ring: S slots, slot s holding the warp's quads s, s + S, ... (below `nfull`); each is consumed, then
  // refilled S ahead.
  if constexpr (STAGED) {
    // The staged ring (STAGED): the full quads go global -> shared memory by `cp.async` (each lane copies its own
    // 16-byte blocks and the aligned 4-byte scale word of each of its rows into its own slots of the warp's S-stage
    // ring, and reads them back itself: no barrier), S - 1 quads in flight while one is multiplied. The copies
    // complete in commit-group order (`cp.async.wait_group`, a counted wait in SASS), so unlike a register ring
    // (whose loads ptxas tracks on one of six scoreboards and waits for all at once) every stage stays in flight.
    // The activations of the next quad are loaded into registers one quad ahead. Staging starts after the warps'
    // partial tiles, 16-byte aligned; a stage is NB x 2 x 32 x 20 bytes (blocks, then scale words).
    // Lane piece p = 2b + jp (p < 2 NB) is tile row g + 8p. Two forms of the copies' addresses:
    // - FAST (8-token tiles whose rows are all valid and whose scale rows are a multiple of 4 bytes, the decode
    //   presets' case): the lane's
    //   sources (row g) of the next quad and its addresses in the next slots to fill and to read are loop-carried
    //   (advanced per quad, so ptxas has nothing to rematerialize), plus p times a row step the whole warp
    //   shares; no predicates. Under the register caps of many resident CTAs the general form's per-piece
    //   offsets, selects, the slot's remainder by S and the lane's shared address were rebuilt from the thread
    //   index at every quad (~150 of ~480 instructions per quad step, ncu of the 28 x 4 decode, H200, 2026-12-04; the
    //   loop went from 845 to 613 SASS instructions per two quads).
    // - general: per-piece offsets (invalid rows copy the view's first row with a zero source size, their values
    //   reach only their own, discarded outputs) and per-piece byte selects.
    // Every copy asks L2 for L2PF bytes around it (`Stmt::Fp4Gemv` l2_prefetch; 0 none).
    // BULK (tiled words, FAST form only): lane 0 copies a quad's 16-row blocks whole, each 1 KB of words and 64
    // bytes of scales, by `cp.async.bulk` (the copy engine) completing on the stage's barrier (`mbarrier`, at
    // byte WOFF + 64 NB of the stage, which the copies leave alone); every lane waits for the barrier's phase. A
    // block's tile-major bytes land where the per-lane copies put them (lane 4g + l's 16 bytes of row g + 8(p % 2)
    // at 512 (p % 2) + 16 lane), its scales as 16 rows of 4 bytes (row g + 8(p % 2) at 32 (p % 2) + 4g).
    // TILED per-lane copies (SCOMPACT): a stage is NB x 1088 bytes, the blocks' 16 x 4 scale bytes copied whole by
    // the first 4 NB lanes (16 bytes each) as the BULK ring lays them out; the other forms keep 32 per-lane scale
    // words per piece (NB x 1280; BULK's barrier sits past its scales). The stages start at the scratch's first
    // 16-byte boundary (`Stmt::Fp4Gemv`: 16 + WARPS x S x SLOT bytes), and each warp's partials go to its own first
    // stage once its ring has drained.
    constexpr int WOFF = NB * 2 * 32 * 16;
    unsigned char* const stg = stages0 + wid * S * SLOT;
    const unsigned sbase = smem_u32(stg);
    // Row-major scale bytes: each lane copies the aligned 4-byte word holding its byte (row r's block 4q + l at
    // sb + r sstride + 4q: the word's position is the same for every quad) and picks the byte with one prmt.
    const unsigned char* const swb = (const unsigned char*)((unsigned long long)sb & ~3ull);
    const int smis = (int)((unsigned long long)sb & 3ull);
    // The activations of the warp's n-th quad (full quads only; kept when past them), `after` added to the offset.
    auto load_x = [&](uint4 (&xr)[TT][4], int n, int after) {
      const int qd = quad(n);
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
        const uint4* const xp = xb + (xro[tt] + 16 * qd + after);
#pragma unroll
        for (int i = 0; i < 4; ++i) ldg_nc_v4_keep(xr[tt][i], xp + i, tok[tt] && qd < nfull);
      }
    };
    auto ring = [&](auto fast_c) {
      constexpr bool FAST = decltype(fast_c)::value;
      // General form: per-piece offsets and selects (unused by FAST).
      unsigned ssel[NB][2];
      int swo[NB][2], wrc[NB][2];
      // FAST form: the lane's sources of its next issued quad (row g; loop-carried, so no compiler rebuilds them
      // from the thread index under a register cap), advanced by the quads between two issues, and the warp's
      // row steps (8 rows, in bytes).
      // TILED (`k3k_ir::fp4::tile_major`): each 16-row block's quad is 1 KB of words (row r % 16 at 64 r) and 64
      // bytes of scales (at 4 r), the tile's first row on a 16-row boundary; row g + 8p is in block p / 2 at row
      // g + 8 (p % 2) of it.
      // (BULK: the blocks' first bytes, the same for every lane.)
      const unsigned char* wq = BULK    ? (const unsigned char*)(q + qoff) + 1024 * quad(0)
                                : TILED ? (const unsigned char*)(q + qoff) + (64 * g + 16 * l + 1024 * quad(0))
                                        : (const unsigned char*)(wb + (wro[0][0] + 4 * quad(0)));
      const unsigned char* sq = BULK    ? (const unsigned char*)(sg + soff) + 64 * quad(0)
                                : TILED ? (const unsigned char*)(sg + soff) +
                                              (64 * quad(0) + (lane >> 2) * 16u * (unsigned)sstride + 16 * l)
                                        : swb + (((sro[0][0] + smis) & ~3) + 4 * quad(0));
      const unsigned fsel = TILED ? (unsigned)l | 0x4440u : (unsigned)((sro[0][0] + smis) & 3) | 0x4440u;
      const unsigned wstep = 8u * 16u * (unsigned)(qstride >> 2), sstep = 8u * (unsigned)sstride;
      if constexpr (!FAST) {
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
          for (int jp = 0; jp < 2; ++jp) {
            const int o = rok[b][jp] ? sro[b][jp] + smis : 0;
            swo[b][jp] = o & ~3;
            ssel[b][jp] = (unsigned)(o & 3) | 0x4440u;
            wrc[b][jp] = rok[b][jp] ? wro[b][jp] : 0;
          }
      }
      // FAST: the next slot to fill and the next to read (running counters, S need not be a power of two) and the
      // lane's first piece in each (loop-carried addresses, advanced with the counters). The general form takes
      // the slot as `n % S` (two more live counters made ptxas spill at 16 tokens).
      // BULK: the barrier phase the next read waits for (flips when the read slot wraps).
      int wslot = 0, rslot = 0;
      unsigned wdst = sbase + 16u * lane, rsrc = wdst, rpar = 0;
      auto next_slot = [&](int& slot, unsigned& addr) {
        if constexpr (FAST) {
          addr = slot == S - 1 ? addr - (S - 1) * SLOT : addr + SLOT;
          slot = slot == S - 1 ? 0 : slot + 1;
        }
      };
      constexpr unsigned BAR = WOFF + 64 * NB;  // a stage's barrier, past its scales (BULK)
      if constexpr (BULK && FAST) {
        if (lane == 0) {
#pragma unroll
          for (int s = 0; s < S; ++s) gemv_mbar_init(sbase + s * SLOT + BAR);
          asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
          asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        __syncwarp();
      }
      auto issue = [&](int n) {
        const int qd = quad(n);
        const unsigned dst = sbase + (unsigned)((n % S) * SLOT);
        if constexpr (BULK && FAST) {
          // Every lane has read the slot's previous quad (its values are in the last product's registers).
          __syncwarp();
          if (qd < nfull && lane == 0) {
            const unsigned slot = wdst - 16u * lane, bar = slot + BAR;
            gemv_mbar_expect(bar, NB * (1024u + 64u));
#pragma unroll
            for (int b = 0; b < NB; ++b) {
              gemv_bulk_copy(slot + 1024 * b, wq + b * 64u * (unsigned)qstride, 1024u, bar);
              gemv_bulk_copy(slot + WOFF + 64 * b, sq + b * 16u * (unsigned)sstride, 64u, bar);
            }
          }
        } else if (qd < nfull) {
#pragma unroll
          for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int jp = 0; jp < 2; ++jp) {
              const int p = 2 * b + jp, piece = p * 32 + lane;
              if constexpr (FAST) {
                if constexpr (TILED) {
                  cp_async16_pf<L2PF>(wdst + 16 * 32 * p, wq + ((p >> 1) * 64u * (unsigned)qstride + (p & 1) * 512u));
                } else if constexpr (L2PF == 0) {
                  // (L2PF = 0 keeps its own statements: the helpers' inlining reorders NVVM's PTX.)
                  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(wdst + 16 * 32 * p),
                               "l"(wq + p * wstep)
                               : "memory");
                  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(wdst + (WOFF - 12 * lane) + 4 * 32 * p),
                               "l"(sq + p * sstep)
                               : "memory");
                } else {
                  cp_async16_pf<L2PF>(wdst + 16 * 32 * p, wq + p * wstep);
                  cp_async4_pf<L2PF>(wdst + (WOFF - 12 * lane) + 4 * 32 * p, sq + p * sstep);
                }
              } else {
                const int ok = rok[b][jp] ? 16 : 0;
                if constexpr (L2PF == 0) {
                  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + 16 * piece),
                               "l"(wb + (wrc[b][jp] + 4 * qd)), "r"(ok)
                               : "memory");
                  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst + WOFF + 4 * piece),
                               "l"(swb + (swo[b][jp] + 4 * qd)), "r"(ok >> 2)
                               : "memory");
                } else {
                  cp_async16_pf_n<L2PF>(dst + 16 * piece, wb + (wrc[b][jp] + 4 * qd), ok);
                  cp_async4_pf_n<L2PF>(dst + WOFF + 4 * piece, swb + (swo[b][jp] + 4 * qd), ok >> 2);
                }
              }
            }
          // SCOMPACT: lane 4b + i (b < NB) copies bytes 16i .. 16i + 15 of block b's 64 scale bytes (row r % 16 at
          // 4 (r % 16)), to 64 b + 16 i past the stage's words.
          if constexpr (SCOMPACT && FAST) {
            if (lane < 4 * NB) cp_async16_pf<L2PF>(wdst + WOFF, sq);
          }
        }
        if constexpr (!(BULK && FAST)) asm volatile("cp.async.commit_group;\n" ::: "memory");
        next_slot(wslot, wdst);
        if constexpr (FAST) {
          // quad(n + 1) - quad(n): the next quad of the batch, or the first of the warp's next batch.
          const int dq = n % U == U - 1 ? (WARPS - 1) * U + 1 : 1;
          wq += (TILED ? 1024 : 64) * dq;
          sq += (TILED ? 64 : 4) * dq;
        }
      };
#pragma unroll
      for (int s = 0; s + 1 < S; ++s) issue(s);
      load_x(xv, 0, 0);
      // One quad: its stage is waited for and read, multiplied with the activations `cx`, then the next quad's
      // activations are loaded into `nx` (the two register sets alternate, so none is copied; XA2: the quad after
      // next into `cx`, whose values the product has used, while `nx` holds the next one's). Those loads depend
      // on the last product (`opaque_zero`): issued before it, they would share its scoreboard with `cx`'s loads
      // and the product would wait for them too (ptxas waits for every load of a scoreboard at once).
      auto step = [&](int n, uint4 (&cx)[TT][4], uint4 (&nx)[TT][4]) {
        issue(n + S - 1);
        if constexpr (BULK && FAST) {
          gemv_mbar_wait(rsrc - 16u * lane + BAR, rpar);
          rpar ^= rslot == S - 1 ? 1u : 0u;
        } else {
          asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 1) : "memory");
        }
        const unsigned src = sbase + (unsigned)((n % S) * SLOT), rl = rsrc;
        next_slot(rslot, rsrc);
        Fp4GemvSlot<NB> sl;
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
          for (int jp = 0; jp < 2; ++jp) {
            const int p = 2 * b + jp, piece = p * 32 + lane;
            const unsigned wa = FAST ? rl + 16 * 32 * p : src + 16 * piece;
            const unsigned sa = TILED  ? rl + (WOFF - 16 * lane + 4 * g) + 64 * (p >> 1) + 32 * (p & 1)
                                : FAST ? rl + (WOFF - 12 * lane) + 4 * 32 * p
                                       : src + WOFF + 4 * piece;
            uint4 w;
            unsigned sv;
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                         : "r"(wa)
                         : "memory");
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(sv) : "r"(sa) : "memory");
            sl.w[b][jp] = w;
            sl.s[b][jp] = prmt_b32(sv, 0u, FAST ? fsel : ssel[b][jp]);
          }
        product(sl, cx);
        if constexpr (XA2) {
          load_x(cx, n + 2, opaque_zero(acc[NB - 1][TT - 1][3]));
        } else {
          load_x(nx, n + 1, opaque_zero(acc[NB - 1][TT - 1][3]));
        }
      };
      uint4 xw[TT][4];
#pragma unroll
      for (int tt = 0; tt < TT; ++tt)
#pragma unroll
        for (int i = 0; i < 4; ++i) xw[tt][i] = make_uint4(0u, 0u, 0u, 0u);
      // XA2 (`x_two_ahead`): the second set holds the next quad's activations from the start.
      if constexpr (XA2) load_x(xw, 1, 0);
#pragma unroll 1
      for (int n = 0; quad(n) < nfull; n += 2) {
        step(n, xv, xw);
        if (quad(n + 1) >= nfull) break;
        step(n + 1, xw, xv);
      }
      if constexpr (BULK && FAST) {
        // Every issued copy was waited for; the barriers' memory is a plain stage again.
        __syncwarp();
        if (lane == 0) {
#pragma unroll
          for (int s = 0; s < S; ++s) gemv_mbar_inval(sbase + s * SLOT + BAR);
        }
      }
    };
    // FAST only for 8-token tiles (the decode shapes it was measured on, H200, 2026-12-04): with 16 tokens the
    // activations' registers double, and keeping both forms made ptxas spill (8 bytes at M16 under MINB=4, 20 in
    // the 4-variant primitive case).
    if constexpr (TT == 1) {
      if (vr == R && (sstride & 3) == 0) {
        ring(BoolC<true>());
      } else if constexpr (TILED) {
        __trap();  // tiled words are read by the fast form only (the program promised full tiles: see Stmt::Fp4Gemv)
      } else {
        ring(BoolC<false>());
      }
    } else {
      ring(BoolC<false>());
    }
    // No copy may still be writing the staging area when the statement ends (the groups past the warp's quads
    // are empty, but the wait is cheap).
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  } else {
  Fp4GemvSlot<NB> ring[S];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        ring[s].w[b][jp] = make_uint4(0u, 0u, 0u, 0u);
        ring[s].s[b][jp] = 127u;
      }
#pragma unroll
  for (int s = 0; s < S; ++s) load(ring[s], quad(s), 0);
  for (int n0 = 0; quad(n0) < nfull; n0 += S) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const int qd = quad(n0 + s);
      if (qd < nfull) {
        compute(ring[s], qd, false);
        // Refill the slot once its quad is consumed: the loads' offset depends on the last product (so no
        // compiler hoists them, with the decode of the slot's words, ahead of it: registers for nothing).
        load(ring[s], quad(n0 + s + S), opaque_zero(acc[NB - 1][TT - 1][3]));
      }
    }
  }
  }
  // The partial quads (at most one, or more where x's columns end first), one per warp, after the ring.
  if constexpr (TILED) {
    if (nfull < nq) __trap();  // no partial quads in tiled words (the program promised whole quads)
  }
  for (int qd = nfull + wid; qd < nq; qd += WARPS) {
    Fp4GemvSlot<NB> tl;
    load_tail(tl, qd);
    compute(tl, qd, true);
  }
  // The warps' partials (C fragment: rows 16b + g (+8), tokens 8tt + 2l (+1)) as flat [R, T] f32 tiles of
  // `scratch` (its layout is irrelevant: only this function reads them), then their sum in warp order. STAGED:
  // each warp's tile is the start of its own ring, which it has drained (`cp.async.wait_group 0` above), at least
  // R x T x 4 bytes (S x NB x 1088 >= 64 NB T); else tile `wid` of `scratch`.
  auto part = [&](int w) {
    if constexpr (STAGED) {
      return stages0 + w * S * SLOT;
    } else {
      return pt + w * LP::TILE_BYTES;
    }
  };
  unsigned char* mine = part(wid);
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 16 * b + g + 8 * (i >> 1), c = 8 * tt + 2 * l + (i & 1);
        *(float*)(mine + (r * T + c) * 4) = acc[b][tt][i];
      }
  barrier();
  for (int e = threadIdx.x; e < R * T; e += WARPS * 32) {
    const int r = e / T, c = e % T;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) sum += *(const float*)(part(w) + e * 4);
    *(float*)(ot + LO::off(or0 + r, oc0 + c)) = (r < vr && c < vt) ? sum : 0.f;
  }
  barrier();
}

