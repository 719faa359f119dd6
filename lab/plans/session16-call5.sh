#!/usr/bin/env bash
# Session 16, device call 5: the latent GEMM's bulk-store epilogue (STORE=tma: full tiles leave through two 128x64
# shared staging buffers and TMA stores that drain under the next tile's products). `k3k check --backend cuda`
# (random cases, defaults with STORE=tma, pairs, GLU), a GPU fuzz with STORE=tma, then a same-run A/B on the five
# presets against the defaults, torch._grouped_mm in the same call.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=420 bash lab/plans/session16-call5.sh  (carry [".carry"], timeout_s 440)
W=/tmp/w16e; source lab/plans/lib.sh
for kn in "STORE=tma" "STORE=tma,CLUSTER=2,CLUSTER_ALONG=m" "STORE=tma,BM=64,WM=4,BN=128"; do
  timeout 60 $K check --backend cuda --op latent_moe_gemm --knobs "$kn" --cases 6 >> $OUT/check.txt 2>&1
  echo "check gemm $kn rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
timeout 70 $K fuzz --backend cuda --op latent_moe_gemm --knobs "STORE=tma" --time 40s > $OUT/fuzz.txt 2>&1; echo "fuzz gemm rc=$? $(date -u +%T)" >> $L
tail -2 $OUT/fuzz.txt >> $L
D="AHEAD=auto,BK=64,BM=128,BN=256,LOAD=auto,MMA=wgmma,OVERLAP=on,PRODUCER=warp,RASTER=m,STAGES=4,WM=8,WN=1"
V="$D;$D,STORE=tma;$D,STORE=tma,CLUSTER=2,CLUSTER_ALONG=m"
op latent_moe_gemm 240 100 --preset "G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144;G28 mean256 K3584 N6144;G28 mean256 K3584 N6144 situ_glu+p" --knobs "$V"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
keys = ("STORE", "CLUSTER")
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in keys) or "default", ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:30]:30} peer {r.get('peer_ms') or 0:.4f} err {r.get('max_rel_err') or 0:.1e} | {vs}")
PY
