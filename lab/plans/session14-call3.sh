#!/usr/bin/env bash
# Session 14, device call 3: the new defaults (latent GEMM PRODUCER=warp OVERLAP=on, AHEAD=auto = 2; MLA prefill
# PRODUCER=warp) checked on the GPU (GPU primitive tests, `k3k check --backend cuda` of every operator: the prelude's
# barrier and elected thread changed for all), the two operators re-tuned from the committed records (round 1 times
# the new defaults and the old winners in the same run), then benched with those records and their peers for the
# published reports; mxfp4's dq_gemm prefill (its GEMM takes the GEMM defaults) too; a short GPU fuzz of both.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k;
#   cargo test --release -p k3k-codegen --test gpu_primitives --no-run, that binary to .carry/gpu_primitives
# Run: BUDGET_S=575 bash lab/plans/session14-call3.sh  (carry [".carry"], timeout_s 598)
W=/tmp/w14c; source lab/plans/lib.sh
mkdir -p $W/results && cp -r results/nvidia-h200 $W/results/
K3K_GPU=1 timeout 60 .carry/gpu_primitives > $OUT/primitives.txt 2>&1; echo "primitives rc=$? $(date -u +%T)" >> $L
grep -E "test result|FAILED|panicked" $OUT/primitives.txt | head -5 >> $L
timeout 100 $K check --backend cuda --op all --cases 3 > $OUT/check.txt 2>&1; echo "check all rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op latent_moe_gemm --cases 12 >> $OUT/check.txt 2>&1; echo "check gemm rc=$? $(date -u +%T)" >> $L
timeout 60 $K check --backend cuda --op gated_mla.prefill --cases 6 >> $OUT/check.txt 2>&1; echo "check prefill rc=$? $(date -u +%T)" >> $L
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -8 >> $L
for op in latent_moe_gemm gated_mla.prefill; do
  timeout 100 $K tune --op $op --preset k3 --budget 80s --max-candidates 6 --min-candidates 3 --results $W/results >> $OUT/tune.txt 2>&1
  echo "tune $op rc=$? $(date -u +%T)" >> $L; pack
done
op latent_moe_gemm 100 60
op gated_mla.prefill 60 60
op mxfp4_matmul 40 40 --preset "MXFP4 prefill 28 experts mean1024 N6144 K3584"
for f in latent_moe_gemm gated_mla.prefill; do
  [ "$(left)" -lt 25 ] && break
  timeout 20 $K fuzz --backend cuda --op $f --time 3s >> $OUT/fuzz.txt 2>&1; echo "fuzz $f rc=$? $(date -u +%T)" >> $L
done
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
grep -E "^(latent|gated)" $OUT/tune.txt | cut -c1-160
grep -h "^| " $W/b/*/*/*.md 2>/dev/null | grep -v "^| ---\|^| preset" | cut -d'|' -f2-7
