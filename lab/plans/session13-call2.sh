#!/usr/bin/env bash
# Session 13, device call 2: call 1 again (same variants, same presets plus the GLU one) after the remote slot releases lost
# their `.release.cluster` (call 1: the pairs still 1.5-1.7x slower, ncu: 40% of warp cycles stalled on a memory barrier,
# the MEMBAR.ALL.GPU those arrivals compiled to) and every mbarrier wait went to CTA scope (no CCTL.IVALL), as CUTLASS.
# Session 6 read CLUSTER=2 1.6-1.9x slower (in-loop schedule); session 7 ncu: tensor pipe 37% for the pair.
#  1. GPU primitive tests (tma_multicast_cluster renders the new waits) and `k3k check --backend cuda` of the pair
#     variants at random shapes;
#  2. `k3k bench` of the five GEMM presets (the GLU one too), every variant timed in the same run: the defaults;
#     pairs along m / n with AHEAD=3; pairs along m in-loop (AHEAD=auto); pairs along m with AHEAD=2;
#     torch._grouped_mm in the same call;
#  3. ncu (clocks left alone, one launch) of the pair along m with AHEAD=3 and of the defaults at mean1024.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k;
#   cargo test --release -p k3k-codegen --test gpu_primitives --no-run, that binary to .carry/gpu_primitives
# Run: BUDGET_S=560 bash lab/plans/session13-call2.sh  (carry [".carry"], timeout_s 590)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w13b; rm -rf $W; mkdir -p $W/prof "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-560} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W gemm prof 2>/dev/null; }
D="BK=64,BM=128,BN=256,LOAD=auto,MMA=wgmma,RASTER=m,STAGES=4,WM=8,WN=1"
C2M3="$D,AHEAD=3,CLUSTER=2,CLUSTER_ALONG=m"; C2N3="$D,AHEAD=3,CLUSTER=2,CLUSTER_ALONG=n"
C2MIN="$D,AHEAD=auto,CLUSTER=2,CLUSTER_ALONG=m"; C2M2="$D,AHEAD=2,CLUSTER=2,CLUSTER_ALONG=m"
K3K_GPU=1 timeout 90 .carry/gpu_primitives > $OUT/primitives.txt 2>&1; echo "primitives rc=$? $(date -u +%T)" >> $L
grep -E "test result|FAILED|panicked" $OUT/primitives.txt | head -5 >> $L
for kn in "$C2M3" "$C2N3" "$C2MIN"; do
  timeout 60 $K check --backend cuda --op latent_moe_gemm --knobs "$kn" --cases 4 >> $OUT/check.txt 2>&1
  echo "check ${kn#$D,} rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
G="G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G28 mean256 K3584 N6144;G56 mean64 K3584 N6144;G28 mean256 K3584 N6144 situ_glu+p"
timeout 240 $K bench --op latent_moe_gemm --preset "$G" --knobs "$D,AHEAD=auto;$C2M3;$C2N3;$C2MIN;$C2M2" \
  --results /nonexistent --out $W/gemm > $OUT/bench.txt 2>&1
echo "bench rc=$? $(date -u +%T)" >> $L; pack
slug=$(ls $W/gemm 2>/dev/null | head -1)
if [ -n "$slug" ] && [ "$(left)" -gt 60 ]; then
  timeout 60 python3 scripts/peers.py $W/gemm/$slug --out $W/gemm/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$? $(date -u +%T)" >> $L
  [ -f $W/gemm/peers.json ] && $K bench --merge-peers $W/gemm/peers.json --out $W/gemm >> $OUT/peers.txt 2>&1
  pack
fi
SEC="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats"
prof() { # name knobs
  [ "$(left)" -lt 50 ] && { echo "no time for ncu $1" >> $L; return; }
  local t=$(( $(left) - 10 )); [ $t -gt 80 ] && t=80
  timeout $t ncu --clock-control none --kernel-name "regex:k3k_gemm" --launch-count 1 $SEC $K bench --op latent_moe_gemm \
    --preset "G28 mean1024 K3584 N6144" --knobs "$2" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb > $W/prof/$1.txt 2>&1
  echo "ncu $1 rc=$? $(date -u +%T)" >> $L; pack
}
prof pair-m-ahead3 "$C2M3"
prof default "$D,AHEAD=auto"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/gemm <<'PY'
import json, glob, sys
for f in glob.glob(sys.argv[1] + "/*/latent_moe_gemm.json"):
    for r in json.load(open(f))["rows"]:
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in ("AHEAD", "CLUSTER", "CLUSTER_ALONG")) or "default", ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:26]:26} peer {r.get('peer_ms') or 0:.4f} | {vs}")
PY
for f in $W/prof/*.txt; do echo "== $f"; grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|No Eligible" $f | head -6; done
