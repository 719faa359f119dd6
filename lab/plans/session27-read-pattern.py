"""Session 27: does the order in which the 28 x 4 decode reads its bytes cost time on this GPU?

session10-read-floor.py times a streaming read of the 328 MB of the 28-expert x 4-token MXFP4 decode as many short
programs (16-32 KB each, neighbouring programs on neighbouring bytes): the floor the reports quote. The decode's CTAs
each stream one 64-row tile of one expert over the whole K range instead: 112 KB contiguous per CTA (tile-major
weights), about 2700 CTAs, a few hundred of them in flight at once, so DRAM sees a few hundred concurrent sequential
streams 112 KB apart. This script times the same pure read (16-byte loads, one sum per program, k3k's memset flush)
with each program reading REGION contiguous bytes for REGION = 16 KB (the floor's shape), 56 KB (32-row tiles) and
112 KB (64-row tiles), and as a persistent grid (a few programs per SM, each striding over the buffer). If the 112 KB
rows are much slower than the 16 KB rows on the H200 and not on the H100, the decode's order of reads is its bound.
Usage: python3 session27-read-pattern.py OUT.json
"""
import importlib.util
import json
import os
import sys

import torch
import triton
import triton.language as tl

_spec = importlib.util.spec_from_file_location(
    "read_floor", os.path.join(os.path.dirname(os.path.abspath(__file__)), "session10-read-floor.py"))
read_floor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(read_floor)


@triton.jit
def read_strided(x_ptr, out_ptr, n_words, BLOCK: tl.constexpr, STEP: tl.constexpr):
    # A persistent program: words pid*BLOCK, pid*BLOCK + STEP, ... (STEP = grid x BLOCK).
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(pid * BLOCK, n_words, STEP):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n_words, other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "read-pattern.json"
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    fbuf = torch.empty(max(4 * props.L2_cache_size, 64 << 20), dtype=torch.uint8, device=dev)

    def flush_write():
        fbuf.fill_(0x5A)

    nbytes = 28 * (6144 * 1792 + 6144 * 112)
    words = nbytes // 4
    x = torch.randint(-1000, 1000, (words,), dtype=torch.int32, device=dev)
    rows = []
    # Contiguous regions per program: BLOCK words (4 KB) x ITERS.
    for what, block, iters in [("16 KB per program (the floor's shape)", 1024, 4), ("56 KB per program", 1024, 14),
                               ("112 KB per program (a 64-row tile)", 1024, 28)]:
        for warps in (4, 8):
            grid = (triton.cdiv(words, block * iters),)
            s = torch.empty(grid[0], dtype=torch.int32, device=dev)
            fn = lambda: read_floor.read_sum[grid](x, s, words, BLOCK=block, ITERS=iters, num_warps=warps)
            ms = read_floor.time_it(fn, flush_write)
            rows.append({"what": what, "warps": warps, "programs": grid[0], "ms": ms, "gbps": nbytes / ms / 1e6})
    for per_sm in (2, 4, 8):
        grid = (props.multi_processor_count * per_sm,)
        s = torch.empty(grid[0], dtype=torch.int32, device=dev)
        fn = lambda: read_strided[grid](x, s, words, BLOCK=1024, STEP=grid[0] * 1024, num_warps=4)
        ms = read_floor.time_it(fn, flush_write)
        rows.append({"what": f"persistent, {per_sm} programs per SM, 4 KB strides", "warps": 4, "programs": grid[0],
                     "ms": ms, "gbps": nbytes / ms / 1e6})
    json.dump({"gpu": torch.cuda.get_device_name(0), "bytes": nbytes, "rows": rows}, open(out, "w"), indent=1)
    print(f"{'read of 327.5 MB':48s} {'warps':>5s} {'programs':>8s} {'ms':>8s} {'GB/s':>6s}")
    for r in rows:
        print(f"{r['what']:48s} {r['warps']:5d} {r['programs']:8d} {r['ms']:8.4f} {r['gbps']:6.0f}")


if __name__ == "__main__":
    main()
