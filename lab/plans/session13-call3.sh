#!/usr/bin/env bash
# Session 13, device call 3. (1) The latent GEMM's pairs at less depth: call 2 read AHEAD=2 (2.19 ms at mean1024
# along m) faster than AHEAD=3 (2.37), the refill then waiting one step less on the peer's release; along n was
# the better pair at AHEAD=3. The defaults timed in the same run. (2) The benches of mxfp4_matmul and
# gated_mla.gate with the tuned records of session 12 and their peers (now the better of two triton medians), to
# publish: session 12's mxfp4 report has two cuBLAS rows 3x too slow.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=560 bash lab/plans/session13-call3.sh  (carry [".carry"], timeout_s 590)
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w13c; rm -rf $W; mkdir -p $W "$OUT"
END=$(( $(date +%s) + ${BUDGET_S:-560} )); left() { echo $(( END - $(date +%s) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
L=$OUT/log.txt; echo "start $(date -u +%T) $(git rev-parse --short HEAD 2>/dev/null)" > $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> $L 2>&1
pack() { tar czf $OUT/bench.tgz -C $W b 2>/dev/null; }
D="BK=64,BM=128,BN=256,LOAD=auto,MMA=wgmma,RASTER=m,STAGES=4,WM=8,WN=1"
V="$D,AHEAD=auto;$D,AHEAD=2,CLUSTER=2,CLUSTER_ALONG=n;$D,AHEAD=1,CLUSTER=2,CLUSTER_ALONG=n;$D,AHEAD=1,CLUSTER=2,CLUSTER_ALONG=m;$D,AHEAD=2,CLUSTER=2,CLUSTER_ALONG=n,OVERLAP=on"
timeout 150 $K bench --op latent_moe_gemm --preset "G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144" \
  --knobs "$V" --results /nonexistent --out $W/b/gemm > $OUT/bench.txt 2>&1
echo "bench gemm rc=$? $(date -u +%T)" >> $L; pack
op() { local name=$1 bt=$2 pt=$3; local dir=$W/b/$name
  [ "$(left)" -lt 40 ] && { echo "no time for $name" >> $L; return; }
  timeout $bt $K bench --op $name --results results --out $dir >> $OUT/bench.txt 2>&1; echo "bench $name rc=$? $(date -u +%T)" >> $L
  pack; local slug; slug=$(ls $dir 2>/dev/null | head -1); [ -z "$slug" ] && return
  [ $pt -gt $(left) ] && pt=$(left)
  timeout $pt python3 scripts/peers.py $dir/$slug --out $dir/peers.json >> $OUT/peers.txt 2>&1; echo "peers $name rc=$? $(date -u +%T)" >> $L
  [ -f $dir/peers.json ] && $K bench --merge-peers $dir/peers.json --out $dir >> $OUT/peers.txt 2>&1
  pack; }
op gated_mla.gate 30 40
op mxfp4_matmul 100 90
[ -d $W/b/gemm ] && [ "$(left)" -gt 40 ] && { s=$(ls $W/b/gemm | head -1); timeout 60 python3 scripts/peers.py $W/b/gemm/$s --out $W/b/gemm/peers.json >> $OUT/peers.txt 2>&1; \
  echo "peers gemm rc=$? $(date -u +%T)" >> $L; [ -f $W/b/gemm/peers.json ] && $K bench --merge-peers $W/b/gemm/peers.json --out $W/b/gemm >> $OUT/peers.txt 2>&1; pack; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b/gemm <<'PY'
import json, glob, sys
for f in glob.glob(sys.argv[1] + "/*/latent_moe_gemm.json"):
    for r in json.load(open(f))["rows"]:
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in ("AHEAD", "CLUSTER", "CLUSTER_ALONG", "OVERLAP")) or "default", ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:26]:26} peer {r.get('peer_ms') or 0:.4f} | {vs}")
PY
grep -h "^| " $W/b/gated_mla.gate/*/*.md $W/b/mxfp4_matmul/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7
