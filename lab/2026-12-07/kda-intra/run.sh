#!/usr/bin/env bash
# Issue 42, the KDA intra kernel (2026-12-07): k3k's intra-kernel knob variants against the defaults and FlashKDA on
# the six FlashKDA presets (bf16 raw gate, `gbf16`), one GPU run, under 7 minutes. Each kernel of a plan is also
# timed alone (K3K_BENCH_STEPS=1: intra and state ms per variant).
#   V0 defaults | V1 GSIG=fast | V2 FULLC=1 | V3 FULLC=1,GSIG=fast | V4 FULLC=1,GSIG=fast,L2R=unrolled
# plus, at B1 T8192 H96, the same problem with the f32 raw gate (what the presets ran before `gbf16`, defaults), and
# the old pre-computed-gate preset `B1 T8192 H96 K128 safe` at V0 and FULLC=1 (FULLC applies to every intra kernel).
#
# Carried (`carry: [".dev"]`): .dev/bin/k3k (release build of this branch, stripped), .dev/peers/ (FlashKDA's
# tarball and build script). Run from the repository root on the GPU machine:
#   bash lab/2026-12-07/kda-intra/run.sh
# Environment: BUDGET_S (default 400), FK=0 (no FlashKDA), VARIANTS (override the knob sets, `;`-separated).
# $OUT: summary.md (the table), log.txt, bench.tgz (reports, logs), flashkda-build.log.
set -uo pipefail
T0=$(date +%s); END=$(( T0 + ${BUDGET_S:-400} ))
left() { echo $(( END - $(date +%s) )); }
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
W=/tmp/kda-intra; rm -rf "$W"; mkdir -p "$W/bench" "$W/warm" "$W/logs"
# SEED=1: start from the committed reports (rows of presets not timed here are kept, marked with their run).
[ "${SEED:-0}" = 1 ] && cp -r results/bench/. "$W/bench/" && rm -rf "$W/bench/cpu"
BIN=$PWD/.dev/bin/k3k
FK_BUILD=/tmp/flashkda-build
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
export K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
L=$OUT/log.txt; : > "$L"
log() { echo "[$(date -u +%T) +$(( $(date +%s) - T0 ))s] $*" | tee -a "$L"; }
# step NAME MAX_S RESERVE_S CMD...: CMD in a time box of MAX_S, cut to what is left less RESERVE_S.
step() { local name=$1 max=$2 reserve=$3; shift 3
  local t=$(( $(left) - reserve )); [ "$t" -gt "$max" ] && t=$max
  if [ "$t" -lt 15 ]; then log "$name: skipped (${t}s left for it)"; return 1; fi
  log "$name: start (box ${t}s)"
  timeout -k 5 "$t" "$@" > "$W/logs/$name.txt" 2>&1; local rc=$?
  log "$name: rc=$rc$([ $rc = 124 ] && echo ' (time box hit)')"; return $rc; }
pack() { tar czf "$OUT/bench.tgz" -C "$W" bench logs $(cd "$W" && ls peers*.json 2>/dev/null) 2>/dev/null; true; }

S="K128 safe lbsigab gbf16 l2 bsig h0"
ALL="B1 T8192 H96 $S;B1 T65536 H32 $S;B1 T8192 H64 $S;B4 T4096 H64 $S;varlen 8x1024 H96 $S;varlen [1300,547,2048,963,271,3063] H96 $S"
V=${VARIANTS:-"TSPLIT=0;GSIG=fast;FULLC=1;FULLC=1,GSIG=fast;FULLC=1,GSIG=fast,L2R=unrolled"}
F32DIMS="B=1,T=8192,H=96,K=128,V=128,safe=1,gate=3,bias=1,l2norm=1,bsig=1,h0=1"

log "start $(git rev-parse --short HEAD 2>/dev/null) budget ${BUDGET_S:-400}s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> "$L" 2>&1
[ -x "$BIN" ] || log "MISSING $BIN"
"$BIN" doctor >> "$L" 2>&1 || log "doctor rc=$?"

# 1. FlashKDA builds in the background while k3k compiles every variant's kernels (one untimed repetition each, into
#    K3K_CACHE_DIR); the timed runs start after the build, so no compile runs beside a timing (a kernel the warm-up
#    missed compiles inside `bench`, before its timing, with no build beside it).
BUILD=
if [ "${FK:-1}" != 0 ] && [ -f .dev/peers/flashkda-1ce47ea-src.tgz ]; then
  log "flashkda build: start (background)"
  setsid bash -c 'MAX_JOBS=12 timeout 240 bash .dev/peers/build-flashkda.sh "$1" "$2" > "$3" 2>&1; echo $? > "$4"' \
    build "$PWD/.dev/peers/flashkda-1ce47ea-src.tgz" "$FK_BUILD" "$W/logs/flashkda-build.txt" "$W/fk.rc" &
  BUILD=$!
fi
# (The intra kernel is the same at every preset: P1 compiles every variant's; P2 and P4 the other state kernels.)
P1="B1 T8192 H96 $S"
step warm 100 250 "$BIN" bench --op kda --preset "$P1" --knobs "$V" --reps 1 --window-ms 0 --out "$W/warm"
step warm-extra 60 240 "$BIN" bench --op kda --preset "B1 T65536 H32 $S;B4 T4096 H64 $S;B1 T8192 H96 K128 safe" \
  --knobs "TSPLIT=0;FULLC=1" --reps 1 --window-ms 0 --out "$W/warm"
