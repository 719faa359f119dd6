#!/usr/bin/env bash
# Session 17, device call 7: the staged gemv ring's FAST form (every row of the tile valid, scale rows a multiple
# of 4 bytes: loop-carried source and slot addresses, no per-piece predicates; SASS of the 28 x 4 default: 613
# instructions per two quads against 845) on the GPU: `k3k check --backend cuda` (random cases, a many-tile shape
# on the FAST form, a partial tile with odd scale rows on the general form, GLU), then an interleaved A/B against
# the previous binary (.carry/k3k-old, calls 4-6) at 28 x 4, GLU and M16, then a GPU fuzz.
# Build first here: cp .carry/k3k .carry/k3k-old (the previous binary); cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=200 bash lab/plans/session17-call7.sh  (carry [".carry"], timeout_s 220)
W=/tmp/w17g; source lab/plans/lib.sh
C=$OUT/check.txt
ck() { timeout $1 $K check --backend cuda --op mxfp4_matmul "${@:2}" >> $C 2>&1; echo "check ${*:2} rc=$? $(date -u +%T)" | cut -c1-200 >> $L; }
ck 60 --cases 16
ck 30 --dims "G=9,per=4,N=6144,K=1024,packed=1" --cases 2
ck 30 --dims "G=9,per=4,N=6144,K=1024,packed=1,epilogue=1,p=1" --cases 2
ck 30 --dims "G=3,per=4,N=200,K=1056,packed=1" --knobs "PATH=gemv,STAGES=3,BN=32,WA=4" --cases 3
ck 30 --dims "G=3,per=3,N=256,K=1056,packed=0" --knobs "PATH=gemv,STAGES=3,BN=32,WA=4" --cases 3
ck 30 --dims "M=16,N=200,K=2048,packed=1" --cases 3
grep -iE "fail|error|mismatch" $C | grep -v " 0 fail" | head -5 >> $L
P28="MXFP4 decode 28 experts x 4 tokens N6144 K3584"
ab() { timeout 60 $1 bench --op mxfp4_matmul --preset "$2" --results /nonexistent --out $W/ab-$3 >> $OUT/ab.txt 2>&1
  echo "$3 $(grep -E '^MXFP4' $OUT/ab.txt | tail -1 | cut -c1-90)" >> $L; }
ab .carry/k3k-old "$P28" old1; ab $K "$P28" new1; ab $K "$P28" new2; ab .carry/k3k-old "$P28" old2
ab .carry/k3k-old "$P28 situ_glu+p" oldg; ab $K "$P28 situ_glu+p" newg
ab .carry/k3k-old "MXFP4 linear M16 N6144 K3584" oldm; ab $K "MXFP4 linear M16 N6144 K3584" newm
tar czf $OUT/ab.tgz -C $W $(cd $W && ls -d ab-*) 2>/dev/null
[ "$(left)" -gt 40 ] && { timeout $(( $(left) - 8 )) $K fuzz --backend cuda --op mxfp4_matmul --time $(( $(left) - 20 ))s > $OUT/fuzz.txt 2>&1; echo "fuzz rc=$? $(date -u +%T)" >> $L; tail -2 $OUT/fuzz.txt >> $L; }
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-220
