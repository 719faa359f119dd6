//! CPU checks of the parts of the CUDA MXFP4 prelude decoders that the interpreter and the JIT do not model (they
//! compute plain values and sums): the natural layout's 4-op pair decode `fp4_pair_lh` (bit-exact against
//! `fp4_pair` and the e2m1 table, under the PTX `prmt` semantics), the packed layout's `fp4_packed_bits` (the
//! constants of `k3k_ir::fp4`, exact against the e2m1 table), and `fp4_gemv`'s k-step order (each mma's A pairs
//! and B pairs are the same columns of the block). Transcriptions of `codegen/prelude/tiles/mx_decode.cuh` and
//! `tiles/fp4_gemv.cuh`: keep them in step with them.

use k3k_ir::fp4;

/// The MXFP4 tile decode (`fp4_packed_bits`) and the `Fp4Gemv` primitive (`prmt_b32`, `fp4_pair_lh`, the ring).
const DECODE: &str = include_str!("../prelude/tiles/mx_decode.cuh");
const GEMV: &str = include_str!("../prelude/tiles/fp4_gemv.cuh");

/// PTX `prmt.b32 d, a, b, c` (generic mode): byte n of d is byte (c_n & 7) of {b, a}, or that byte's sign
/// replicated when c_n & 8.
fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let bytes = (u64::from(b) << 32 | u64::from(a)).to_le_bytes();
    let mut r = 0u32;
    for n in 0..4 {
        let s = (sel >> (4 * n)) & 0xF;
        let mut v = bytes[(s & 7) as usize];
        if s & 8 != 0 {
            v = if v & 0x80 != 0 { 0xFF } else { 0 };
        }
        r |= u32::from(v) << (8 * n);
    }
    r
}

/// CUDA's `__byte_perm`: only the low 3 bits of each selector nibble (NVRTC masks the selector with 0x7777).
fn byte_perm(a: u32, b: u32, sel: u32) -> u32 {
    prmt(a, b, sel & 0x7777)
}

/// `fp4_pair`'s v (before the scale multiply).
fn pair_old(q: u32, f: u32) -> u32 {
    let u = byte_perm(q << 4, q, f | (f << 4) | ((4 + f) << 8) | ((4 + f) << 12));
    (u & 0x8000_8000) | ((u & 0x7000_7000) >> 6)
}

/// `fp4_pair_lh`'s v with a given byte permute.
fn pair_lh(q: u32, f: u32, perm: fn(u32, u32, u32) -> u32) -> u32 {
    let (lo, hi) = (q & 0x0F0F_0F0F, (q >> 4) & 0x0F0F_0F0F);
    let y = perm(lo, hi, f | (8 << 4) | ((4 + f) << 8) | (8 << 12));
    y.wrapping_mul(0x1040) & 0x81C0_81C0
}

