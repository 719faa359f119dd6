#!/usr/bin/env bash
# Session 14, device call 2. (1) The latent GEMM's producer warpgroup with AHEAD=auto now STAGES-2 (call 1: AHEAD=2
# was the better depth with PRODUCER=warp), with OVERLAP=on, against the defaults, on the five presets, to decide the
# default; torch._grouped_mm in the same call. (2) gated_mla.prefill with PRODUCER=warp (the Q/K/V copies from a
# producer warpgroup, new in this session): `k3k check --backend cuda`, then the two presets against the defaults
# (overlapped and plain schedules, 3 stages of 64 keys), torch SDPA + gate in the same call.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=570 bash lab/plans/session14-call2.sh  (carry [".carry"], timeout_s 595)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w14b; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-570} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W b 2>/dev/null; }
P="BM=128,BN=128,LOAD=auto,MMA=wgmma,OVERLAP=true,QK_UNROLL=true,QORDER=head,SOFTMAX=fast,STAGES=2,WM=8"
for kn in "$P,PRODUCER=warp" "$P,PRODUCER=warp,OVERLAP=false" "$P,PRODUCER=warp,BN=64,STAGES=3"; do
  timeout 90 $K check --backend cuda --op gated_mla.prefill --knobs "$kn" --cases 4 >> $OUT/check.txt 2>&1
  echo "check prefill ${kn#$P,} rc=$? $(date -u +%T)" >> $L
done
timeout 40 $K check --backend cuda --op latent_moe_gemm --knobs "PRODUCER=warp" --cases 5 >> $OUT/check.txt 2>&1
echo "check gemm PRODUCER=warp (AHEAD=auto) rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
D="BK=64,BM=128,BN=256,LOAD=auto,MMA=wgmma,RASTER=m,STAGES=4,WM=8,WN=1,AHEAD=auto"
V="$D;$D,PRODUCER=warp;$D,PRODUCER=warp,OVERLAP=on;$D,PRODUCER=warp,AHEAD=3"
timeout 220 $K bench --op latent_moe_gemm --preset "G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144;G28 mean256 K3584 N6144;G28 mean256 K3584 N6144 situ_glu+p" \
  --knobs "$V" --results /nonexistent --out $W/b/gemm > $OUT/bench-gemm.txt 2>&1
echo "bench gemm rc=$? $(date -u +%T)" >> $L; pack
VP="$P;$P,PRODUCER=warp;$P,PRODUCER=warp,OVERLAP=false;$P,PRODUCER=warp,BN=64,STAGES=3"
timeout 150 $K bench --op gated_mla.prefill --preset "causal T8192 H96 d192/128;causal T32768 H12" \
  --knobs "$VP" --results /nonexistent --out $W/b/prefill > $OUT/bench-prefill.txt 2>&1
echo "bench prefill rc=$? $(date -u +%T)" >> $L; pack
for d in gemm prefill; do
  slug=$(ls $W/b/$d 2>/dev/null | head -1)
  if [ -n "$slug" ] && [ "$(left)" -gt 45 ]; then
    t=$(( $(left) - 15 )); [ $t -gt 90 ] && t=90
    timeout $t python3 scripts/peers.py $W/b/$d/$slug --out $W/b/$d/peers.json > $OUT/peers-$d.txt 2>&1
    echo "peers $d rc=$? $(date -u +%T)" >> $L
    [ -f $W/b/$d/peers.json ] && $K bench --merge-peers $W/b/$d/peers.json --out $W/b/$d >> $OUT/peers-$d.txt 2>&1
    pack
  fi
done
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
keys = ("AHEAD", "OVERLAP", "PRODUCER", "BN", "STAGES")
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in keys), ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:30]:30} peer {r.get('peer_ms') or 0:.4f} | {vs}")
PY
