#!/bin/bash
# One device call (<= ~300 s), carry [".dev/bin/k3k"] (main after the i42n and i42s merges): issue 42's candidates,
# every row checked against f64 by `k3k bench`, each kernel also timed alone (K3K_BENCH_STEPS=1).
# (1) three FlashKDA presets: the defaults (IMAP=ops), IMAP=gate, IFOLD=1/2, SLOAD=tma (STAGES 2/3), and combined;
# (2) SLOAD=tma with BV=32 on 4 warps at the BV=64 presets; (3) the other three FlashKDA presets; (4) the five earlier
# presets (issue 42: not slower than before): IMAP=tiles (the kernels of before) against the defaults and the best
# candidate; (5) ncu of the state kernel at B1 T8192 H96, cp against tma. $OUT: log.txt, b1..b4.txt, ncu-*.txt
set -u
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
OUT=${OUT:-/tmp/o0945}; mkdir -p $OUT; L=$OUT/log.txt; B=.dev/bin/k3k; W=/tmp/w0945; mkdir -p $W
log() { echo "[+$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
S="K128 safe lbsigab gbf16 l2 bsig h0"
kb() { local name=$1 box=$2 presets=$3 sets=$4
  K3K_BENCH_STEPS=1 timeout $box $B bench --op kda --window-ms 60 --preset "$presets" --knobs "$sets" --out $W/$name \
    > $OUT/$name.txt 2>&1; log "$name rc=$?"; }
C="TSPLIT=0;TSPLIT=0,IMAP=gate;TSPLIT=0,IMAP=gate,IFOLD=1;TSPLIT=0,IMAP=gate,IFOLD=2;TSPLIT=0,SLOAD=tma"
C="$C;TSPLIT=0,SLOAD=tma,STAGES=3;TSPLIT=0,IMAP=gate,IFOLD=1,SLOAD=tma;TSPLIT=0,IMAP=tiles"
kb b1 110 "B1 T8192 H96 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S" "$C"
kb b2 30 "B4 T4096 H64 $S;varlen 8x1024 H96 $S" "TSPLIT=0,SLOAD=tma,BV=32,W2=4,STAGES=2;TSPLIT=0,IMAP=gate,IFOLD=1,SLOAD=tma,BV=32,W2=4,STAGES=2"
kb b3 70 "B1 T65536 H32 $S;B1 T8192 H64 $S;varlen [1300,547,2048,963,271,3063] H96 $S" "TSPLIT=0;TSPLIT=0,IMAP=gate,IFOLD=1;TSPLIT=0,IMAP=gate,IFOLD=1,SLOAD=tma;TSPLIT=0,IMAP=tiles"
kb b4 80 "B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T16384 H32 K128 safe;B1 T16384 H32 K128 exact;B4 T4096 H64 K128 safe" "TSPLIT=0,IMAP=tiles;TSPLIT=0;TSPLIT=0,IMAP=gate,IFOLD=1;TSPLIT=0,IMAP=gate,IFOLD=1,SLOAD=tma"
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
for k in TSPLIT=0 SLOAD=tma; do
  [ $(( $(date +%s) - T0 )) -lt 280 ] || { log "no time for ncu $k"; continue; }
  timeout 20 ncu --clock-control none --kernel-name regex:k3k_kda_state --launch-count 1 --metrics "$M" \
    $B bench --op kda --preset "B1 T8192 H96 $S" --knobs "$k" --reps 1 --window-ms 0 --out $W/ncu \
    > $OUT/ncu-${k%%=*}.txt 2>&1; log "ncu $k rc=$?"
  grep -E "k3k_kda_|gpu__time|dram__|lts__|registers|warps_active" $OUT/ncu-${k%%=*}.txt | sed 's/  */ /g' | cut -c1-140 >> $L
done
for f in b1 b2 b3 b4; do grep -E ' ms rel|step |FAIL|rror' $OUT/$f.txt | sed -E 's/ +/ /g; s/\[ARENA[^]]*\]//; s/k3k_kda_//' | cut -c1-120; done
tail -20 $L
