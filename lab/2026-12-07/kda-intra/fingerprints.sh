#!/bin/bash
# Fingerprints before/after the bf16 raw-gate input (issue 42, 2026-12-07): 20000 sampled knob points of each of
# kda's eleven presets as they were (the six FlashKDA ones by their dims, f32 gate), every point of kda.decode's
# presets, and the --dims problems of lab/2026-12-06/kda-fingerprints.sh. Run with the binary before the change
# and after it; `cmp` the files of the same name.
# usage: fingerprints.sh BIN TAG [OUTDIR]
B=$1; T=$2; D=${3:-/tmp/fp}; mkdir -p $D
for p in "B1 T8192 H96 K128 safe" "B1 T65536 H32 K128 safe" "B1 T16384 H32 K128 safe" "B1 T16384 H32 K128 exact" "B4 T4096 H64 K128 safe"; do
  $B fingerprint --op kda --preset "$p" --every-point --sample 20000 > $D/$T-kda-$(echo $p | tr ' ' '_').txt 2>>$D/$T.log
done
O="K=128,V=128,safe=1,gate=3,bias=1,l2norm=1,bsig=1,h0=1"
$B fingerprint --op kda --every-point --sample 20000 --dims "B=1,T=8192,H=96,$O;B=1,T=65536,H=32,$O;B=1,T=8192,H=64,$O;B=4,T=4096,H=64,$O;N=8,L0=1024,L1=1024,L2=1024,L3=1024,L4=1024,L5=1024,L6=1024,L7=1024,H=96,$O;N=6,L0=1300,L1=547,L2=2048,L3=963,L4=271,L5=3063,H=96,$O" > $D/$T-kda-flashkda-f32.txt 2>>$D/$T.log
$B fingerprint --op kda.decode --every-point > $D/$T-decode.txt 2>>$D/$T.log
$B fingerprint --op kda --every-point --sample 20000 --dims "B=1,T=256,H=2,K=128,safe=1,gate=1,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,K=128,safe=1,gate=1;B=1,T=256,H=2,K=128,safe=0,gate=2,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,HV=4,K=64,V=64,safe=0,gate=2;N=2,L0=100,L1=60,H=2,K=128,safe=1,gate=1,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,K=128,safe=0,gate=1,bias=1" > $D/$T-kda-dims.txt 2>>$D/$T.log
$B fingerprint --op kda.decode --every-point --dims "N=4,H=2,K=128,gate=1,bias=1,l2norm=1,bsig=1;N=4,H=2,K=64,gate=2,bias=1;N=4,H=2,K=128,gate=2;N=4,T=2,H=2,HV=4,K=32,V=64,gate=1" > $D/$T-decode-dims.txt 2>>$D/$T.log
echo done >> $D/$T.log
