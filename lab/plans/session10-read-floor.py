"""Session 10: what a pure streaming read of N bytes costs on this GPU under k3k's timing method.

k3k times a kernel between two CUDA events after overwriting a buffer 4x the L2 (a memset: the L2 is left full of
dirty lines, as triton.testing.do_bench leaves it with its `cache.zero_()`). For short memory-bound kernels (the
MXFP4 decode presets read 11.7 MB at M1 and 328 MB at 28 experts x 4 tokens) the launch, the DRAM ramp-up and the
write-back of those dirty lines are a large part of the time. This script times a Triton kernel that only reads
N bytes (16-byte loads, one sum per program so nothing is dead) at the decode presets' byte counts, under
(a) the memset flush k3k uses and (b) a read-only flush (the L2 left clean), plus an empty kernel, and prints
ms and GB/s. Usage: python3 session10-read-floor.py OUT.json
"""
import json
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def read_sum(x_ptr, out_ptr, n_words, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    base = pid * BLOCK * ITERS
    for i in tl.static_range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n_words, other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def empty(out_ptr):
    pass


def time_it(fn, flush, reps=400):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    for i in range(reps):
        flush()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return t[len(t) // 2]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "read-floor.json"
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    fbuf = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device=dev)
    rbuf = torch.ones(max(4 * l2, 64 << 20) // 4, dtype=torch.int32, device=dev)
    rsink = torch.empty(1, dtype=torch.int64, device=dev)

    def flush_write():
        fbuf.fill_(0x5A)

    def flush_read():
        rsink.copy_(rbuf.sum())

    sizes = {
        "mxfp4 M1 weights+scales (11.7 MB)": 6144 * 1792 + 6144 * 112,
        "2x M1 (23.4 MB)": 2 * (6144 * 1792 + 6144 * 112),
        "bf16 M1 weights, cuBLAS's read (44 MB)": 6144 * 3584 * 2,
        "mxfp4 28 experts x 4 tokens (328 MB)": 28 * (6144 * 1792 + 6144 * 112),
        "1 GiB": 1 << 30,
    }
    rows = []
    sink = torch.empty(1 << 20, dtype=torch.int32, device=dev)
    e_w = time_it(lambda: empty[(1,)](sink), flush_write)
    e_r = time_it(lambda: empty[(1,)](sink), flush_read)
    rows.append({"what": "empty kernel", "bytes": 0, "ms_memset_flush": e_w, "ms_read_flush": e_r})
    for name, nbytes in sizes.items():
        words = nbytes // 4
        x = torch.randint(-1000, 1000, (words,), dtype=torch.int32, device=dev)
        best = None
        for block, iters in [(1024, 4), (2048, 2), (1024, 8), (512, 8)]:
            grid = (triton.cdiv(words, block * iters),)
            s = torch.empty(grid[0], dtype=torch.int32, device=dev)
            fn = lambda: read_sum[grid](x, s, words, BLOCK=block, ITERS=iters, num_warps=4)
            tw = time_it(fn, flush_write)
            tr = time_it(fn, flush_read)
            cand = {"what": name, "bytes": nbytes, "block": block, "iters": iters, "ms_memset_flush": tw,
                    "ms_read_flush": tr, "gbps_memset_flush": nbytes / tw / 1e6, "gbps_read_flush": nbytes / tr / 1e6}
            if best is None or tw < best["ms_memset_flush"]:
                best = cand
        rows.append(best)
        del x
    json.dump({"gpu": torch.cuda.get_device_name(0), "l2_bytes": l2, "rows": rows}, open(out, "w"), indent=1)
    print(f"{'read':44s} {'MB':>8s} {'ms (memset flush)':>18s} {'GB/s':>7s} {'ms (read flush)':>16s} {'GB/s':>7s}")
    for r in rows:
        b = r["bytes"]
        print(f"{r['what']:44s} {b / 1e6:8.1f} {r['ms_memset_flush']:18.4f} "
              f"{(b / r['ms_memset_flush'] / 1e6) if b else 0:7.0f} {r['ms_read_flush']:16.4f} "
              f"{(b / r['ms_read_flush'] / 1e6) if b else 0:7.0f}")


if __name__ == "__main__":
    main()
