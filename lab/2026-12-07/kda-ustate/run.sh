#!/bin/bash
# Issue 42, USTATE=1 (lab/2026-12-07/kda-ustate.md): U = (I + L)^-1 Diag(beta) v formed in the state pass. One device
# call (< 5 minutes), carry [".dev/bin/k3k"] (the release binary of branch i42d, stripped), run from the checkout's
# root. Results under $OUT (<= 8 files):
#   log.txt    timestamped steps, the table of both knob sets per preset (checks, ms, per-kernel step times), the ncu lines
#   bench.txt  `k3k bench` output (both knob sets, each checked against the f64 reference), K3K_BENCH_STEPS=1
#   ncu-*.txt  DRAM bytes, duration, registers, occupancy of the intra and state kernels at B4 T4096 H64, both sets
#   bench.tgz  the bench report (kda.json / kda.md)
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
W=/tmp/w-ustate; mkdir -p "$W"; B=.dev/bin/k3k; L=$OUT/log.txt
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a "$L"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$L"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
S="K128 safe lbsigab l2 bsig h0"
P4="B4 T4096 H64 $S"
ALL="B1 T8192 H96 $S;B1 T65536 H32 $S;B1 T8192 H64 $S;$P4;varlen 8x1024 H96 $S;varlen [1300,547,2048,963,271,3063] H96 $S"
# 1. Both knob sets on the six FlashKDA presets, each set checked against the f64 reference; K3K_BENCH_STEPS=1 also
#    times each kernel of the plan alone (intra, state).
K3K_BENCH_STEPS=1 timeout 200 $B bench --op kda --preset "$ALL" --knobs "TSPLIT=0;USTATE=1" --window-ms 100 \
  --out "$W/bench" > "$OUT/bench.txt" 2>&1; log "bench rc=$?"
grep -E "step k3k_kda|knobs|ms rel|FAIL|fail|error" "$OUT/bench.txt" | cut -c1-220 | head -80 >> "$L"
tar czf "$OUT/bench.tgz" -C "$W" bench 2>/dev/null
# 2. ncu at B4 T4096 H64: DRAM bytes of both kernels (the first launch of each: the checked run), both sets.
M=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct,launch__shared_mem_per_block_dynamic
for k in TSPLIT=0 USTATE=1; do
  timeout 60 "$NCU" --clock-control none --kernel-name regex:k3k_kda_ --launch-count 2 --metrics "$M" \
    $B bench --op kda --preset "$P4" --knobs "$k" --reps 1 --window-ms 0 --out "$W/ncu-bench" \
    > "$OUT/ncu-${k%%=*}.txt" 2>&1; log "ncu $k rc=$?"
  grep -E "k3k_kda_|dram__bytes|gpu__time|registers|shared_mem|warps_active|hit_rate" "$OUT/ncu-${k%%=*}.txt" \
    | sed 's/  */ /g' | cut -c1-160 >> "$L"
done
log end
tail -60 "$L"
