#!/usr/bin/env python3
"""Every PM-sampling series of an Nsight Compute report, read from the report's bytes without ncu's Python module
(session 29: no device was lent, and `ncu_report` ships only with Nsight Compute).

The layout was read off session 28's reports (ncu 2025, report version 7) and is not a documented format:
after the 4-byte magic `NVR\\0` the file is a sequence of frames, each a little-endian u32 length and a protobuf
message. Frame 4 holds the metric-name table (field 4 -> repeated field 1: strings, a metric's id is its index);
frame 5 is the profiled launch (field 5: the kernel name; field 13, repeated: one metric each, with 1 = the
metric id and 3 = its instances, each 1.5 = the sample's GPU timestamp in ns and 2.3 = its value as a double).

Usage: session29-pm-raw.py REPORT [SUBSTR ...]   prints one line per sample (timestamp relative to the first
sample printed in us, then the selected series; the samples from two before the first to two after the last
with SMs active), for the metrics whose names contain any SUBSTR (all series otherwise).
"""
import struct
import sys


def varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def fields(b):
    """(field, wire type, value) of a protobuf message; raises on malformed bytes."""
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v, i = b[i : i + 8], i + 8
        elif wt == 5:
            v, i = b[i : i + 4], i + 4
        elif wt == 2:
            n, i = varint(b, i)
            v, i = b[i : i + n], i + n
        else:
            raise ValueError(f"wire type {wt} at {i}")
        out.append((f, wt, v))
    if i != len(b):
        raise ValueError("truncated message")
    return out


def frames(data):
    if data[:4] != b"NVR\0":
        raise ValueError("not an ncu report (magic)")
    i, out = 4, []
    while i + 4 <= len(data):
        (n,) = struct.unpack_from("<I", data, i)
        out.append(data[i + 4 : i + 4 + n])
        i += 4 + n
    return out


def first(msg, f):
    return next(v for ff, _, v in fields(msg) if ff == f)


def series(path):
    """{metric name: [(timestamp ns, value)]} of every metric with more than one instance, and the kernel name."""
    fr = frames(open(path, "rb").read())
    names = [v.decode() for f, _, v in fields(first(fr[4], 4)) if f == 1]
    launch = fr[5]
    kernel = first(launch, 5).decode()
    out = {}
    for f, _, m in fields(launch):
        if f != 13:
            continue
        mf = fields(m)
        mid = next(v for ff, _, v in mf if ff == 1)
        inst = [v for ff, _, v in mf if ff == 3]
        if len(inst) < 2:
            continue
        pts = []
        for x in inst:
            xf = fields(x)
            ts = fields(next(v for ff, _, v in xf if ff == 1))
            val = fields(next(v for ff, _, v in xf if ff == 2))
            t = next((v for ff, wt, v in ts if ff == 5 and wt == 0), None)
            d = next((struct.unpack("<d", v)[0] for ff, wt, v in val if wt == 1), None)
            if d is None:
                d = next((float(v) for ff, wt, v in val if wt == 0), 0.0)
            pts.append((t, d))
        out[names[mid] if mid < len(names) else f"#{mid}"] = pts
    return kernel, out


def main():
    kernel, s = series(sys.argv[1])
    want = sys.argv[2:]
    keys = [k for k in sorted(s) if not want or any(w in k for w in want)]
    print(f"kernel {kernel}")
    print(f"{len(s)} sampled metrics; printing {len(keys)}:")
    for i, k in enumerate(keys):
        print(f"  c{i} = {k}")
    n = min(len(s[k]) for k in keys)
    # The samples from two before the first to two after the last with any SM active (all when none is named).
    act = next((k for k in s if "sm__cycles_active.avg" in k), None)
    on = [j for j in range(n) if act and s[act][j][1] > 0] or list(range(n))
    first_on = max(on[0] - 2, 0)
    t0 = s[keys[0]][first_on][0] or 0
    print("sample t_us " + " ".join(f"c{i}" for i in range(len(keys))))
    for j in range(first_on, min(on[-1] + 3, n)):
        t = s[keys[0]][j][0]
        rel = (t - t0) / 1e3 if t and t0 else float("nan")
        print(f"{j:4d} {rel:8.2f} " + " ".join(f"{s[k][j][1]:.4g}" for k in keys))


if __name__ == "__main__":
    main()
