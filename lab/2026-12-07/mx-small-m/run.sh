#!/bin/bash
# Issue 45, M = 8..256 (lab/2026-12-07/mx-small-m.md): MXFP4 weights x MXFP8 activations at N6144 K3584, packed
# weights (the presets' layout). (1) The defaults of branch i45c at M = 8..256 against cuBLAS bf16 and
# torch._scaled_mm FP8 rowwise (scripts/peers.py, same run), merged into the report; (2) a knob sweep per M of the
# candidates of the model in the notes, with XDQ=tile (the on-chip activation conversion, the default before i45c)
# as the baseline; (3) 28 experts x 16 tokens (grouped tile path), XDQ auto against tile. Every k3k row is checked
# against the f64 reference by `k3k bench` (a failing set has no time). One device call, < 6 minutes, from the
# repository root with the stripped release binary of branch i45c carried:
#   bash lab/2026-12-07/mx-small-m/run.sh        (carry: [".dev/bin/k3k"]; results under $OUT, <= 8 files)
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=${K3K_NVRTC:-/usr/local/cuda/lib64/libnvrtc.so.13}
export K3K_PTXAS=${K3K_PTXAS:-/usr/local/cuda/bin/ptxas}
OUT=${OUT:-/tmp/mx-small-m-out}
mkdir -p "$OUT"
W=/tmp/mx-small-m; rm -rf $W; mkdir -p $W/sweep $W/cand
B=.dev/bin/k3k; L=$OUT/log.txt
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
# After every step: the reports so far and the table into $OUT (a call cut short keeps what was measured).
save() { tar czf $OUT/mx-small-m.tgz -C $W sweep cand 2>/dev/null; cp $W/sweep/bench.txt $OUT/defaults.txt 2>/dev/null
  cp $W/sweep/peers.json $OUT/peers.json 2>/dev/null; python3 lab/2026-12-07/mx-small-m/table.py $W > $OUT/table.txt 2>&1; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
BENCH="bench --op mxfp4_matmul --window-ms 100"
dims() { local d=""; for m in "$@"; do d="$d${d:+;}M=$m,N=6144,K=3584,act=1,packed=1"; done; echo "$d"; }
# 1. defaults at M = 8..256, then the peers on exactly those rows, merged (the report's rows with both peers).
timeout 60 $B $BENCH --dims "$(dims 8 16 32 64 128 256)" --out $W/sweep > $W/sweep/bench.txt 2>&1; log "defaults rc=$?"
SLUG=$(ls $W/sweep | grep -v txt | head -1)
timeout 90 python3 scripts/peers.py $W/sweep/$SLUG --out $W/sweep/peers.json > $W/sweep/peers.txt 2>&1; log "peers rc=$?"
$B bench --merge-peers $W/sweep/peers.json --out $W/sweep >> $W/sweep/bench.txt 2>&1
save
# 2. candidates per M (XDQ=auto is the default set; XDQ=tile the on-chip conversion of before).
cand() { local tag=$1 t=$2 ms=$3 sets=$4
  timeout $t $B $BENCH --dims "$(dims $ms)" --knobs "$sets" --out $W/cand/$tag > $W/cand/$tag.txt 2>&1; log "cand $tag rc=$?"; save; }
cand m8_16 40 "8 16" "XDQ=auto;PATH=tile,BK=256,SPLIT=1;PATH=tile,BK=256,SPLIT=2;PATH=tile"
cand m32 35 "32" "XDQ=auto;XDQ=tile;BK=256,SPLIT=1;BK=256,SPLIT=2;BK=128,SPLIT=2;BK=128,SPLIT=4,STAGES=3;BN=128,WA=8,BK=128,SPLIT=4"
cand m64 40 "64" "XDQ=auto;XDQ=tile;BK=256,SPLIT=1,WB=2;BK=128,SPLIT=2,STAGES=3;BK=64,SPLIT=4,STAGES=3;BK=64,SPLIT=4,STAGES=3,WB=2;BN=128,WA=8,BK=128,SPLIT=2;BN=128,WA=8,BK=256,SPLIT=2,STAGES=3"
cand m128 40 "128" "XDQ=auto;XDQ=tile;BM=64,BN=128,WA=8,BK=128,SPLIT=1;BM=64,BK=128,SPLIT=1,STAGES=3;BM=64,BK=64,SPLIT=2,STAGES=3;MMA=wgmma,BM=128,BN=256,SPLIT=4;MMA=wgmma,BM=128,BN=128,SPLIT=2"
cand m256 40 "256" "XDQ=auto;PATH=tile;PATH=tile,SPLIT=2;PATH=tile,BM=64,BK=64,SPLIT=1,STAGES=3;PATH=tile,BM=64,BK=256,SPLIT=1"
timeout 25 $B $BENCH --dims "G=28,per=16,N=6144,K=3584,act=1,packed=1" --knobs "XDQ=auto;XDQ=tile" --out $W/cand/g28 \
  > $W/cand/g28.txt 2>&1; log "cand g28x16 rc=$?"
save
# 3. the table, last.
cat $OUT/table.txt
log end
