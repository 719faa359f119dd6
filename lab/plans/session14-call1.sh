#!/usr/bin/env bash
# Session 14, device call 1: the latent GEMM with a dedicated producer warpgroup (PRODUCER=warp, `Stmt::Producer`:
# warp specialization, two role slices, setmaxnreg 40/232), alone and under thread-block pairs (CLUSTER=2), whose
# L2 saving session 13 measured (49% vs 70% L2 throughput) but lost to the producer being thread 0 of consumer
# warp 0. (1) `k3k check --backend cuda` of the producer-warp variants at random shapes (ragged, empty groups,
# pairs); (2) `k3k bench` of the four GEMM presets, every variant in the same run as the defaults, then the GLU
# preset for the defaults and the best guesses; torch._grouped_mm in the same call; (3) ncu (clocks left alone,
# one launch) of PRODUCER=warp and of its pair along n at mean1024.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=570 bash lab/plans/session14-call1.sh  (carry [".carry"], timeout_s 595)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w14a; rm -rf $W; mkdir -p $W/prof "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-570} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W b prof 2>/dev/null; }
D="BK=64,BM=128,BN=256,LOAD=auto,MMA=wgmma,RASTER=m,STAGES=4,WM=8,WN=1,AHEAD=auto"
PW="$D,PRODUCER=warp"
for kn in "$PW" "$PW,AHEAD=2,OVERLAP=on" "$PW,CLUSTER=2,CLUSTER_ALONG=n" "$PW,CLUSTER=2,CLUSTER_ALONG=m,OVERLAP=on"; do
  timeout 60 $K check --backend cuda --op latent_moe_gemm --knobs "$kn" --cases 5 >> $OUT/check.txt 2>&1
  echo "check ${kn#$D,} rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
V="$D;$PW;$PW,AHEAD=2;$PW,OVERLAP=on;$PW,CLUSTER=2,CLUSTER_ALONG=n;$PW,CLUSTER=2,CLUSTER_ALONG=n,AHEAD=3;$PW,CLUSTER=2,CLUSTER_ALONG=n,OVERLAP=on;$PW,CLUSTER=2,CLUSTER_ALONG=m"
timeout 260 $K bench --op latent_moe_gemm --preset "G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144;G28 mean256 K3584 N6144" \
  --knobs "$V" --results /nonexistent --out $W/b/gemm > $OUT/bench.txt 2>&1
echo "bench gemm rc=$? $(date -u +%T)" >> $L; pack
[ "$(left)" -gt 200 ] && { timeout 60 $K bench --op latent_moe_gemm --preset "G28 mean256 K3584 N6144 situ_glu+p" \
  --knobs "$D;$PW;$PW,CLUSTER=2,CLUSTER_ALONG=n" --results /nonexistent --out $W/b/glu > $OUT/bench-glu.txt 2>&1
  echo "bench glu rc=$? $(date -u +%T)" >> $L; pack; }
for d in gemm glu; do
  slug=$(ls $W/b/$d 2>/dev/null | head -1)
  if [ -n "$slug" ] && [ "$(left)" -gt 90 ]; then
    timeout 75 python3 scripts/peers.py $W/b/$d/$slug --out $W/b/$d/peers.json > $OUT/peers-$d.txt 2>&1
    echo "peers $d rc=$? $(date -u +%T)" >> $L
    [ -f $W/b/$d/peers.json ] && $K bench --merge-peers $W/b/$d/peers.json --out $W/b/$d >> $OUT/peers-$d.txt 2>&1
    pack
  fi
done
SEC="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats"
prof() { # name knobs
  [ "$(left)" -lt 45 ] && { echo "no time for ncu $1" >> $L; return; }
  local t=$(( $(left) - 10 )); [ $t -gt 70 ] && t=70
  timeout $t ncu --clock-control none --kernel-name "regex:k3k_gemm" --launch-count 1 $SEC $K bench --op latent_moe_gemm \
    --preset "G28 mean1024 K3584 N6144" --knobs "$2" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/$1.txt 2>&1
  echo "ncu $1 rc=$? $(date -u +%T)" >> $L; pack
}
prof producer-warp "$PW"
prof producer-warp-pair-n "$PW,CLUSTER=2,CLUSTER_ALONG=n"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/*/latent_moe_gemm.json")):
    for r in json.load(open(f))["rows"]:
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in ("AHEAD", "CLUSTER", "CLUSTER_ALONG", "OVERLAP", "PRODUCER")) or "default", ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:30]:30} peer {r.get('peer_ms') or 0:.4f} | {vs}")
PY
for f in $W/prof/*.txt; do echo "== $f"; grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|No Eligible" $f | head -7; done
