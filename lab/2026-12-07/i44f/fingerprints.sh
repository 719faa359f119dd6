#!/bin/bash
# Fingerprints and emits of every operator with one k3k binary, for before/after comparisons (issue 44, 2026-12-07).
# Usage: fingerprints.sh BIN OUTDIR [OPS...]   (then: for f in OUTDIR_A/*; do cmp $f OUTDIR_B/${f##*/}; done)
set -u
B=$1; O=$2; shift 2
mkdir -p "$O"
OPS=${*:-"mx.quantize mx.dequantize gated_mla.decode gated_mla.gate gated_mla.prefill mxfp4_matmul latent_moe_gemm kda.decode hist_quantile.column hist_quantile.qb kda"}
$B list > "$O/list.txt"
for op in mx.quantize mx.dequantize mxfp4_matmul latent_moe_gemm gated_mla.decode kda.decode; do
  $B emit --op $op --emit cuda > "$O/emit-cuda-$op.txt" 2>&1
  $B emit --op $op --emit ir > "$O/emit-ir-$op.txt" 2>&1
done
for op in $OPS; do
  /usr/bin/time -f "$op %e s" -a -o "$O/times.txt" $B fingerprint --op $op --every-point --sample 20000 > "$O/fp-$op.txt" 2>&1
done
echo done > "$O/done"
