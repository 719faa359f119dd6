#!/bin/bash
# The fingerprint comparison of lab/2026-12-06/kda-flashkda.md: every knob point of kda's five old presets and of
# kda.decode's, 20000 sampled points of six in-kernel gate problems (gate 1 and 2) and every point of four decode ones.
# Run with the binary before the change and after it; `cmp` the files of the same name.
# usage: run.sh BIN TAG
B=$1; T=$2; D=/tmp/fp
for p in "B1 T8192 H96 K128 safe" "B1 T65536 H32 K128 safe" "B1 T16384 H32 K128 safe" "B1 T16384 H32 K128 exact" "B4 T4096 H64 K128 safe"; do
  f=$D/$T-kda-$(echo $p | tr ' ' '_').txt
  [ -s $f ] || $B fingerprint --op kda --preset "$p" --every-point > $f 2>>$D/$T.log
done
$B fingerprint --op kda.decode --every-point > $D/$T-decode.txt 2>>$D/$T.log
$B fingerprint --op kda --every-point --sample 20000 --dims "B=1,T=256,H=2,K=128,safe=1,gate=1,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,K=128,safe=1,gate=1;B=1,T=256,H=2,K=128,safe=0,gate=2,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,HV=4,K=64,V=64,safe=0,gate=2;N=2,L0=100,L1=60,H=2,K=128,safe=1,gate=1,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,K=128,safe=0,gate=1,bias=1" > $D/$T-kda-dims.txt 2>>$D/$T.log
$B fingerprint --op kda.decode --every-point --dims "N=4,H=2,K=128,gate=1,bias=1,l2norm=1,bsig=1;N=4,H=2,K=64,gate=2,bias=1;N=4,H=2,K=128,gate=2;N=4,T=2,H=2,HV=4,K=32,V=64,gate=1" > $D/$T-decode-dims.txt 2>>$D/$T.log
echo done >> $D/$T.log
