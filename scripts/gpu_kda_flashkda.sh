#!/usr/bin/env bash
# Issue 42's measurement in one device call (under 9 minutes): k3k's KDA against FlashKDA (built here from the
# carried sources) and FLA pinned to its Triton path, on the six FlashKDA presets, in one run; ncu of k3k's two KDA
# kernels and of FlashKDA's kernels at B4 T4096 H64 and varlen 8 x 1024; and, with the time left, the state pass's
# block order and width (SGRID, BV) on the multi-sequence presets. Each step has its own time box, logs its exit
# code and its end time, and a failed step does not stop the others. Prints a short table last.
#
# Carried (ignored paths, `carry: [".dev"]`):
#   .dev/bin/k3k                          release binary of this checkout (cargo build --release; strip)
#   .dev/peers/flashkda-1ce47ea-src.tgz   FlashKDA sources (../shared/peers/)
#   .dev/peers/build-flashkda.sh          its build script (../shared/peers/)
#   .dev/whl/*.whl (or .whl/*.whl)         fla-core==0.6.0 and flash-linear-attention==0.6.0
#   .dev/triton-cache.tgz (optional)      a Triton cache from an earlier call (SAVE_TRITON=1 writes one to $OUT)
# Usage, on the GPU machine from the repository root: bash scripts/gpu_kda_flashkda.sh
# Environment: BUDGET_S (default 530: the whole call's seconds), SWEEP=0 (no knob sweep), NCU=0 (no ncu),
#   SEED=1 (start from the committed reports), FLA=0 (no FLA rows), OLD=1 (the five earlier presets too), PROFILE=1 (ncu full set with source counters of
#   the intra kernel), SAVE_TRITON=1, WORK (work folder, default /tmp/kda-fk).
# $OUT (at most 8 files come back): log.txt, summary.md, bench.tgz (reports, peers files, logs, sweep), ncu.tgz,
#   flashkda-build.log, clocks.csv, triton-cache.tgz (SAVE_TRITON=1).
set -uo pipefail
T0=$(date +%s); END=$(( T0 + ${BUDGET_S:-530} ))
left() { echo $(( END - $(date +%s) )); }
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
W=${WORK:-/tmp/kda-fk}; rm -rf "$W"; mkdir -p "$W/bench" "$W/ncu" "$W/logs" "$W/sweep" "$W/ncu-bench"
# SEED=1: the committed reports (results/bench/<gpu>/) go into the bench folder first, so the new report keeps the
# rows of presets this call does not time (marked as kept from their run) and can replace the committed one.
[ "${SEED:-0}" = 1 ] && cp -r results/bench/. "$W/bench/" && rm -rf "$W/bench/cpu"
BIN=${BIN:-.dev/bin/k3k}
FK_BUILD=$PWD/.dev/flashkda-build
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export K3K_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13 K3K_PTXAS=/usr/local/cuda/bin/ptxas
export K3K_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$W/triton
NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
L=$OUT/log.txt; : > "$L"
log() { echo "[$(date -u +%T) +$(( $(date +%s) - T0 ))s] $*" | tee -a "$L"; }
# step NAME MAX_S RESERVE_S CMD...: CMD under a time box of MAX_S, cut to what is left less RESERVE_S (seconds kept
# for the steps after it); skipped when under 15 s would be left to it. Output goes to $W/logs/NAME.txt.
step() { local name=$1 max=$2 reserve=$3; shift 3
  local t=$(( $(left) - reserve )); [ "$t" -gt "$max" ] && t=$max
  if [ "$t" -lt 15 ]; then log "$name: skipped (${t}s left for it)"; return 1; fi
  log "$name: start (box ${t}s)"
  timeout -k 5 "$t" "$@" > "$W/logs/$name.txt" 2>&1; local rc=$?
  log "$name: rc=$rc$([ $rc = 124 ] && echo ' (time box hit)')"; return $rc; }
pack() { tar czf "$OUT/bench.tgz" -C "$W" bench sweep logs $(cd "$W" && ls peers*.json 2>/dev/null) 2>/dev/null
  tar czf "$OUT/ncu.tgz" -C "$W" ncu 2>/dev/null; true; }

