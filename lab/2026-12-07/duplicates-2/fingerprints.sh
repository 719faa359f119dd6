#!/bin/bash
# The kda fingerprints of duplicates-2.md (the state pass changed): sampled every point of the presets and of three varlen/GVA problems.
# usage: fingerprints.sh BIN TAG (mkdir -p /tmp/i44j-fp first), then cmp the files of the two tags
B=$1; T=$2; D=/tmp/i44j-fp
$B fingerprint --op kda --every-point --sample 3000 > $D/$T-kda.txt 2>$D/$T-kda.err
$B fingerprint --op kda --every-point --sample 3000 --dims "N=4,L0=17,L1=0,L2=64,L3=45,H=1,HV=2,K=64,V=64,safe=1,h0=1;N=4,L0=17,L1=0,L2=64,L3=45,H=1,HV=2,K=128,V=128,safe=0,h0=1;N=3,L0=70,L1=0,L2=33,H=1,HV=2,K=128,V=128,safe=1" > $D/$T-kda-dims.txt 2>$D/$T-kda-dims.err
echo done > $D/$T.done
