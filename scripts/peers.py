"""Time the peers a user would otherwise pick (torch, FLA) on exactly the problems `k3k bench` ran, in the same
device call, and measure the ceilings (HBM copy bandwidth, cuBLAS bf16 rate) of this GPU in the same run.

Usage: python3 scripts/peers.py results/bench/<gpu-slug> [--out peers.json] [--ops kda,kda.decode] [--ranks 0,1]
Reads every <op>.json written by `k3k bench` (each row carries its exact `problem`), writes
{"ceilings": {...}, "rows": [{"op", "preset", "peer", "rank", "ms"}]} for `k3k bench --merge-peers`: one row per
peer of an op (a family module may list several, e.g. kda: FlashKDA, then FLA pinned to Triton), `rank` its place
in that list (rank 0 is the report's peer column, the others get report rows of their own). The peers run rank by
rank over all presets (every rank-0 peer first), so a call cut short keeps the first peers of every preset. A peer
may add an `extra` dict to its row (e.g. FLA's agreement with FlashKDA). `--ranks 0,1` runs only those ranks (two runs'
files can be joined into one for the merge: the merge takes a file as one run's peers). `--ops` limits it to
those operators: run on the committed reports while the GPU only checks (no timing), it compiles and autotunes the
FLA Triton kernels into TRITON_CACHE_DIR, so the timed peer run later in the call starts warm (give the warm-up
FLA_CACHE_RESULTS=0: its autotune choices, made while the GPU is busy, must not be kept; the timed run re-tunes
from the compiled kernels).
Inputs are drawn from the same distributions as k3k's (never zeros); shapes and ragged group sizes are identical.
Needs torch + triton (and FLA wheels on PYTHONPATH for KDA)."""
import json, math, os, sys, glob, traceback
import torch

PEER_OPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_ops")
sys.path.insert(0, PEER_OPS)
from timing import bench  # noqa: E402  (the one timing rule of every peer and of the ceilings)

dev = "cuda"
torch.manual_seed(0)


def ceilings():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
    b = torch.empty_like(a)
    copy_ms = bench(lambda: b.copy_(a))
    del a, b
    A = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    B = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    mm_ms = bench(lambda: A @ B)
    del A, B
    torch.cuda.empty_cache()
    return {"hbm_gbps": 2 * 4 * n / copy_ms / 1e6, "bf16_tflops": 2 * 8192**3 / mm_ms / 1e9,
            "source": f"measured in this run on {torch.cuda.get_device_name()}: 4 GiB d2d copy, cuBLAS bf16 8192^3"}


def load_peers():
    """Every scripts/peer_ops/<family>.py defines PEERS = {op name: fn or [fn, ...]}, each fn(problem) -> (peer
    name, ms) or (peer name, ms, extra dict); a list is the op's peers in rank order. A fn may carry a `peer`
    attribute: the name its row gets when it fails before naming itself."""
    import importlib.util
    peers = {}
    for f in sorted(glob.glob(os.path.join(PEER_OPS, "*.py"))):
        spec = importlib.util.spec_from_file_location(os.path.basename(f)[:-3], f)
        m = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(m)
            peers.update(getattr(m, "PEERS", {}))  # timing.py is the shared timing rule, not a family
        except Exception:
            print("could not load", f, flush=True)
            traceback.print_exc()
    return peers


def main():
    folder = sys.argv[1]
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.join(folder, "peers.json")
    only = sys.argv[sys.argv.index("--ops") + 1].split(",") if "--ops" in sys.argv else None
    PEERS = load_peers()
    # The ceilings (a 4 GiB copy, cuBLAS 8192^3 at full power) are measured after the rows: the peer rows timed
    # right after them were the ones that read up to 3x slow (on 2026-12-04: the first two mxfp4 rows of one run, the
    # gate's H12 in another). Until then the file has no ceilings and `k3k bench --merge-peers` keeps the report's own.
    ranks = {int(r) for r in sys.argv[sys.argv.index("--ranks") + 1].split(",")} if "--ranks" in sys.argv else None
    res = {"gpu": torch.cuda.get_device_name(), "ceilings": None, "rows": []}
    work = []  # (rank, op, report row, fn or None)
    for f in sorted(glob.glob(os.path.join(folder, "*.json"))):
        if f.endswith("peers.json"):
            continue
        rep = json.load(open(f))
        if not isinstance(rep, dict) or "op" not in rep or "rows" not in rep:
            continue  # not a `k3k bench` report
        op = rep["op"]
        if only is not None and op not in only:
            continue
        fam = op.split(".")[0]
        fns = PEERS.get(op) or PEERS.get(fam)
        fns = [None] if fns is None else (list(fns) if isinstance(fns, (list, tuple)) else [fns])
        for row in rep["rows"]:
            if row.get("earlier_run"):
                continue  # kept from an earlier run, with that run's peer (k3k bench --merge-peers skips it too)
            work.extend((rank, op, row, fn) for rank, fn in enumerate(fns) if ranks is None or rank in ranks)
    work.sort(key=lambda w: w[0])  # stable: every op's first peer over all presets, then the second ones
    for rank, op, row, fn in work:
        r = {"op": op, "preset": row["preset"], "peer": getattr(fn, "peer", "none"), "rank": rank, "ms": None}
        try:
            if fn is None:
                r["error"] = "no peer for this op"
            else:
                got = fn(row["problem"])
                r["peer"], r["ms"] = got[0], got[1]
                if len(got) > 2:
                    r["extra"] = got[2]
        except Exception as e:
            r["error"] = repr(e)[:300]
            traceback.print_exc()
        torch.cuda.empty_cache()
        res["rows"].append(r)
        print(json.dumps(r), flush=True)
        write(res, out)  # after every row: a call cut short keeps the peers timed so far
    res["ceilings"] = ceilings()
    print("ceilings:", res["ceilings"], flush=True)
    write(res, out)
    print("wrote", out)


def write(res, out):
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
