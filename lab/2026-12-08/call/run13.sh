#!/bin/bash
# Device call, carry [".dev/bin", ".dev/peers"]: .dev/bin/k3k = release build of this checkout (kda knob value
# IWU=pinned added; defaults unchanged: IWU=wide).
# (1) kda A/B at FlashKDA's six presets, interleaved D P D P, each kernel also timed alone (K3K_BENCH_STEPS=1):
#     D = defaults, P = IWU=pinned (every 16-byte global store of the intra kernel by one st.global.v4). Every row
#     is checked against f64 by k3k bench.
# (2) issue 42's KDA report at the current defaults (H200: OLD=1; H100: OLD=0; FLA=0) -> kda.tgz.
# (3) H200 only, with the time left: issue 45's M sweep report -> mx.tgz.
set -u
T0=$(date +%s); BUDGET=${BUDGET_S:-565}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o13}; mkdir -p $OUT/ab; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(date -u +%FT%TZ)"
H200=0; echo "$GPU" | grep -q H200 && H200=1
S="K128 safe lbsigab gbf16 l2 bsig h0"
P="B1 T8192 H96 $S;B1 T65536 H32 $S;B1 T8192 H64 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S;varlen [1300,547,2048,963,271,3063] H96 $S"
declare -A KN=([D]="IWU=wide" [P]="IWU=pinned")
for round in 1 2; do
  for s in D P; do
    [ $(left) -lt 330 ] && { log "$s r$round: skipped ($(left)s left)"; continue; }
    K3K_CACHE_DIR=/tmp/k3k-cache K3K_BENCH_STEPS=1 timeout 60 $B bench --op kda --window-ms 100 --knobs "${KN[$s]}" \
      --preset "$P" --out /tmp/ab-$s > $OUT/ab/$s-r$round.txt 2>&1
    log "$s r$round rc=$?"
  done
done
tar czf $OUT/ab.tgz -C $OUT ab 2>/dev/null
K=/tmp/kdarep; rm -rf $K; mkdir -p $K
RB=$(( H200 ? 300 : $(left) - 15 )); [ $RB -gt $(( $(left) - 15 )) ] && RB=$(( $(left) - 15 ))
OUT=$K SEED=1 NCU=0 SWEEP=0 OLD=$H200 FLA=0 BUDGET_S=$RB bash scripts/gpu_kda_flashkda.sh > $K/stdout.txt 2>&1
log "kda report rc=$?"
tar czf $OUT/kda.tgz -C $K . 2>/dev/null
if [ $H200 = 1 ] && [ $(left) -ge 100 ]; then
  M=/tmp/mx-rep; rm -rf $M; mkdir -p $M; cp -r results/bench/. $M/; rm -rf $M/cpu
  PM=""; for m in 8 16 32 64 128 256 4096; do PM="$PM${PM:+;}MXFP4 linear M$m N6144 K3584 mxfp8-act"; done
  timeout $(( $(left) / 2 )) $B bench --op mxfp4_matmul --window-ms 100 --preset "$PM" --out $M > $M/mx-bench.txt 2>&1
  log "mx bench rc=$?"
  SLUG=$(cd $M && ls -td */ | head -1 | tr -d /)
  timeout $(( $(left) - 10 )) python3 scripts/peers.py $M/$SLUG --ops mxfp4_matmul --out $M/peers-mx.json > $M/mx-peers.txt 2>&1
  log "mx peers rc=$?"
  $B bench --merge-peers $M/peers-mx.json --out $M >> $M/mx-peers.txt 2>&1; log "merge rc=$?"
  tar czf $OUT/mx.tgz -C $M $SLUG/mxfp4_matmul.json $SLUG/mxfp4_matmul.md peers-mx.json mx-bench.txt mx-peers.txt 2>/dev/null
  grep -E "linear M[0-9]+ .*mxfp8" $M/$SLUG/mxfp4_matmul.md | grep -v kept | cut -d'|' -f2-8 | tee -a $L
fi
tail -n 12 $K/log.txt; cat $K/summary.md 2>/dev/null | head -16
cd $OUT/ab && for f in *.txt; do echo "== $f"; grep -E "^[A-Za-z].* ms .*(ok|FAIL)|step|intra|state" $f | sed -E 's/ +/ /g' | cut -c1-150; done
cat $L
