#!/bin/bash
# The one device call left (< 10 minutes), carry [".dev/bin/k3k", ".dev/peers"]: (1) issue 42: kda's intra/state
# variants (defaults of before; FULLC=1 + GSIG=fast; + USTATE=1; + L2R=unrolled) on the six FlashKDA presets (bf16
# raw gate), each set checked against the f64 reference, intra and state ms per set, FlashKDA on the same problems in
# the same run, into the committed reports (SEED=1: lab/2026-12-07/kda-intra/run.sh); (2) issue 45: the MXFP8-
# activation M = 8..256 and M4096 presets at the defaults with cuBLAS bf16 and torch._scaled_mm, into the committed
# mxfp4_matmul report. $OUT: summary.md, log.txt, bench.tgz, flashkda-build.log (kda); mx.tgz, mx.txt (mx).
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
SEED=1 BUDGET_S=${KDA_S:-370} bash lab/2026-12-07/kda-intra/run.sh > /tmp/kda-run.txt 2>&1
echo "kda part rc=$? at +$(( $(date +%s) - T0 ))s"
# mx
W=/tmp/mx; rm -rf $W; mkdir -p $W/bench; cp -r results/bench/. $W/bench/; rm -rf $W/bench/cpu
B=.dev/bin/k3k
MP=""; for m in 8 16 32 64 128 256 4096; do MP="$MP${MP:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
timeout ${MX_BENCH_S:-90} $B bench --op mxfp4_matmul --preset "$MP" --out $W/bench > $W/bench.txt 2>&1
echo "mx bench rc=$? at +$(( $(date +%s) - T0 ))s" | tee -a $W/bench.txt
SLUG=$(cd $W/bench && ls -t */mxfp4_matmul.json | head -1 | cut -d/ -f1)
timeout ${MX_PEERS_S:-100} python3 scripts/peers.py $W/bench/$SLUG --ops mxfp4_matmul --out $W/peers.json > $W/peers.txt 2>&1
echo "mx peers rc=$? at +$(( $(date +%s) - T0 ))s" | tee -a $W/bench.txt
$B bench --merge-peers $W/peers.json --out $W/bench >> $W/bench.txt 2>&1
tar czf $OUT/mx.tgz -C $W bench/$SLUG/mxfp4_matmul.json bench/$SLUG/mxfp4_matmul.md bench.txt peers.txt peers.json 2>/dev/null
{ grep -E "mxfp8-act" $W/bench.txt | grep " ms "; grep '^{' $W/peers.txt | cut -c1-160; } > $OUT/mx.txt
cat $OUT/summary.md 2>/dev/null | head -60
cat $OUT/mx.txt
tail -5 /tmp/kda-run.txt