S="K128 safe lbsigab gbf16 l2 bsig h0"
P1="B1 T8192 H96 $S"; P2="B1 T65536 H32 $S"; P3="B1 T8192 H64 $S"; P4="B4 T4096 H64 $S"
P5="varlen 8x1024 H96 $S"; P6="varlen [1300,547,2048,963,271,3063] H96 $S"
ALL="$P1;$P2;$P3;$P4;$P5;$P6"

log "start $(git rev-parse --short HEAD 2>/dev/null) budget ${BUDGET_S:-530}s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> "$L" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv \
  -l 1 > "$OUT/clocks.csv" 2>/dev/null & SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
[ -x "$BIN" ] || log "MISSING $BIN: every k3k step will fail"
"$BIN" doctor >> "$L" 2>&1 || log "doctor rc=$?"

# FLA wheels and a carried Triton cache.
WHL=$(ls .dev/whl/*.whl 2>/dev/null || ls .whl/*.whl 2>/dev/null)
if [ -n "$WHL" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $WHL >> "$L" 2>&1 \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || log "FLA wheels did not install"
else log "no FLA wheels (.dev/whl or .whl): the FLA peer will fail"; fi
[ -f .dev/triton-cache.tgz ] && mkdir -p "$W/triton" && tar xzf .dev/triton-cache.tgz -C "$W/triton" \
  && log "Triton cache unpacked"
export PYTHONPATH=$FK_BUILD${PYTHONPATH:+:$PYTHONPATH}

# 1. FlashKDA, built in the background while ncu profiles k3k (ncu's figures do not depend on the CPU's load; the
#    benchmarks wait for the build, so no compile runs beside a timing).
if [ -f .dev/peers/flashkda-1ce47ea-src.tgz ] && [ -f .dev/peers/build-flashkda.sh ]; then
  log "flashkda build: start (background)"
  MAX_JOBS=${MAX_JOBS:-16} setsid bash -c 'timeout 300 bash .dev/peers/build-flashkda.sh "$1" "$2" > "$3" 2>&1; \
    echo $? > "$4"' build "$PWD/.dev/peers/flashkda-1ce47ea-src.tgz" "$FK_BUILD" "$W/logs/flashkda-build.txt" \
    "$W/flashkda-build.rc" &
  BUILD=$!
else log "no .dev/peers/{flashkda-1ce47ea-src.tgz,build-flashkda.sh}: no FlashKDA"; BUILD=; fi

# 2. ncu of k3k's intra and state kernels (the first launch of each: the run the check reads), default knobs.
NCU_SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats --metrics
  launch__grid_size,launch__registers_per_thread,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum)
ncu_k3k() { local tag=$1 preset=$2 knobs=${3:-TSPLIT=0} sel=${4:-regex:k3k_kda_} count=${5:-2} reserve=${6:-360}
  step "ncu-k3k-$tag" 75 "$reserve" "$NCU_BIN" --clock-control none --kernel-name "$sel" --launch-count "$count" \
    "${NCU_SECTIONS[@]}" "$BIN" bench --op kda --preset "$preset" --knobs "$knobs" --reps 1 --window-ms 0 \
    --out "$W/ncu-bench"
  cp "$W/logs/ncu-k3k-$tag.txt" "$W/ncu/k3k-$tag.txt" 2>/dev/null; pack; }
if [ "${NCU:-1}" != 0 ]; then
  ncu_k3k b4 "$P4"
  ncu_k3k varlen8 "$P5"
fi
# PROFILE=1: ncu's full set with source counters of the intra kernel at B1 T8192 H96 (line info on), its details
# and per-line source pages, and the generated CUDA C the lines refer to, as $OUT/intra-profile.tgz.
if [ "${PROFILE:-0}" = 1 ]; then
  mkdir -p "$W/profile"
  "$BIN" emit --op kda --preset "$P1" --emit cuda > "$W/profile/kernels.cu" 2>&1
  K3K_NVRTC_LINEINFO=1 step profile-intra 120 330 "$NCU_BIN" --set full --import-source yes --clock-control none \
    --kernel-name regex:k3k_kda_intra --launch-count 1 -o "$W/profile/intra" "$BIN" bench --op kda --preset "$P1" \
    --reps 1 --window-ms 0 --out "$W/ncu-bench"
  "$NCU_BIN" -i "$W/profile/intra.ncu-rep" --page details > "$W/profile/details.txt" 2>&1
  "$NCU_BIN" -i "$W/profile/intra.ncu-rep" --page source --csv --print-source cuda > "$W/profile/source-cuda.csv" 2>&1
  "$NCU_BIN" -i "$W/profile/intra.ncu-rep" --page source --csv --print-source sass > "$W/profile/source-sass.csv" 2>&1
  tar czf "$OUT/intra-profile.tgz" -C "$W" profile 2>/dev/null
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|L1/TEX Hit|Bank" "$W/profile/details.txt" | head -12 >> "$L"
fi

# The seconds each step leaves for the ones after it. Lean (no ncu, no FLA, no sweep, no profile): only the k3k rows
# and the FlashKDA peer follow the build, so a call of ~400 s holds the whole report.
RES_BUILD=340 RES_BENCH=200 RES_PEERS=200
[ "${NCU:-1}" = 0 ] && [ "${FLA:-1}" = 0 ] && [ "${SWEEP:-1}" = 0 ] && [ "${PROFILE:-0}" != 1 ] \
  && RES_BUILD=150 RES_BENCH=70 RES_PEERS=10
if [ -n "$BUILD" ]; then
  t=$(( $(left) - RES_BUILD )); [ $t -lt 10 ] && t=10
  for _ in $(seq $t); do kill -0 $BUILD 2>/dev/null || break; sleep 1; done
  if kill -0 $BUILD 2>/dev/null; then log "flashkda build: still running, stopped"; kill -- -$BUILD 2>/dev/null; fi
  log "flashkda build: rc=$(cat "$W/flashkda-build.rc" 2>/dev/null || echo none)"
  { cat "$W/logs/flashkda-build.txt"; tail -40 "$FK_BUILD/build.log" 2>/dev/null; } > "$OUT/flashkda-build.log"
fi

# 3. k3k on the six presets (defaults, or a tuned record of this GPU where results/ has one: none for kda at this
#    codegen version); K3K_BENCH_STEPS=1 also times each kernel of the plan alone (logged, not in the report).
# OLD=1: the five earlier presets too (pre-computed gates), in the same `k3k bench` run: a second run into the same
# report would mark the first one's rows as kept from an earlier run, and the peers skip those.
OLDP="B1 T8192 H96 K128 safe;B1 T65536 H32 K128 safe;B1 T16384 H32 K128 safe;B1 T16384 H32 K128 exact;B4 T4096 H64 K128 safe"
PRESETS=$ALL; [ "${OLD:-0}" = 1 ] && PRESETS="$ALL;$OLDP"
K3K_BENCH_STEPS=1 step bench 290 "$RES_BENCH" "$BIN" bench --op kda --preset "$PRESETS" --out "$W/bench"
pack
SLUG=$(cd "$W/bench" 2>/dev/null && ls -t */kda.json 2>/dev/null | head -1 | cut -d/ -f1)
REPORT=$W/bench/$SLUG/kda.json
[ -f "$REPORT" ] || log "no kda report: the peers have no problems to run"

