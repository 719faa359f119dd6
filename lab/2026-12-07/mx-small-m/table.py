"""The table of lab/2026-12-07/mx-small-m/run.sh: per M, k3k's default against cuBLAS bf16 and torch._scaled_mm
FP8 rowwise (same run), the floors, and every candidate knob set's time (from the bench reports' `variants`).
Usage: python3 table.py <work folder with sweep/ and cand/>"""
import glob, json, os, re, sys

w = sys.argv[1]


def reports(folder):
    for f in sorted(glob.glob(os.path.join(folder, "**", "mxfp4_matmul.json"), recursive=True)):
        try:
            yield json.load(open(f))
        except Exception as e:  # a report cut short: say so, keep going
            print(f"(unreadable {f}: {e})")


def knobs_of(k):
    if isinstance(k, dict):
        return {a: str(b) for a, b in k.items()}
    return dict(p.split("=", 1) for p in str(k).split(",") if "=" in p)


def mdims(preset):
    g = re.search(r"\bG=(\d+),per=(\d+)", preset)
    if g:
        return f"G{g.group(1)}x{g.group(2)}"
    m = re.search(r"\bM=(\d+)", preset)
    return f"M{m.group(1)}" if m else preset


hbm = None
try:
    c = json.load(open(os.path.join(w, "sweep", "peers.json"))).get("ceilings") or {}
    hbm = c.get("hbm_gbps")
except Exception:
    pass
print("== defaults of i45c vs peers (same run); floor = max(flops/bf16 rate, bytes/HBM), bytes floor = bytes/HBM")
print("(speedup = peer ms / k3k ms; k/fl = k3k ms / floor)")
print(f"{'M':>6} {'k3k ms':>8} {'cuBLAS':>8} {'speedup':>7} {'fp8 mm':>8} {'speedup':>7} {'floor':>7} {'k/fl':>6} {'bytes fl':>8} {'k/bfl':>6}  config")
for rep in reports(os.path.join(w, "sweep")):
    for r in rep.get("rows", []):
        cb = r.get("peer_ms")
        sm = next((p.get("ms") for p in r.get("more_peers", []) if "scaled" in p.get("peer", "")), None)
        k = r["k3k_ms"]
        bfl = r["bytes"] / ((hbm or rep.get("ceilings", {}).get("hbm_gbps") or 3350.0) * 1e6)
        kk = knobs_of(r.get("kernel_knobs") or r.get("config") or {})
        cfg = ",".join(f"{a}={kk[a]}" for a in ["PATH", "MMA", "BM", "BN", "BK", "SPLIT", "STAGES", "XDQ"] if a in kk)
        f = lambda v: f"{v:8.4f}" if v else "       -"
        x = lambda v: f"{v / k:7.2f}" if v else "      -"
        print(f"{mdims(r['preset']):>6} {k:8.4f} {f(cb)} {x(cb)} {f(sm)} {x(sm)} {r['floor_ms']:7.4f} "
              f"{k / r['floor_ms']:6.2f} {bfl:8.4f} {k / bfl:6.2f}  {cfg}")
print()
print("== candidates (ms of each knob set; '-' failed its check or did not run; * fastest)")
for rep in reports(os.path.join(w, "cand")):
    for r in rep.get("rows", []):
        vs = r.get("variants") or []
        base = None
        for kn, _ in vs:
            kd = knobs_of(kn)
            if kd.get("XDQ") == "auto" and base is None:
                base = kd
        base = base or {}
        best = min((ms for _, ms in vs if ms), default=None)
        for kn, ms in vs:
            kd = knobs_of(kn)
            diff = ",".join(f"{a}={b}" for a, b in kd.items() if base.get(a) != b) or "default (XDQ=auto)"
            if kd.get("XDQ") == "tile" and "XDQ" not in diff:
                diff += ",XDQ=tile"
            mark = "*" if ms and ms == best else " "
            print(f"{mdims(r['preset']):>8} {('%.4f' % ms) if ms else '     -':>8}{mark} {diff}")
