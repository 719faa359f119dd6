#!/usr/bin/env python3
"""Where a launch loses DRAM time, from a `session29-pm-raw.py` dump whose first printed column is
`dramc__read_throughput` and which includes `sm__cycles_active.avg` (session 29).

Each 1.5 us sample below the plateau (98% of peak, the read's) loses (1 - pct / 98) x its length. The samples are
split into: start (to the first sample at 95% or more), tail (after the last sample at 90% or more),
dips (samples under 80% in between) and steady (the rest in between).
Usage: session29-pm-loss.py DUMP [DUMP ...]
"""
import sys

PLATEAU = 98.0


def rows(path):
    cols, out = [], []
    for line in open(path):
        p = line.split()
        if line.startswith("  c") and "=" in line:
            cols.append(line.split("=", 1)[1].strip())
        elif p and p[0].isdigit() and len(p) == len(cols) + 2:
            out.append([float(x) for x in p])
    return cols, out


def main():
    for path in sys.argv[1:]:
        cols, r = rows(path)
        dram = 2 + next(i for i, c in enumerate(cols) if "dramc__read_throughput" in c)
        act = 2 + next(i for i, c in enumerate(cols) if "sm__cycles_active.avg" in c)
        on = [i for i, x in enumerate(r) if x[act] > 0]
        a, b = on[0], on[-1]
        dt = r[a + 1][1] - r[a][1]
        v = [x[dram] for x in r]
        start = next(i for i in range(a, b + 1) if v[i] >= 95)
        tail = max(i for i in range(start, b + 1) if v[i] >= 90) + 1
        seg = {"start": range(a, start), "tail": range(tail, b + 1)}
        mid = range(start, tail)
        seg["dips"] = [i for i in mid if v[i] < 80]
        seg["steady"] = [i for i in mid if v[i] >= 80]
        lost = {k: sum((1 - v[i] / PLATEAU) * dt for i in s) for k, s in seg.items()}
        print(f"{path}: {b - a + 1} samples with SMs active ({(b - a + 1) * dt:.1f} us), lost to DRAM "
              f"{sum(lost.values()):.1f} us: " + ", ".join(f"{k} {x:.1f} us ({len(seg[k])} samples)"
                                                         for k, x in lost.items()))


if __name__ == "__main__":
    main()
