#!/usr/bin/env bash
# Session 16, device call 1: the latent GEMM's staggered epilogues (EPI_TURN=on: the two consumer warpgroups store
# their tile's epilogue in turn, so after the first tile each one's epilogue runs under the other's products).
# `k3k check --backend cuda` of EPI_TURN=on (random cases over every epilogue), then a same-run A/B on the five
# presets: the defaults, EPI_TURN=on, EPI_TURN=on with RELEASE=warp, RELEASE=warp alone; torch._grouped_mm in the
# same call.
# Build first here: cargo build --release; strip -o .carry/k3k target/release/k3k
# Run: BUDGET_S=420 bash lab/plans/session16-call1.sh  (carry [".carry"], timeout_s 440)
W=/tmp/w16a; source lab/plans/lib.sh
for kn in "EPI_TURN=on" "EPI_TURN=on,RELEASE=warp" "EPI_TURN=on,PRODUCER=thread"; do
  timeout 60 $K check --backend cuda --op latent_moe_gemm --knobs "$kn" --cases 6 >> $OUT/check.txt 2>&1
  echo "check gemm $kn rc=$? $(date -u +%T)" >> $L
done
grep -iE "failed|error|mismatch" $OUT/check.txt | grep -v " 0 failed" | head -5 >> $L
D="AHEAD=auto,BK=64,BM=128,BN=256,LOAD=auto,MMA=wgmma,OVERLAP=on,PRODUCER=warp,RASTER=m,STAGES=4,WM=8,WN=1"
V="$D;$D,EPI_TURN=on;$D,EPI_TURN=on,RELEASE=warp;$D,RELEASE=warp"
op latent_moe_gemm 260 100 --preset "G28 mean1024 K3584 N6144;G28 mean1024 K3072 N3584;G56 mean64 K3584 N6144;G28 mean256 K3584 N6144;G28 mean256 K3584 N6144 situ_glu+p" --knobs "$V"
echo "end $(date -u +%T)" >> $L
cat $L | cut -c1-200
python3 - $W/b <<'PY'
import json, glob, sys
keys = ("EPI_TURN", "RELEASE")
for f in sorted(glob.glob(sys.argv[1] + "/*/*/*.json")):
    if "peers" in f: continue
    for r in json.load(open(f)).get("rows", []):
        vs = " | ".join("%s %.4f" % (",".join(f"{k}={v}" for k, v in kn.items() if k in keys) or "default", ms) for kn, ms in r.get("variants", []))
        print(f"{r['preset'][:30]:30} peer {r.get('peer_ms') or 0:.4f} | {vs}")
PY
