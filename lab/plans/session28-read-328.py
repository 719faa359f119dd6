"""Session 28: the read floor of the 28 x 4 decode's 327.5 MB alone (session10-read-floor.py's kernel, shapes and
memset flush), for runs under an MPS SM limit (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), where the full script would take
too long. Prints one line per size: the SM count torch sees, the best ms over four program shapes, and GB/s.
Usage: python3 session28-read-328.py [EXPERTS...]  (the bytes of that many experts of the preset; default 28)"""
import importlib.util
import os
import sys

import torch
import triton

_spec = importlib.util.spec_from_file_location(
    "read_floor", os.path.join(os.path.dirname(os.path.abspath(__file__)), "session10-read-floor.py"))
read_floor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(read_floor)


def main():
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    fbuf = torch.empty(max(4 * props.L2_cache_size, 64 << 20), dtype=torch.uint8, device=dev)
    for experts in [int(a) for a in sys.argv[1:]] or [28]:
        nbytes = experts * (6144 * 1792 + 6144 * 112)
        words = nbytes // 4
        x = torch.randint(-1000, 1000, (words,), dtype=torch.int32, device=dev)
        best = None
        for block, iters in [(1024, 4), (2048, 2), (1024, 8), (512, 8)]:
            grid = (triton.cdiv(words, block * iters),)
            s = torch.empty(grid[0], dtype=torch.int32, device=dev)
            ms = read_floor.time_it(
                lambda: read_floor.read_sum[grid](x, s, words, BLOCK=block, ITERS=iters, num_warps=4),
                lambda: fbuf.fill_(0x5A), reps=200)
            best = ms if best is None else min(best, ms)
        del x
        print(f"read {nbytes / 1e6:.1f} MB ({experts} experts): SMs {props.multi_processor_count} best {best:.4f} ms "
              f"{nbytes / best / 1e6:.0f} GB/s")


if __name__ == "__main__":
    main()
