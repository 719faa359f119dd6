#!/bin/bash
# Issue 45, MMA=fp8,F8V=6 (lab/2026-12-07/mx-fp8-pp.md): F8V=5 (the first-launch FP8 GEMM with the next slice's
# first product issued early) with the two consumer warpgroups taking turns: TURN=mma issues each wgmma in turn,
# TURN=ffma runs each block's promotion in turn; no block barrier in the tile walk.
# (1) ptxas resources of the F8V=6 kernels and F8V=5 (registers, spills, shared memory).
# (1b) `k3k check --backend cuda --seed 45` of F8V=6 on ragged dense and grouped problems.
# (2) `k3k bench` at M 64 and 4096 (N6144 K3584, MXFP8 activations): the default, F8V=5 (CPS 0 and 1), F8V=6
#     (CPS 0 and 1, TURN mma and ffma, BN 64, STAGES 4).
# (3) scripts/peers.py (cuBLAS bf16 on the dequantized weights, torch._scaled_mm FP8 rowwise) on those problems,
#     merged into the report.
# (4) ncu of the F8V=5 and 6 main kernels at M4096 (issue slots, stall reasons) if the call is still under ~70 s.
# (5) the 28-expert prefill (G28 mean1024): the default, F8V=5 CPS=1, F8V=6 CPS=1, its peers; ncu of TURN=ffma.
# (5b) the 28-expert prefill with the SiTU-GLU epilogue and the routing weight (G28 mean1024 epilogue=1 p=1, the
#      MoE's first GEMM; F8V>=4 and f8sync take them since 2026-12-07, branch i45e; at BN > 64, the default 128,
#      one product per block over both halves and the columns paired in shared memory, 4 stages; BN <= 64 two
#      half-width products): the default (bf16 path), F8V=5 and F8V=6 CPS=1 (BN 128), F8V=6 CPS=1 BN=64, the peer
#      (torch._grouped_mm + torch epilogue); GPU checks of GLU+p (dense and grouped, packed) in (1b).
# Every k3k row is checked against the f64 reference by `k3k bench` (a failing set has no time). The table last.
# One device call, <= 150 s (the ncu steps only while the call is under 70 / 100 s), from the repository root with the stripped release binary carried (main with i45e merged for step 5b and the GLU checks):
#   bash lab/2026-12-07/mx-fp8-pp/run.sh   (carry [".dev/bin/k3k"]; $OUT: table.txt, bench.txt, log.txt, ncu.txt, reports.tgz)
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=${K3K_NVRTC:-/usr/local/cuda/lib64/libnvrtc.so.13}
export K3K_PTXAS=${K3K_PTXAS:-/usr/local/cuda/bin/ptxas}
OUT=${OUT:-/tmp/mx-fp8-pp-out}
mkdir -p "$OUT"
W=/tmp/mx-fp8-pp; rm -rf $W; mkdir -p $W/d $W/g
B=.dev/bin/k3k; L=$OUT/log.txt; HERE=lab/2026-12-07/mx-fp8-pp
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
# After every step: the reports and peers files (reports.tgz), the bench lines and the table into $OUT (a call cut
# short keeps what ran).
save() { tar czf $OUT/reports.tgz -C $W . 2>/dev/null; cat $W/bench*.txt > $OUT/bench.txt 2>/dev/null
  python3 $HERE/table.py $W > $OUT/table.txt 2>&1; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
$B --version >> $L 2>&1
D4="M=4096,N=6144,K=3584,act=1"
G28="G=28,mean=1024,N=6144,K=3584,act=1"
# 1. ptxas resources (registers, spills, shared memory).
for kn in "MMA=fp8,F8V=5,CPS=1" "MMA=fp8,F8V=6,CPS=1" "MMA=fp8,F8V=6,CPS=1,TURN=ffma" "MMA=fp8,F8V=6,CPS=1,BN=64"; do
  echo "$kn: $(timeout 30 $B emit --op mxfp4_matmul --emit resources --dims $D4 --knobs "$kn" 2>&1 | tr '\n' ' ')"
done >> $L 2>&1; log "resources"
# 1b. F8V=6 on the GPU against the f64 reference (`k3k check`, seed 45: the same draws every run), ragged dense
#     and grouped problems (several tiles per persistent block, partial tiles, empty groups), both turn kinds: on
#     the GPU the turns really interleave the warpgroups (the CPU backends run a turn body in program order).
chk() { echo "check [$1] [$2]: $(timeout 20 $B check --backend cuda --op mxfp4_matmul --seed 45 --dims "$1" \
  --knobs "$2" --cases 2 2>&1 | tail -1)" >> $L 2>&1; }
for kn in "MMA=fp8,F8V=6,CPS=1" "MMA=fp8,F8V=6,CPS=1,BN=32,STAGES=3" "MMA=fp8,F8V=6,TURN=ffma,BN=64,STAGES=4"; do
  chk "M=333,N=520,K=1056,act=1" "$kn"
done
for kn in "MMA=fp8,F8V=6,CPS=1,BN=32,STAGES=3" "MMA=fp8,F8V=6,TURN=ffma,BN=64,STAGES=4"; do
  chk "G=6,mean=40,N=72,K=352,act=1" "$kn"
done
# GLU + p (2026-12-07, i45e): the gate and up halves as two TMA boxes; BN=32 two wgmma per block, BN=128 (the
# default) one and the columns paired in shared memory; packed weights read by the first launch; N/2 = 136 not a
# multiple of BN/2.
chk "G=6,mean=40,N=272,K=352,act=1,epilogue=1,p=1,packed=1" "MMA=fp8,F8V=6,CPS=1,BN=32,STAGES=3"
chk "M=333,N=272,K=1056,act=1,epilogue=1,p=1" "MMA=fp8,F8V=5,CPS=1"
log "checks"
# 2. dense: the variants (MMA=auto is the default knob set), M64 then M4096.
SETS="MMA=auto;MMA=fp8,F8V=5;MMA=fp8,F8V=5,CPS=1;MMA=fp8,F8V=6;MMA=fp8,F8V=6,CPS=1"
SETS="$SETS;MMA=fp8,F8V=6,TURN=ffma;MMA=fp8,F8V=6,CPS=1,TURN=ffma;MMA=fp8,F8V=6,CPS=1,BN=64"
SETS="$SETS;MMA=fp8,F8V=6,CPS=1,STAGES=4;MMA=fp8,F8V=6,CPS=1,TURN=ffma,STAGES=4"
timeout 100 $B bench --op mxfp4_matmul --dims "M=64,N=6144,K=3584,act=1;$D4" --knobs "$SETS" --window-ms 100 \
  --out $W/d > $W/bench-d.txt 2>&1; log "bench dense rc=$?"
save
# 3. the peers on exactly those problems, merged into the report.
timeout 40 python3 scripts/peers.py $W/d/$(ls $W/d | head -1) --out $W/peers-d.json > $W/peers-d.txt 2>&1; log "peers dense rc=$?"
$B bench --merge-peers $W/peers-d.json --out $W/d >> $W/bench-d.txt 2>&1
save
# 4. ncu of the main kernel (F8V=5 and 6, persistent, M4096), while the call is under ~70 s (TURN=ffma after the
#    grouped rows, under ~100 s): issue-slot use, the warp stall reasons (wgmma wait vs the turns' named barriers)
#    and the pipes' utilization.
prof() { [ $(( $(date +%s) - T0 )) -lt $1 ] || return; echo "== ncu $2" >> $OUT/ncu.txt
  timeout 25 ncu --clock-control none --kernel-name "regex:mm8_first" --launch-count 1 --section SpeedOfLight \
    --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis $B bench --op mxfp4_matmul \
    --dims "$D4" --knobs "$2" --reps 1 --window-ms 0 --results /nonexistent --out $W/pb >> $OUT/ncu.txt 2>&1
  log "ncu $2 rc=$?"; }
prof 70 "MMA=fp8,F8V=5,CPS=1"
prof 70 "MMA=fp8,F8V=6,CPS=1"
# 5. the 28-expert prefill and its peers.
GSETS="MMA=auto;MMA=fp8,F8V=5,CPS=1;MMA=fp8,F8V=6,CPS=1"
timeout 40 $B bench --op mxfp4_matmul --dims "$G28" --knobs "$GSETS" --window-ms 80 --out $W/g > $W/bench-g.txt 2>&1
log "bench grouped rc=$?"
save
timeout 25 python3 scripts/peers.py $W/g/$(ls $W/g | head -1) --out $W/peers-g.json > $W/peers-g.txt 2>&1; log "peers grouped rc=$?"
$B bench --merge-peers $W/peers-g.json --out $W/g >> $W/bench-g.txt 2>&1
save
# 5b. the 28-expert prefill with SiTU-GLU and the routing weight, and its peer (torch._grouped_mm + torch epilogue).
G28E="$G28,epilogue=1,p=1"
timeout 40 $B bench --op mxfp4_matmul --dims "$G28E" --knobs "MMA=auto;MMA=fp8,F8V=5,CPS=1;MMA=fp8,F8V=6,CPS=1;MMA=fp8,F8V=6,CPS=1,BN=64" \
  --window-ms 80 --out $W/e > $W/bench-e.txt 2>&1
log "bench grouped GLU+p rc=$?"
save
timeout 20 python3 scripts/peers.py $W/e/$(ls $W/e | head -1) --out $W/peers-e.json > $W/peers-e.txt 2>&1; log "peers GLU+p rc=$?"
$B bench --merge-peers $W/peers-e.json --out $W/e >> $W/bench-e.txt 2>&1
save
prof 100 "MMA=fp8,F8V=6,CPS=1,TURN=ffma"
grep -E "^== ncu|Duration|Issued Warp Per Scheduler|No Eligible|Active Warps Per Scheduler|Warp Cycles Per Issued|Issue Slots Busy|Compute \\(SM\\) Throughput" $OUT/ncu.txt >> $L 2>/dev/null
# 6. the table, last.
cat $OUT/table.txt
log end
