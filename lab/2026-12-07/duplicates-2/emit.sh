#!/bin/bash
# The state-pass kernels outside the sampled knob space (USTATE=1, SGRID=seqs, SLOAD=cp|tma forced), IR and CUDA.
# usage: emit.sh BIN TAG; then diff -r /tmp/i44j-emit/before /tmp/i44j-emit/after
B=$1; D=/tmp/i44j-emit/$2; rm -rf $D; mkdir -p $D
dims=("N=4,L0=17,L1=0,L2=64,L3=45,H=1,HV=2,K=64,V=64,safe=1,h0=1" "N=4,L0=17,L1=0,L2=64,L3=45,H=1,HV=2,K=128,V=128,safe=0,h0=1" "N=3,L0=70,L1=0,L2=33,H=1,HV=2,K=128,V=128,safe=1" "B=1,T=256,H=2,K=32,V=32,safe=1,h0=1")
knobs=()
for us in 0 1; do for sg in vb seqs; do for st in 1 2 3; do for sy in 2 4; do for c in 32 64; do for bv in 16 32 64; do
  knobs+=("USTATE=$us,SGRID=$sg,STAGES=$st,SYNC=$sy,CHUNK=$c,BV=$bv,SLOAD=cp")
done; done; done; done; done; done
for st in 2 3; do for c in 32 64; do for bv in 16 32 64; do for ts in 1 4; do
  knobs+=("SLOAD=tma,STAGES=$st,SYNC=2,CHUNK=$c,BV=$bv,TSPLIT=$ts")
done; done; done; done
i=0
for d in "${dims[@]}"; do for k in "${knobs[@]}"; do
  for e in ir cuda; do $B emit --op kda --dims "$d" --knobs "$k" --emit $e > $D/$i.$e 2>&1; echo "rc=$?" >> $D/$i.$e; done
  echo "$i $d $k" >> $D/index.txt; i=$((i+1))
done; done
