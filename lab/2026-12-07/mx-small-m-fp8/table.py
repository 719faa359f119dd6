"""The table of lab/2026-12-07/mx-small-m-fp8/run.sh: per M, the default (MMA=auto) and the best MMA=f8sync knob set
against cuBLAS bf16 and torch._scaled_mm FP8 rowwise (same run), the weight-byte floor; then every knob set's time.
Usage: python3 table.py <work folder holding the bench report folders and peers.json>"""
import glob, json, os, re, sys

w = sys.argv[1]


def reports():
    for f in sorted(glob.glob(os.path.join(w, "**", "mxfp4_matmul.json"), recursive=True)):
        try:
            yield json.load(open(f))
        except Exception as e:  # a report cut short: say so, keep going
            print(f"(unreadable {f}: {e})")


def knobs_of(k):
    if isinstance(k, dict):
        return {a: str(b) for a, b in k.items()}
    return dict(p.split("=", 1) for p in str(k).split(",") if "=" in p)


def key_of(preset):
    """(M, layout): natural-layout weights apart from the packed rows."""
    m = re.search(r"\bM=?(\d+)", preset)
    return (int(m.group(1)) if m else 0, "nat" if "packed=0" in preset else "")


AUTO = {"BK": "0", "BM": "0", "BN": "0", "SPLIT": "0", "STAGES": "0", "WA": "0", "WB": "0", "MMA": "auto", "FIN": "auto",
        "MINB": "0"}
rows = {}  # (M, layout) -> {"sets": {label: ms}, "cublas": ms, "fp8": ms, "bytes": b}
hbm = 3350.0
for rep in reports():
    hbm = (rep.get("ceilings") or {}).get("hbm_gbps") or hbm
    for r in rep.get("rows", []):
        m = key_of(r["preset"])
        e = rows.setdefault(m, {"sets": {}, "cublas": None, "fp8": None, "bytes": r.get("bytes")})
        if r.get("peer_ms"):
            e["cublas"] = r["peer_ms"]
        for p in r.get("more_peers") or []:
            if "scaled" in p.get("peer", ""):
                e["fp8"] = p.get("ms")
        for kn, ms in r.get("variants") or [[r.get("config"), r.get("k3k_ms")]]:
            kd = knobs_of(kn)
            label = ",".join(f"{a}={b}" for a, b in sorted(kd.items()) if a in AUTO and AUTO[a] != b) or "MMA=auto"
            if ms and (label not in e["sets"] or ms < e["sets"][label]):
                e["sets"][label] = ms
            e["sets"].setdefault(label, None)
print(f"HBM {hbm:.0f} GB/s; speedup = peer ms / k3k ms; floor = weight+activation bytes / HBM")
print(f"{'M':>4}{'':>3} {'default':>8} {'f8sync best':>11} {'cuBLAS':>8} {'x cuBLAS':>8} {'fp8 mm':>8} {'x fp8':>6} {'floor':>7} "
      f"{'best/fl':>7}  best f8sync set")
for m in sorted(rows):
    e = rows[m]
    d = e["sets"].get("MMA=auto")
    f8 = [(ms, s) for s, ms in e["sets"].items() if "f8sync" in s and ms]
    best, bset = min(f8) if f8 else (None, "-")
    fl = e["bytes"] / (hbm * 1e6) if e.get("bytes") else None
    f = lambda v, w=8: f"{v:{w}.4f}" if v else " " * (w - 1) + "-"
    x = lambda p, k, w=8: f"{p / k:{w}.2f}" if p and k else " " * (w - 1) + "-"
    print(f"{m[0]:>4}{m[1]:>3} {f(d)} {f(best, 11)} {f(e['cublas'])} {x(e['cublas'], best)} {f(e['fp8'])} {x(e['fp8'], best, 6)} "
          f"{f(fl, 7)} {x(best, fl, 7)}  {bset}")
print()
print("== every knob set (ms; '-': failed its check or did not run; * fastest of the row)")
for m in sorted(rows):
    sets = rows[m]["sets"]
    top = min((v for v in sets.values() if v), default=None)
    for s, ms in sorted(sets.items(), key=lambda kv: kv[1] or 1e9):
        print(f"  M{m[0]:<4}{m[1]:>3} {('%.4f' % ms) if ms else '     -':>8}{'*' if ms and ms == top else ' '} {s}")
