#!/usr/bin/env bash
# Session 7 device call 1: ncu profiles of the kernels the open issues are stuck on (GEMM mean1024 with and without
# CLUSTER=2, mxfp4 M4096 dq_gemm + 28x4 gemv, kda.decode vs FLA fused_recurrent_kda, MLA prefill), no timing claims.
set -uo pipefail
K=.carry/k3k; OUT=${OUT:-./gpu-out}; W=/tmp/w7a; rm -rf $W; mkdir -p $W/prof "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export TRITON_CACHE_DIR=$W/triton; mkdir -p $W/triton; cat .carry/triton-cache.tgz.part-* | tar xzf - -C $W/triton
L=$OUT/log.txt; echo "start $(date -u +%T)" > $L
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats"
prof() { # name op preset knobs regex count
  timeout 90 ncu --kernel-name "regex:$5" --launch-count $6 $SEC $K bench --op "$2" --preset "$3" ${4:+--knobs "$4"} --reps 2 --window-ms 0 --out $W/pb > $W/prof/$1.txt 2>&1
  echo "prof $1 rc=$? $(date -u +%T) $(grep -c 'Duration' $W/prof/$1.txt) kernels" >> $L
}
prof gemm-mean1024 latent_moe_gemm "G28 mean1024 K3584 N6144" "LOAD=auto" "gemm" 1
prof gemm-mean1024-cluster2 latent_moe_gemm "G28 mean1024 K3584 N6144" "LOAD=auto,CLUSTER=2" "gemm" 1
prof gemm-mean256 latent_moe_gemm "G28 mean256 K3584 N6144" "LOAD=auto" "gemm" 1
prof mx-m4096 mxfp4_matmul "MXFP4 linear M4096 N6144 K3584" "" "." 4
prof mx-28x4 mxfp4_matmul "MXFP4 decode 28 experts x 4 tokens N6144 K3584" "" "." 4
prof mx-m1 mxfp4_matmul "MXFP4 linear M1 N6144 K3584" "" "." 2
prof kdadec-n64-auto kda.decode "N64 H96 K128 decode" "KL=4,VPL=1,DW=4" "." 2
prof kdadec-n64-sw kda.decode "N64 H96 K128 decode" "KL=8,VPL=2,DW=4,SW=1" "." 2
prof kdadec-n256-auto kda.decode "N256 H32 K128 decode" "KL=4,VPL=1,DW=4" "." 2
timeout 120 ncu --kernel-name "regex:fused_recurrent" --launch-count 2 $SEC python3 lab/plans/session7-fla-decode.py > $W/prof/fla-decode.txt 2>&1
echo "prof fla-decode rc=$? $(date -u +%T)" >> $L
timeout 120 ncu --kernel-name "regex:fused_recurrent" --launch-skip 3 --launch-count 1 $SEC python3 lab/plans/session7-fla-decode.py > $W/prof/fla-decode-n256.txt 2>&1
echo "prof fla-decode-n256 rc=$? $(date -u +%T)" >> $L
prof mla-prefill gated_mla.prefill "causal T8192 H96 d192/128" "" "." 1
tar czf $OUT/prof.tgz -C $W prof; echo "end $(date -u +%T)" >> $L
cat $L
for f in $W/prof/*.txt; do echo "== $(basename $f)"; grep -E "^  k3k_|^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy" $f | cut -c1-140 | head -24; done
