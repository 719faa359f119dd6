#!/bin/bash
# Issue 42, the KDA state pass with SLOAD=tma (lab/2026-12-07/kda-state-2.md): W, Qbar, Kbar and gamma copied once per
# cluster of value blocks by TMA multicast. One device call (<= 90 s), carry [".dev/bin/k3k"] (the release binary of
# branch i42s, stripped), run from the checkout's root. Results under $OUT (<= 8 files):
#   log.txt    timestamped steps, the bench lines (checks against f64, ms, per-kernel step times), the ncu lines
#   bench.txt  `k3k bench` output, three knob sets, K3K_BENCH_STEPS=1 (each kernel of the plan also timed alone)
#   bench-bv32.txt  (if time is left) SLOAD=tma with BV=32 on 4 warps at B4 T4096 H64 and varlen 8x1024 H96
#   ncu-*.txt  (if time is left) the state kernel at B1 T8192 H96: duration, L2 bytes and read sectors, DRAM bytes, registers
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
W=/tmp/w-state2; mkdir -p "$W"; B=.dev/bin/k3k; L=$OUT/log.txt
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a "$L"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$L"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
S="K128 safe lbsigab gbf16 l2 bsig h0"
P1="B1 T8192 H96 $S"
# 1. The three presets, three knob sets, each checked against the f64 reference: the default; SLOAD=tma at the
#    default BV/W2/STAGES (BV=32 on 4 warps, 2 stages at B1 T8192 H96: clusters of 4; BV=64 on 8 warps, 2 stages at the
#    other two: clusters of 2); SLOAD=tma with STAGES=3 (BV=64: 127 registers, 114736 B, still 2 blocks per SM; at
#    B1 T8192 H96 it drops to 2 blocks per SM, expected slower there).
K3K_BENCH_STEPS=1 timeout 60 $B bench --op kda --window-ms 60 \
  --preset "$P1;B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
  --knobs "TSPLIT=0;TSPLIT=0,SLOAD=tma;TSPLIT=0,SLOAD=tma,STAGES=3" \
  --out "$W/bench" > "$OUT/bench.txt" 2>&1; log "bench rc=$?"
grep -E "step k3k_kda|knobs|ms rel|FAIL|fail|error|panic" "$OUT/bench.txt" | cut -c1-220 | head -80 >> "$L"
# 1b. If time is left: SLOAD=tma with BV=32 on 4 warps (clusters of 4) at the two presets where BV=64 is the default.
if [ $(( $(date +%s) - T0 )) -lt 55 ]; then
  K3K_BENCH_STEPS=1 timeout 30 $B bench --op kda --window-ms 60 --preset "B4 T4096 H64 $S;varlen 8x1024 H96 $S" \
    --knobs "TSPLIT=0,SLOAD=tma,BV=32,W2=4,STAGES=2" --out "$W/bench-bv32" > "$OUT/bench-bv32.txt" 2>&1
  log "bench BV=32 rc=$?"
  grep -E "step k3k_kda|knobs|ms rel|FAIL|fail|error|panic" "$OUT/bench-bv32.txt" | cut -c1-220 | head -40 >> "$L"
else
  log "no time for the BV=32 set"
fi
# 2. If time is left: ncu of the state kernel at B1 T8192 H96, both loads (first launch: the checked run).
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sectors_op_read.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
for k in TSPLIT=0 SLOAD=tma; do
  [ $(( $(date +%s) - T0 )) -lt 72 ] || { log "no time for ncu $k"; continue; }
  timeout 15 "$NCU" --clock-control none --kernel-name regex:k3k_kda_state --launch-count 1 --metrics "$M" \
    $B bench --op kda --preset "$P1" --knobs "$k" --reps 1 --window-ms 0 --out "$W/ncu-bench" \
    > "$OUT/ncu-${k%%=*}.txt" 2>&1; log "ncu $k rc=$?"
  grep -E "k3k_kda_|gpu__time|dram__|lts__|registers|warps_active" "$OUT/ncu-${k%%=*}.txt" \
    | sed 's/  */ /g' | cut -c1-160 >> "$L"
done
log end
tail -60 "$L"
