#!/bin/bash
# The fingerprint comparison of lab/2026-12-07/typed-knobs-mla.md: every knob point of gated_mla.prefill and
# gated_mla.gate on their presets, every point of gated_mla.decode (1.3 million) on its presets, the same
# on varlen prefill and paged decode problems (`--dims`; SQ=2 runs the split kernel and the combine), and `k3k list`.
# Run with the binary before the change and after it; `cmp` the files of the same name.
# usage: fingerprints.sh BIN TAG   (files in /tmp/fp-mla/TAG-*)
B=$1; T=$2; D=/tmp/fp-mla; mkdir -p $D
export K3K_NVRTC=${K3K_NVRTC:-$PWD/.tools/cuda/nvidia/cu13/lib/libnvrtc.so.13}
export K3K_PTXAS=${K3K_PTXAS:-$PWD/.tools/cuda/nvidia/cu13/bin/ptxas}
: > $D/$T.log
for op in gated_mla.prefill gated_mla.decode gated_mla.gate; do
  $B list --op $op > $D/$T-list-$op.txt 2>>$D/$T.log
  $B list --op $op --json > $D/$T-list-$op.json 2>>$D/$T.log
done
$B fingerprint --op gated_mla.prefill --every-point > $D/$T-prefill.txt 2>>$D/$T.log
$B fingerprint --op gated_mla.gate --every-point > $D/$T-gate.txt 2>>$D/$T.log
$B fingerprint --op gated_mla.gate --every-point --dims "T=5,H=3,gate=0;T=77,H=2,gate=1" > $D/$T-gate-dims.txt 2>>$D/$T.log
$B fingerprint --op gated_mla.decode --every-point > $D/$T-decode.txt 2>>$D/$T.log
$B fingerprint --op gated_mla.prefill --every-point --dims "N=3,q0=100,k0=100,q1=1,k1=300,q2=64,k2=64,H=2,causal=1,gate=1;N=2,q0=17,k0=17,q1=200,k1=250,H=3,causal=0,gate=0" > $D/$T-prefill-dims.txt 2>>$D/$T.log
$B fingerprint --op gated_mla.decode --every-point --dims "B=2,SQ=2,H=12,l0=100,l1=300;B=3,SQ=1,H=16,l0=0,l1=65,l2=4000" > $D/$T-decode-dims.txt 2>>$D/$T.log
# The default records (LOAD=auto and PRODUCER=warp are no points of the prefill space; the decode plan maps its
# defaults to the knobs of the row count).
$B fingerprint --op gated_mla > $D/$T-defaults.txt 2>>$D/$T.log
$B fingerprint --op gated_mla.prefill --dims "N=3,q0=100,k0=100,q1=1,k1=300,q2=64,k2=64,H=2,causal=1,gate=1;T=300,S=500,H=5,causal=1,gate=0" > $D/$T-defaults-prefill-dims.txt 2>>$D/$T.log
$B fingerprint --op gated_mla.decode --dims "B=2,SQ=2,H=12,l0=100,l1=300;B=3,SQ=1,H=96,l0=0,l1=65,l2=4000;B=1,SQ=4,H=16,l0=7" > $D/$T-defaults-decode-dims.txt 2>>$D/$T.log
echo done >> $D/$T.log
