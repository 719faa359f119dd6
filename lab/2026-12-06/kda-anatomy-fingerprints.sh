#!/bin/bash
# usage: run2.sh BIN TAG  (issue 44 kda anatomy, 2026-12-06)
B=$1; T=$2; D=${D:-/tmp/fp-i44d}
$B list > $D/$T-list.txt 2>>$D/$T.log
$B list --op kda > $D/$T-list-kda.txt 2>>$D/$T.log
$B emit --op kda --emit cuda > $D/$T-emit-kda.cu 2>>$D/$T.log
$B emit --op kda --emit ir > $D/$T-emit-kda.ir 2>>$D/$T.log
$B emit --op kda.decode --emit cuda > $D/$T-emit-decode.cu 2>>$D/$T.log
$B fingerprint --op kda.decode --every-point > $D/$T-decode.txt 2>>$D/$T.log
$B fingerprint --op kda.decode --every-point --dims "N=4,H=2,K=128,gate=1,bias=1,l2norm=1,bsig=1;N=4,H=2,K=64,gate=2,bias=1;N=4,H=2,K=128,gate=2;N=4,T=2,H=2,HV=4,K=32,V=64,gate=1" > $D/$T-decode-dims.txt 2>>$D/$T.log
echo stage1 >> $D/$T.log
$B fingerprint --op kda --every-point --sample 2000 --dims "B=1,T=256,H=2,K=128,safe=1,gate=1,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,K=128,safe=1,gate=1;B=1,T=256,H=2,K=128,safe=0,gate=2,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,HV=4,K=64,V=64,safe=0,gate=2;N=2,L0=100,L1=60,H=2,K=128,safe=1,gate=1,bias=1,l2norm=1,bsig=1,h0=1;B=1,T=256,H=2,K=128,safe=0,gate=1,bias=1;B=1,T=256,H=2,K=128,safe=1,gate=3,bias=1,l2norm=1,bsig=1,h0=1" > $D/$T-kda-dims.txt 2>>$D/$T.log
echo stage2 >> $D/$T.log
$B fingerprint --op kda --every-point --sample 20000 > $D/$T-kda.txt 2>>$D/$T.log
echo done >> $D/$T.log
