#!/bin/bash
# Issue 45, MMA=fp8,F8V=4/5 (lab/2026-12-07/mx-fp8-3.md): the MXFP4 weights converted E2M1 -> E4M3 (weight
# scales folded) by a first launch, then a producer-warpgroup FP8 x FP8 wgmma GEMM.
# (1) ptxas resources.
# (2) `k3k bench` at M 64 and 4096 (N6144 K3584, MXFP8 activations): the default (PATH=dq_gemm at M4096), F8V=3 (the
#     best FP8 kernel so far), F8V=4 at BM128 BN128 / BN192 / BM64 BN128, F8V=5 (F8V=4 with the next slice's first
#     product issued before a slice's last promotion), and the persistent walk (CPS=1) of three of them.
# (3) scripts/peers.py (cuBLAS bf16 on the dequantized weights, torch._scaled_mm FP8 rowwise) on those problems,
#     merged into the report.
# (4) the 28-expert prefill (G28 mean1024): the default, F8V=4 (a block per tile, persistent), F8V=5 persistent, and
#     its peers (torch._grouped_mm bf16, _scaled_grouped_mm FP8 where torch has it).
# Every k3k row is checked against the f64 reference by `k3k bench` (a failing set has no time). The table last.
# One device call, < 4 minutes, from the repository root with the stripped release binary of branch i45d carried:
#   bash lab/2026-12-07/mx-fp8-3/run.sh   (carry [".dev/bin/k3k"]; $OUT: table.txt, bench.txt, log.txt, reports.tgz)
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=${K3K_NVRTC:-/usr/local/cuda/lib64/libnvrtc.so.13}
export K3K_PTXAS=${K3K_PTXAS:-/usr/local/cuda/bin/ptxas}
OUT=${OUT:-/tmp/mx-fp8-3-out}
mkdir -p "$OUT"
W=/tmp/mx-fp8-3; rm -rf $W; mkdir -p $W/d $W/g
B=.dev/bin/k3k; L=$OUT/log.txt; HERE=lab/2026-12-07/mx-fp8-3
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
# After every step: the reports and peers files (reports.tgz), the bench lines and the table into $OUT (a call cut
# short keeps what ran).
save() { tar czf $OUT/reports.tgz -C $W . 2>/dev/null; cat $W/bench*.txt > $OUT/bench.txt 2>/dev/null
  python3 $HERE/table.py $W > $OUT/table.txt 2>&1; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
D4="M=4096,N=6144,K=3584,act=1"
G28="G=28,mean=1024,N=6144,K=3584,act=1"
# 1. ptxas resources of the new kernels (registers, spills, shared memory).
for kn in "MMA=fp8,F8V=4" "MMA=fp8,F8V=4,BN=192" "MMA=fp8,F8V=4,BM=64,BN=128" "MMA=fp8,F8V=5" "MMA=fp8,F8V=5,CPS=1"; do
  echo "$kn: $(timeout 30 $B emit --op mxfp4_matmul --emit resources --dims $D4 --knobs "$kn" 2>&1 | tr '\n' ' ')"
done >> $L 2>&1; log "resources"
# 2. dense: the variants (MMA=auto is the default knob set), M64 then M4096.
SETS="MMA=auto;MMA=fp8,F8V=3;MMA=fp8,F8V=4;MMA=fp8,F8V=4,CPS=1;MMA=fp8,F8V=5;MMA=fp8,F8V=5,CPS=1"
SETS="$SETS;MMA=fp8,F8V=4,BN=192;MMA=fp8,F8V=4,BN=192,CPS=1;MMA=fp8,F8V=4,BM=64,BN=128"
timeout 100 $B bench --op mxfp4_matmul --dims "M=64,N=6144,K=3584,act=1;$D4" --knobs "$SETS" --window-ms 100 \
  --out $W/d > $W/bench-d.txt 2>&1; log "bench dense rc=$?"
save
# 3. the peers on exactly those problems, merged into the report.
timeout 40 python3 scripts/peers.py $W/d/$(ls $W/d | head -1) --out $W/peers-d.json > $W/peers-d.txt 2>&1; log "peers dense rc=$?"
$B bench --merge-peers $W/peers-d.json --out $W/d >> $W/bench-d.txt 2>&1
save
# 4. the 28-expert prefill and its peers.
timeout 50 $B bench --op mxfp4_matmul --dims "$G28" --knobs "MMA=auto;MMA=fp8,F8V=4;MMA=fp8,F8V=4,CPS=1;MMA=fp8,F8V=5,CPS=1" \
  --window-ms 100 --out $W/g > $W/bench-g.txt 2>&1; log "bench grouped rc=$?"
save
timeout 25 python3 scripts/peers.py $W/g/$(ls $W/g | head -1) --out $W/peers-g.json > $W/peers-g.txt 2>&1; log "peers grouped rc=$?"
$B bench --merge-peers $W/peers-g.json --out $W/g >> $W/bench-g.txt 2>&1
save
# 5. the table, last.
cat $OUT/table.txt
log end