/// e2m1 value of a nibble.
fn e2m1(n: u32) -> f64 {
    const MAG: [f64; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    let m = MAG[(n & 7) as usize];
    if n & 8 != 0 { -m } else { m }
}

/// A bf16 (bits) times 2^126, as f64 (bf16 subnormals included).
fn bf16_times_2_126(h: u32) -> f64 {
    f64::from(f32::from_bits(h << 16)) * 2f64.powi(126)
}

fn words() -> Vec<u32> {
    // Every byte value at every position, with the other bytes from a few fixed patterns and an LCG.
    let mut fill = vec![0u32, 0xFFFF_FFFF, 0x8888_8888, 0x7777_7777, 0x0F0F_0F0F, 0xF0F0_F0F0];
    let mut s = 0x1234_5678u32;
    for _ in 0..32 {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        fill.push(s);
    }
    let mut out = Vec::new();
    for pos in 0..4 {
        for byte in 0..256u32 {
            for &fl in &fill {
                out.push((fl & !(0xFF << (8 * pos))) | (byte << (8 * pos)));
            }
        }
    }
    out
}

#[test]
fn fp4_pair_lh_matches_fp4_pair_and_e2m1_for_every_nibble() {
    for q in words() {
        for f in 0..4 {
            let v = pair_lh(q, f, prmt);
            assert_eq!(v, pair_old(q, f), "q {q:#010x} f {f}");
            let (n0, n1) = ((q >> (8 * f)) & 0xF, (q >> (8 * f + 4)) & 0xF);
            // Low half: the even nibble (column 2f or the pair's first column), high half: the odd one. The
            // bf16 value is e2m1 * 2^-126 (zero keeps its sign: -0 for nibble 8).
            assert_eq!(bf16_times_2_126(v & 0xFFFF), e2m1(n0), "q {q:#010x} f {f} low");
            assert_eq!(bf16_times_2_126(v >> 16), e2m1(n1), "q {q:#010x} f {f} high");
        }
    }
}

#[test]
fn fp4_pair_lh_needs_the_prmt_sign_mode() {
    // With `__byte_perm` (selector nibbles cut to 3 bits) the zero bytes become copies of byte 0 of the even
    // nibbles: the decode the GPU ran before the fix, wrong for most words.
    let bad = words().into_iter().filter(|&q| (0..4).any(|f| pair_lh(q, f, byte_perm) != pair_old(q, f))).count();
    assert!(bad > 0);
    // The prelude's decode goes through inline PTX prmt, not `__byte_perm`.
    let start = GEMV.find("unsigned fp4_pair_lh(").expect("fp4_pair_lh in fp4_gemv.cuh");
    let body = &GEMV[start..start + GEMV[start..].find("\n}\n").expect("end of fp4_pair_lh")];
    assert!(body.contains("prmt_b32(lo, hi,"), "{body}");
    assert!(!body.contains("__byte_perm"), "{body}");
    let p = GEMV.find("unsigned prmt_b32(").expect("prmt_b32 in fp4_gemv.cuh");
    let pbody = &GEMV[p..p + GEMV[p..].find("\n}\n").expect("end of prmt_b32")];
    assert!(pbody.contains("asm(\"prmt.b32 %0, %1, %2, %3;\""), "{pbody}");
}

/// The column (0..32) of a block's weight pair (word w, byte f) nibble h, per layout.
fn wcol(packed: bool, w: usize, f: usize, h: usize) -> usize {
    if packed { 8 * f + 2 * w + h } else { 8 * w + 2 * f + h }
}

#[test]
fn fp4_gemv_k_steps_pair_a_and_b_columns() {
    // mma.m16n8k16 (row.col): A reg 0/1 (rows g, g + 8) and B reg 0 hold k = 2 l + h, A reg 2/3 and B reg 1 hold
    // k = 2 l + 8 + h, for lane (g, l). In `fp4_gemv` every lane of a quad column l multiplies its own block
    // 4q + l (weights of its rows, activations of its token), so a step is right when, for each lane, the weight
    // columns of A's k slots are the activation columns of B's same k slots (independent of g), and the eight
    // steps cover each of the block's 32 columns exactly once.
    for packed in [false, true] {
        let mut seen = [0u32; 32];
        for st in 0..8usize {
            // As in fp4_gemv.cuh.
            let i = if packed { st & 3 } else { st >> 1 };
            let j = if packed { st >> 2 } else { st & 1 };
            let (wa, wb) = if packed { (2 * j, 2 * j + 1) } else { (i, i) };
            let (fa, fb) = if packed { (i, i) } else { (2 * j, 2 * j + 1) };
            // bb = {j ? xc.z : xc.x, j ? xc.w : xc.y} of x chunk i (columns 8 i .. 8 i + 7, two per word).
            let (xw0, xw1) = if j == 1 { (2, 3) } else { (0, 1) };
            for h in 0..2 {
                let (a0, a2) = (wcol(packed, wa, fa, h), wcol(packed, wb, fb, h));
                let (b0, b1) = (8 * i + 2 * xw0 + h, 8 * i + 2 * xw1 + h);
                assert_eq!(a0, b0, "packed {packed} step {st} h {h}: k slot 2l");
                assert_eq!(a2, b1, "packed {packed} step {st} h {h}: k slot 2l + 8");
                seen[a0] += 1;
                seen[a2] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "packed {packed}: {seen:?}");
    }
}

#[test]
fn fp4_packed_bits_spells_the_ir_layout_and_decodes_every_pair_exactly() {
    let start = DECODE.find("unsigned fp4_packed_bits(").expect("fp4_packed_bits in mx_decode.cuh");
    let body = &DECODE[start..start + DECODE[start..].find("\n}\n").expect("end of fp4_packed_bits")];
    // The prelude's constants are those of `k3k_ir::fp4`, which its own tests check against the layout.
    for c in [
        format!("{:#010X}u", fp4::PAIR3_SOURCE),
        format!("{:#X}u", fp4::PAIR3_MUL),
        format!("{:#010X}u", fp4::PAIR_BITS),
    ] {
        assert!(body.contains(&c.replacen("0X", "0x", 1)), "{c} not in {body}");
    }
    assert_eq!(fp4::PAIR_ROTATION, [0, 3, 6]);
    assert!(body.contains("f == 3 ?") && body.contains("__funnelshift_r(q, q, 3 * f)"), "{body}");
    // Every pair of every word decodes to the e2m1 values (times 2^-126) of the codes the layout puts there.
    for q in words() {
        for f in 0..4 {
            let v = fp4::packed_pair_bits(q, f);
            assert_eq!(v & !fp4::PAIR_BITS, 0);
            assert_eq!(bf16_times_2_126(v & 0xFFFF), e2m1(fp4::code(q, 2 * f, true)), "q {q:#010x} f {f} low");
            assert_eq!(bf16_times_2_126(v >> 16), e2m1(fp4::code(q, 2 * f + 1, true)), "q {q:#010x} f {f} high");
        }
    }
}

/// `fp4_gemv`'s tiled ring (`TILED`, FAST form), both fillings: the per-lane copies (each lane 16 bytes of words
/// per piece, the first 4 NB lanes 16 bytes of the blocks' scales each) and BULK's whole-block copies. For every
/// lane (g, l), piece p (row g + 8p of the tile, block p / 2 of 16 rows) and quad, the bytes the lane reads back
/// from its stage (words at `rl + 16 * 32 * p`, scales at `rl + (WOFF - 16 * lane + 4 * g) + 64 * (p >> 1) + 32 *
/// (p & 1)`, byte l picked) are the tile-major bytes of its row's block `4 quad + l` ([`fp4::tile_major`]). No
/// stage byte is written twice, the per-lane stage fits its NB x 1088 bytes, and the bulk copies stay clear of
/// the barrier. Transcriptions of fp4_gemv.cuh: the expressions are checked to be there.
#[test]
fn fp4_gemv_tiled_ring_reads_each_lanes_blocks() {
    for needle in [
        "(const unsigned char*)(q + qoff) + (64 * g + 16 * l + 1024 * quad(0))",
        "(64 * quad(0) + (lane >> 2) * 16u * (unsigned)sstride + 16 * l)",
        "wq + ((p >> 1) * 64u * (unsigned)qstride + (p & 1) * 512u)",
        "cp_async16_pf<L2PF>(wdst + 16 * 32 * p,",
        "if (lane < 4 * NB) cp_async16_pf<L2PF>(wdst + WOFF, sq);",
        "(const unsigned char*)(q + qoff) + 1024 * quad(0)",
        "(const unsigned char*)(sg + soff) + 64 * quad(0)",
        "gemv_bulk_copy(slot + 1024 * b, wq + b * 64u * (unsigned)qstride, 1024u, bar);",
        "gemv_bulk_copy(slot + WOFF + 64 * b, sq + b * 16u * (unsigned)sstride, 64u, bar);",
        "gemv_mbar_expect(bar, NB * (1024u + 64u));",
        "constexpr unsigned BAR = WOFF + 64 * NB;",
        "const unsigned wa = FAST ? rl + 16 * 32 * p : src + 16 * piece;",
        "TILED  ? rl + (WOFF - 16 * lane + 4 * g) + 64 * (p >> 1) + 32 * (p & 1)",
        "constexpr int SLOT = SCOMPACT ? NB * 1088 : NB * 2 * 32 * 20;",
        "constexpr int WOFF = NB * 2 * 32 * 16;",
        "wq += (TILED ? 1024 : 64) * dq;",
        "sq += (TILED ? 64 : 4) * dq;",
    ] {
        assert!(GEMV.contains(needle), "fp4_gemv.cuh no longer has `{needle}`: update this transcription");
    }
    use std::collections::HashMap;
    for nb in [1usize, 2, 4, 8] {
        let woff = nb * 2 * 32 * 16;
        for k in [128usize, 384, 3584] {
            let (qstride, sstride) = (k / 8, k / 32); // words (u32) and scale bytes per row
            let rows = 16 * nb * 3;
            for r0 in (0..rows).step_by(16 * nb) {
                // The tile's views start at row r0 (a multiple of 16): row-major offsets, which tile-major keeps.
                let (qbase, sbase) = (4 * r0 * qstride, r0 * sstride);
                assert_eq!(qbase / 4, fp4::tile_major(r0 * qstride, qstride, fp4::TILE_QUAD_WORDS));
                assert_eq!(sbase, fp4::tile_major(r0 * sstride, sstride, fp4::TILE_QUAD_SCALES));
                for qd in 0..k / 128 {
                    // Each filling: global byte per stage byte.
                    let put = |stage: &mut HashMap<usize, usize>, dst: usize, src: usize, n: usize| {
                        let aligned = [dst, src, n].iter().all(|v| v.is_multiple_of(16));
                        assert!(aligned, "copies are 16-byte aligned");
                        for j in 0..n {
                            assert!(stage.insert(dst + j, src + j).is_none(), "stage byte {} written twice", dst + j);
                        }
                    };
                    let (wq, sq) = (qbase + 1024 * qd, sbase + 64 * qd);
                    let mut bulk = HashMap::new();
                    for b in 0..nb {
                        put(&mut bulk, 1024 * b, wq + b * 64 * qstride, 1024);
                        put(&mut bulk, woff + 64 * b, sq + b * 16 * sstride, 64);
                    }
                    let bar = woff + 64 * nb;
                    assert_eq!(bulk.len(), nb * (1024 + 64), "the barrier's expected bytes");
                    assert!(bar % 8 == 0 && bar + 8 <= nb * 1280 && (bar..bar + 8).all(|a| !bulk.contains_key(&a)));
                    let mut lanes = HashMap::new();
                    for lane in 0..32 {
                        let (g, l) = (lane / 4, lane % 4);
                        for p in 0..2 * nb {
                            let wsrc = qbase + 64 * g + 16 * l + 1024 * qd + (p >> 1) * 64 * qstride + (p & 1) * 512;
                            put(&mut lanes, 16 * lane + 16 * 32 * p, wsrc, 16);
                        }
                        if lane < 4 * nb {
                            let ssrc = sbase + 64 * qd + (lane >> 2) * 16 * sstride + 16 * l;
                            put(&mut lanes, woff + 16 * lane, ssrc, 16);
                        }
                    }
                    assert_eq!(lanes.len(), nb * 1088, "the per-lane stage is full");
                    assert!(lanes.keys().all(|&a| a < nb * 1088), "the per-lane stage fits NB x 1088 bytes");
                    for (what, stage) in [("per-lane", &lanes), ("bulk", &bulk)] {
                        for lane in 0..32 {
                            let (g, l) = (lane / 4, lane % 4);
                            let rl = 16 * lane;
                            for p in 0..2 * nb {
                                let row = r0 + g + 8 * p;
                                let wtile = 4 * fp4::tile_major(row * qstride + 16 * qd + 4 * l, qstride, 16);
                                let stile = fp4::tile_major(row * sstride + 4 * qd + l, sstride, 4);
                                for j in 0..16 {
                                    let got = stage[&(rl + 16 * 32 * p + j)];
                                    assert_eq!(got, wtile + j, "{what} nb {nb} k {k} quad {qd} lane {lane} piece {p}");
                                }
                                let sa = rl + woff - 16 * lane + 4 * g + 64 * (p >> 1) + 32 * (p & 1);
                                assert_eq!(sa % 4, 0);
                                assert_eq!(stage[&(sa + l)], stile, "{what} scale nb {nb} k {k} lane {lane} piece {p}");
                            }
                        }
                    }
                }
            }
        }
    }
}