# 4. Peers, rank 0 (FlashKDA) now; FLA (rank 1) after FlashKDA's ncu.
if [ -f "$REPORT" ]; then
  step peers-flashkda 90 "$RES_PEERS" python3 scripts/peers.py "$W/bench/$SLUG" --ops kda --ranks 0 --out "$W/peers-0.json"
  grep '^{' "$W/logs/peers-flashkda.txt" | cut -c1-300 >> "$L"
  [ -f "$W/peers-0.json" ] && "$BIN" bench --merge-peers "$W/peers-0.json" --out "$W/bench" >> "$L" 2>&1
  pack
fi

# 5. ncu of FlashKDA's kernels (prepare, recurrence, and the tile prefix of varlen), one call each.
if [ "${NCU:-1}" != 0 ] && [ -f "$REPORT" ]; then
  for tp in "b4|$P4" "varlen8|$P5"; do
    tag=${tp%%|*}; p=${tp#*|}
    step "ncu-flashkda-$tag" 45 180 "$NCU_BIN" --clock-control none --kernel-name regex:flash_kda --launch-count 3 \
      "${NCU_SECTIONS[@]}" python3 scripts/peer_ops/kda.py flashkda-once "$REPORT" "$p"
    cp "$W/logs/ncu-flashkda-$tag.txt" "$W/ncu/flashkda-$tag.txt" 2>/dev/null
  done
  pack
fi

# 6. FLA pinned to Triton (rank 1: compiles and autotunes its Triton kernels, the longest step); then both peer
#    files merged as one run's.
if [ -f "$REPORT" ] && [ "${FLA:-1}" != 0 ]; then
  step peers-fla 260 25 python3 scripts/peers.py "$W/bench/$SLUG" --ops kda --ranks 1 --out "$W/peers-1.json"
  grep '^{' "$W/logs/peers-fla.txt" | cut -c1-300 >> "$L"
  python3 - "$W" <<'PY' >> "$L" 2>&1
import json, os, sys
w = sys.argv[1]
rows, ceilings, gpu = [], None, None
for f in ("peers-0.json", "peers-1.json"):
    p = os.path.join(w, f)
    if os.path.exists(p):
        d = json.load(open(p))
        rows += d["rows"]
        ceilings = d.get("ceilings") or ceilings
        gpu = d.get("gpu") or gpu
# The GPU the peers ran on: without it `--merge-peers` would fill these timings into every report of the folder
# with the same presets, other GPUs' included (SEED=1 puts them all there).
json.dump({"gpu": gpu, "ceilings": ceilings, "rows": rows}, open(os.path.join(w, "peers.json"), "w"), indent=1)
print("peers.json:", len(rows), "rows")
PY
  "$BIN" bench --merge-peers "$W/peers.json" --out "$W/bench" >> "$L" 2>&1 || log "merge rc=$?"
  pack
fi
# 7. The state pass's block order and width on the multi-sequence presets (B1 H96 as the control): the defaults,
#    SGRID=vb (a pair's value blocks consecutive), the same with 2 stages (3 blocks per SM at 153 registers instead
#    of 4 at 128 with 1 stage), BV=64 on 8 warps with 2 stages (128 registers: 2 blocks per SM; the automatic 3
#    stages take 154 registers, 1 block per SM) in both orders, BV=128 on 16 warps (one block per pair). Not merged
#    into the report; summary.md lists each set's time. Then ncu of the varlen state pass at SGRID=vb (DRAM bytes).
if [ "${SWEEP:-1}" != 0 ]; then
  step sweep 130 10 "$BIN" bench --op kda --preset "$P4;$P5;$P1" --window-ms 100 --out "$W/sweep" \
    --knobs "TSPLIT=0;SGRID=vb;STAGES=2,SGRID=vb;BV=64,W2=8,STAGES=2;BV=64,W2=8,STAGES=2,SGRID=vb;BV=128,W2=16"
  pack
  [ "${NCU:-1}" != 0 ] && ncu_k3k varlen8-state-vb "$P5" "SGRID=vb" regex:k3k_kda_state 1 3
fi

if [ "${SAVE_TRITON:-0}" = 1 ] && [ -d "$W/triton" ]; then
  tar czf "$OUT/triton-cache.tgz" -C "$W/triton" . 2>/dev/null
  sz=$(stat -c %s "$OUT/triton-cache.tgz" 2>/dev/null || echo 0)
  [ "$sz" -gt 16000000 ] && { log "Triton cache is $sz bytes (over 16 MB): not returned"; rm -f "$OUT/triton-cache.tgz"; }
fi

# 8. The table.
log "end"
python3 - "$W" "$ALL" "${SLUG:-}" > "$OUT/summary.md" 2>> "$L" <<'PY'
import glob, json, os, re, sys
w, presets, slug = sys.argv[1], sys.argv[2].split(";"), sys.argv[3]
# This run's report (the bench step's GPU folder), not the newest file: a merge may touch other GPUs' reports.
mine = os.path.join(w, "bench", slug, "kda.json")
rep = mine if slug and os.path.exists(mine) else None
rows = {r["preset"]: r for r in json.load(open(rep))["rows"]} if rep else {}
steps, cur = {}, None
for line in open(os.path.join(w, "logs", "bench.txt")) if os.path.exists(os.path.join(w, "logs", "bench.txt")) else []:
    m = re.match(r"^  (\S.*?)\s+([\d.]+) ms rel", line)
    if m and m.group(1) in presets:
        cur = m.group(1)
    m = re.match(r"^    step (k3k_kda_(intra|state)\S*)\s+([\d.]+) ms", line)
    if m and cur:
        st = steps.setdefault(cur, {})  # summed over a TSPLIT plan's parts
        st[m.group(2)] = st.get(m.group(2), 0.0) + float(m.group(3))
short = lambda p: p.replace(" K128 safe lbsigab gbf16 l2 bsig h0", "")
print("# kda vs FlashKDA and FLA (Triton), same run\n")
print("| preset | k3k ms | intra ms | state ms | FlashKDA ms | FLA ms | k3k vs FlashKDA | k3k vs FLA | rel err | FLA vs FlashKDA rel o |")
print("|---|---|---|---|---|---|---|---|---|---|")
for p in presets:
    r = rows.get(p)
    if not r:
        print(f"| {short(p)} | not run | | | | | | | | |"); continue
    fk = r.get("peer_ms") if "FlashKDA" in r.get("peer", "") else None
    fla = next((m for m in r.get("more_peers", []) if "FLA" in m["peer"]), {})
    f = lambda x: f"{x:.4f}" if isinstance(x, (int, float)) else "-"
    ratio = lambda x: f"{x / r['k3k_ms']:.2f}x" if isinstance(x, (int, float)) else "-"
    st = steps.get(p, {})
    agree = (fla.get("extra") or {}).get("vs_flashkda_rel_o")
    print(f"| {short(p)} | {r['k3k_ms']:.4f} | {f(st.get('intra'))} | {f(st.get('state'))} | {f(fk)} | {f(fla.get('ms'))} "
          f"| {ratio(fk)} | {ratio(fla.get('ms'))} | {r['max_rel_err']:.2e} | {f(agree) if agree is None else f'{agree:.2e}'} |")
sw = next(iter(glob.glob(os.path.join(w, "sweep", "*", "kda.json"))), None)
if sw:
    print("\n## State-pass order / width (ms per knob set; null: failed or not run)\n")
    for r in json.load(open(sw))["rows"]:
        cells = []
        for kn, ms in r.get("variants", []):
            tag = ",".join(f"{k}={v}" for k, v in kn.items() if k in ("SGRID", "BV", "W2", "STAGES") and v != 0) or "defaults"
            cells.append(f"{tag}: {ms:.4f}" if ms is not None else f"{tag}: null")
        print(f"- {short(r['preset'])}: " + "; ".join(cells))
print("\n## ncu (Duration, DRAM throughput and bytes read, SM throughput, grid, registers, occupancy)\n")
keys = ("Duration", "DRAM Throughput", "dram__bytes_read.sum", "Compute (SM) Throughput", "Grid Size", "Registers Per Thread",
        "Achieved Occupancy", "Theoretical Occupancy", "Block Limit Registers", "Block Limit Shared Mem", "lts__t_sector_hit_rate.pct")
for f in sorted(glob.glob(os.path.join(w, "ncu", "*.txt"))):
    print(f"### {os.path.basename(f)[:-4]}\n```")
    for line in open(f, errors="replace"):
        s = line.strip()
        if (s.startswith(("k3k_kda_", "_flash_kda", "void _flash_kda")) or "flash_kda" in s[:60]) and "(" in s:
            print(s[:150])
        elif any(s.startswith(k) for k in keys):
            print("  " + re.sub(r"\s{2,}", "  ", s)[:120])
    print("```")
PY
cat "$OUT/summary.md"
pack
echo; tail -40 "$L"
