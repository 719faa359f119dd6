#!/usr/bin/env python3
"""Tabulate the `ncu_rate` blocks of a device call (lab/plans/lib.sh; ncu --csv --print-units base):
per block its duration, SM clock, the problem's bytes over the duration, warp instructions per KB of weights,
issue-slot use, eligible and active warps per scheduler, L2 hit rate, and L2 / DRAM bytes against the problem's.

Usage: session28-rates.py NCU_RATE_TXT"""
import csv
import re
import sys

# The problems of the plans: the 28 x 4 decode presets, else `--dims` (G, per, N, K).
PRESET_28X4 = dict(G=28, per=4, N=6144, K=3584)


def problem(what):
    if what.startswith("preset=MXFP4 decode 28 experts x 4 tokens N6144 K3584"):
        return PRESET_28X4
    m = re.match(r"dims=(\S+)", what)
    if not m:
        return None
    kv = dict(p.split("=") for p in m.group(1).split(",") if "=" in p)
    return {k: int(kv[k]) for k in ("G", "per", "N", "K")}


def bytes_of(p):
    w = p["G"] * p["N"] * p["K"] / 2
    s = p["G"] * p["N"] * p["K"] / 32
    return w, w + s + p["G"] * p["per"] * p["K"] * 2 + p["G"] * p["per"] * p["N"] * 2


def to_base(value, unit):
    """ncu's value in bytes, seconds or hertz where its unit names a scaled one (base units are kept)."""
    v = float(value.replace(",", ""))
    scale = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "nsecond": 1e-9, "usecond": 1e-6,
             "msecond": 1e-3, "second": 1, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "hz": 1, "khz": 1e3, "mhz": 1e6,
             "ghz": 1e9, "cycle/second": 1, "cycle/nsecond": 1e9, "cycle/usecond": 1e6}
    return v * scale.get(unit.strip().lower(), 1)


def blocks(path):
    out, cur = [], None
    for line in open(path, errors="replace"):
        if line.startswith("== ") and " cache=" in line:
            cur = {"head": line[3:].strip(), "m": {}}
            out.append(cur)
        elif line.startswith('"') and cur is not None:
            row = next(csv.reader([line]))
            if len(row) >= 3 and row[-3] != "Metric Name":
                cur["m"][row[-3]] = to_base(row[-1], row[-2]) if re.match(r"^[-\d.,]+$", row[-1]) else None
    return out


def main():
    hdr = ("block", "us", "GHz", "TB/s", "inst/KBw", "issue%", "elig", "activ", "L2hit%", "L2/prob", "DRAM/prob")
    print("%-64s %8s %5s %6s %8s %6s %5s %5s %6s %7s %9s" % hdr)
    for b in blocks(sys.argv[1]):
        m = b["m"]
        head = b["head"]
        what = re.search(r" ((?:preset|dims)=.*?) knobs=", head)
        p = problem(what.group(1)) if what else None
        dur = m.get("gpu__time_duration.sum")
        if not dur or p is None:
            print("%-64s (no metrics: see the ncu output above it)" % head[:64])
            continue
        wbytes, total = bytes_of(p)
        g = lambda k: m.get(k) or 0.0  # noqa: E731
        tag = re.sub(r"(preset|dims)=\S+( \S+)*? knobs=", "knobs=", head)
        print("%-64s %8.2f %5.2f %6.2f %8.1f %6.1f %5.2f %5.2f %6.1f %7.2f %9.2f" % (
            tag[:64], dur * 1e6, g("sm__cycles_elapsed.avg.per_second") / 1e9, total / dur / 1e12,
            g("smsp__inst_executed.sum") / (wbytes / 1024), g("smsp__issue_active.avg.pct_of_peak_sustained_active"),
            g("smsp__warps_eligible.avg.per_cycle_active"), g("smsp__warps_active.avg.per_cycle_active"),
            g("lts__t_sector_hit_rate.pct"), g("lts__t_bytes.sum") / total,
            (g("dram__bytes_read.sum") + g("dram__bytes_write.sum")) / total))


if __name__ == "__main__":
    main()
