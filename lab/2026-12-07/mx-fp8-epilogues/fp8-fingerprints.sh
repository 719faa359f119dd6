#!/bin/bash
# usage: fp8fp.sh BIN OUT — md5 of the IR and CUDA of the FP8 paths' existing kernels (plain epilogue, natural / packed for f8sync)
B=$1; O=$2; : > $O
D="M=4096,N=6144,K=3584,act=1;M=333,N=520,K=1056,act=1;G=28,mean=1024,N=6144,K=3584,act=1;G=6,mean=40,N=72,K=352,act=1"
for d in $(echo $D | tr ';' ' '); do
 for kn in "MMA=fp8" "MMA=fp8,F8V=2" "MMA=fp8,F8V=2,BM=64" "MMA=fp8,F8V=3" "MMA=fp8,F8V=4" "MMA=fp8,F8V=4,CPS=1" "MMA=fp8,F8V=4,BN=192" "MMA=fp8,F8V=5" "MMA=fp8,F8V=5,CPS=1,BN=32,BM=64,STAGES=3" "MMA=fp8,F8V=6" "MMA=fp8,F8V=6,CPS=1" "MMA=fp8,F8V=6,CPS=1,TURN=ffma" "MMA=fp8,F8V=6,BN=64,STAGES=4"; do
  for e in ir cuda; do
   echo "$d $kn $e $($B emit --op mxfp4_matmul --dims $d --knobs $kn --emit $e 2>&1 | md5sum | cut -c1-16)" >> $O
  done
 done
done
for d in "M=64,N=6144,K=3584,act=1" "M=64,N=6144,K=3584,act=1,packed=1" "M=17,N=520,K=1056,act=1,packed=1" "M=200,N=256,K=512,act=1"; do
 for kn in "MMA=f8sync" "MMA=f8sync,SPLIT=2" "MMA=f8sync,BM=64,FIN=kernel,SPLIT=2"; do
  for e in ir cuda; do
   echo "$d $kn $e $($B emit --op mxfp4_matmul --dims $d --knobs $kn --emit $e 2>&1 | md5sum | cut -c1-16)" >> $O
  done
 done
done