if [ -n "$BUILD" ]; then
  for _ in $(seq 150); do kill -0 $BUILD 2>/dev/null || break; sleep 1; done
  kill -0 $BUILD 2>/dev/null && { log "flashkda build: still running, stopped"; kill -- -$BUILD 2>/dev/null; }
  log "flashkda build: rc=$(cat "$W/fk.rc" 2>/dev/null || echo none)"
  { cat "$W/logs/flashkda-build.txt"; tail -30 "$FK_BUILD/build.log" 2>/dev/null; } > "$OUT/flashkda-build.log" 2>/dev/null
fi

# 2. The timed runs: every variant on the six presets; the f32 gate at B1 T8192 H96; the old plain preset.
K3K_BENCH_STEPS=1 step bench 200 60 "$BIN" bench --op kda --preset "$ALL" --knobs "$V" --out "$W/bench"
K3K_BENCH_STEPS=1 step bench-f32 30 45 "$BIN" bench --op kda --dims "$F32DIMS" --knobs "TSPLIT=0" --out "$W/bench-f32"
K3K_BENCH_STEPS=1 step bench-old 30 35 "$BIN" bench --op kda --preset "B1 T8192 H96 K128 safe" --knobs "TSPLIT=0;FULLC=1" \
  --out "$W/bench-old"
pack

# 3. FlashKDA on the report's problems (its bf16 gate as k3k reads it), merged into the report.
SLUG=$(cd "$W/bench" 2>/dev/null && ls -t */kda.json 2>/dev/null | head -1 | cut -d/ -f1)
if [ -n "$BUILD" ] && [ -n "$SLUG" ]; then
  PYTHONPATH=$FK_BUILD${PYTHONPATH:+:$PYTHONPATH} step peers 60 5 python3 scripts/peers.py "$W/bench/$SLUG" --ops kda \
    --ranks 0 --out "$W/peers-0.json"
  grep '^{' "$W/logs/peers.txt" | cut -c1-300 >> "$L"
  [ -f "$W/peers-0.json" ] && "$BIN" bench --merge-peers "$W/peers-0.json" --out "$W/bench" >> "$L" 2>&1
fi
pack

# 4. The table: per preset and variant, total / intra / state ms, and FlashKDA.
log "end"
python3 - "$W" "$ALL" > "$OUT/summary.md" 2>> "$L" <<'PY'
import glob, json, os, re, sys
w, presets = sys.argv[1], sys.argv[2].split(";")
def parse(log):
    """{(preset, knobs): {"ms": total, "intra": ms, "state": ms, "ok": bool}} from a bench log."""
    res, cur = {}, None
    if not os.path.exists(log):
        return res
    for line in open(log):
        m = re.match(r"^  (\S.*?)\s+([\d.]+) ms rel (\S+) (ok|CHECK FAILED) \[(.*)\]", line)
        if m:
            cur = (m.group(1), m.group(5))
            res[cur] = {"ms": float(m.group(2)), "rel": m.group(3), "ok": m.group(4) == "ok"}
            continue
        m = re.match(r"^    step (k3k_kda_(intra|state)\S*)\s+([\d.]+) ms", line)
        if m and cur:
            res[cur][m.group(2)] = res[cur].get(m.group(2), 0.0) + float(m.group(3))
            res[cur][m.group(2) + "_kernel"] = m.group(1)
    return res
short_k = lambda k: ",".join(x for x in k.split(",") if x.split("=")[0] in ("FULLC", "GSIG", "L2R")) or "defaults"
main = parse(os.path.join(w, "logs", "bench.txt"))
rep = max(glob.glob(os.path.join(w, "bench", "*", "kda.json")), key=os.path.getmtime, default=None)
rows = {r["preset"]: r for r in json.load(open(rep))["rows"]} if rep else {}
print("# kda intra variants vs FlashKDA (same run)\n")
print("| preset | variant | k3k ms | intra ms | state ms | FlashKDA ms | k3k vs FlashKDA | rel err |")
print("|---|---|---|---|---|---|---|---|")
f = lambda x: f"{x:.4f}" if isinstance(x, (int, float)) else "-"
for p in presets:
    r = rows.get(p, {})
    fk = r.get("peer_ms") if "FlashKDA" in (r.get("peer") or "") else None
    for (pp, kn), v in main.items():
        if pp != p:
            continue
        ratio = f"{fk / v['ms']:.2f}x" if fk else "-"
        print(f"| {p.replace(' K128 safe lbsigab gbf16 l2 bsig h0', '')} | {short_k(kn)} | {v['ms']:.4f} | {f(v.get('intra'))} "
              f"| {f(v.get('state'))} | {f(fk)} | {ratio} | {v['rel']}{'' if v['ok'] else ' FAILED'} |")
for name, title in (("bench-f32", "f32 raw gate (gbf16=0), B1 T8192 H96, defaults"),
                    ("bench-old", "old preset B1 T8192 H96 K128 safe (pre-computed gates)")):
    print(f"\n## {title}\n")
    for (pp, kn), v in parse(os.path.join(w, "logs", name + ".txt")).items():
        print(f"- {short_k(kn)}: {v['ms']:.4f} ms (intra {f(v.get('intra'))}, state {f(v.get('state'))}), rel {v['rel']}")
print("\n## intra kernels\n")
for (pp, kn), v in main.items():
    if pp == presets[0]:
        print(f"- {short_k(kn)}: {v.get('intra_kernel')}")
PY
cat "$OUT/summary.md"
pack
grep -E "warning|FAILED" "$W/logs/bench.txt" | head -20 >> "$L"
