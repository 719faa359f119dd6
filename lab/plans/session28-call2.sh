#!/usr/bin/env bash
# RAN as session 28's call 2, on an H100 (lab/2026-12-05/1927-h100-run-2/).
# Session 28, call 2 (issue 4). Two probes on whatever card comes (written for an H100):
# 1. Call 1's L2-fed probe again, with ncu's application replay: kernel replay saves and restores memory between
#    its passes, which evicted the 24 MB of weights (call 1 read 0.90 of the problem's bytes from DRAM with
#    `--cache-control none`). With application replay each pass is a new `k3k bench` whose four launches before
#    the profiled one leave the weights in L2.
# 2. An H200-like load on an H100: the H200 has the H100's SMs at 1.43x the HBM bandwidth. Under MPS with
#    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70 a process gets ~92 of the 132 SMs, so each SM must stream 1.43x the bytes
#    per second to reach the HBM rate. The read floor (session28-read-328.py) and the tile-major 28 x 4 decode
#    (auto, BN=32 BK=128 MINB=6) are timed at 100 / 70 / 50%: if the decode's ratio to the floor rises from the
#    H100's ~1.08x toward the H200's 1.23x as the SMs shrink, the H100 can stand in for the H200's gap.
# Build first here: cargo build --release; mkdir -p .carry; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=420 bash lab/plans/session28-call2.sh  (carry [".carry"], timeout_s 450)
W=/tmp/w28c2; source lab/plans/lib.sh
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
D="G=66,per=4,N=384,K=1792,tiles=1"
S32="BN=32,BK=128,MINB=6"
for kn in PATH=auto $S32; do [ "$(left)" -gt 300 ] || break
  NCU_X="--replay-mode application" ncu_rate warm-base1 none dims "$D" "$kn"
  NCU_X="--replay-mode application" ncu_rate warm-nomath none dims "$D" "$kn" NOMATH
  NCU_X="--replay-mode application" ncu_rate warm-base2 none dims "$D" "$kn"
done
python3 lab/plans/session28-rates.py $OUT/ncu-rate.txt >> $L 2>&1
if command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d >> $L 2>&1; echo "mps daemon rc=$? $(date -u +%T)" >> $L
  for pct in 100 70 50; do [ "$(left)" -gt 50 ] || break
    export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct
    echo "== SM limit $pct%" >> $L
    timeout 60 python3 lab/plans/session28-read-328.py >> $L 2>&1 || echo "read rc=$?" >> $L
    timeout 90 $K bench --op mxfp4_matmul --preset "$P28 tiles" --knobs "PATH=auto;$S32" --results /nonexistent \
      --out $W/b/mps$pct > $W/mps$pct.txt 2>&1; echo "bench rc=$? $(date -u +%T)" >> $L
    grep -E "ms rel" $W/mps$pct.txt | cut -c1-120 >> $L; cat $W/mps$pct.txt >> $OUT/bench.txt
  done
  unset CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; echo quit | nvidia-cuda-mps-control >> $L 2>&1
  tail -20 $CUDA_MPS_LOG_DIRECTORY/control.log > $OUT/mps-log.txt 2>/dev/null
else
  echo "no nvidia-cuda-mps-control on this machine: no SM-limit runs" >> $L
fi
pack; echo "end $(date -u +%T)" >> $L; cat $L
