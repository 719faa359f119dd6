#!/bin/bash
# Device call, carry [".dev/bin", ".dev/peers"]: .dev/bin/k3k = release build of 7ee4059 (kda knob value IWU=pinned
# added; defaults unchanged: IWU=wide). The steps in order of what matters on each GPU, each in its own time box:
# (scripts/gpu_kda_flashkda.sh, lean (NCU=0 FLA=0 SWEEP=0): ~300 s for FlashKDA's build, the rows and the peer.)
# H200: (1) issue 42's KDA report at the current defaults (scripts/gpu_kda_flashkda.sh SEED=1 OLD=1 NCU=0 SWEEP=0
#   FLA=0) -> kda.tgz; (2) issue 45's M sweep report (M 8..256 and M4096, MXFP8 activations, cuBLAS bf16 and
#   torch._scaled_mm in the same run) -> mx.tgz; (3) the A/B below with the time left.
# H100: (1) the A/B: kda at FlashKDA's six presets, interleaved D P D P, each kernel also timed alone
#   (K3K_BENCH_STEPS=1; D = IWU=wide, the default; P = IWU=pinned); every row checked against f64 by k3k bench
#   -> ab.tgz; (2) the KDA report at the current defaults (OLD=0) -> kda.tgz.
set -u
T0=$(date +%s); BUDGET=${BUDGET_S:-575}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o14}; mkdir -p $OUT/ab; L=$OUT/log.txt; B=.dev/bin/k3k
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); log "$GPU $(date -u +%FT%TZ) budget $BUDGET"
S="K128 safe lbsigab gbf16 l2 bsig h0"
P="B1 T8192 H96 $S;B1 T65536 H32 $S;B1 T8192 H64 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S;varlen [1300,547,2048,963,271,3063] H96 $S"
ab() { # keep: seconds to leave for the steps after it
  declare -A KN=([D]="IWU=wide" [P]="IWU=pinned")
  for round in 1 2; do for s in D P; do
    [ $(( $(left) - $1 )) -lt 40 ] && { log "ab $s r$round: skipped ($(left)s left)"; continue; }
    K3K_CACHE_DIR=/tmp/k3k-cache K3K_BENCH_STEPS=1 timeout $(( $(left) - $1 > 70 ? 70 : $(left) - $1 )) $B bench --op kda \
      --window-ms 100 --knobs "${KN[$s]}" --preset "$P" --out /tmp/ab-$s > $OUT/ab/$s-r$round.txt 2>&1
    log "ab $s r$round rc=$?"
  done; done
  tar czf $OUT/ab.tgz -C $OUT ab 2>/dev/null
}
report() { # budget old
  K=/tmp/kdarep; rm -rf $K; mkdir -p $K
  OUT=$K SEED=1 NCU=0 SWEEP=0 OLD=$2 FLA=0 BUDGET_S=$1 bash scripts/gpu_kda_flashkda.sh > $K/stdout.txt 2>&1
  log "kda report rc=$?"; tar czf $OUT/kda.tgz -C $K . 2>/dev/null
  tail -n 12 $K/log.txt; cat $K/summary.md 2>/dev/null | head -16
}
mx() {
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
}
if echo "$GPU" | grep -q H200; then
  R=$(( $(left) - 95 )); [ $R -lt 330 ] && R=$(( $(left) - 10 ))
  report $R 1
  [ $(left) -ge 90 ] && mx
  ab 0
else
  ab 300
  report $(( $(left) - 10 )) 0
fi
cd $OUT/ab 2>/dev/null && for f in *.txt; do echo "== $f"; grep -E "^[A-Za-z].* ms .*(ok|FAIL)|step|intra|state" $f | sed -E 's/ +/ /g' | cut -c1-150; done
cat $L
