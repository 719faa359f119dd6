"""Peers for hist_quantile (docs/SEMANTICS.md section 4): what a user would otherwise run, exact and on one GPU.

hist_quantile.qb: alpha_t = torch.topk(s + b, k + 1).values[:, k], margins r = s - alpha_t, the ceil(q)-th largest
margin per expert with torch.kthvalue(dim=0) (q = T k / E), bias = -that. The peer name carries the split
(topk alone, kthvalue alone). hist_quantile.column: torch.kthvalue(dim=0) at the same rank as the histogram target
(torch.quantile refuses inputs above 2^24 elements). Inputs: sigmoid(2 N(0,1)) scores, bias in [-0.1, 0.1)."""
import math
import torch
from timing import bench as timed

dev = "cuda"


def bench(fn):
    return timed(fn, warmup=10, rep=100)


def _scores(T, E):
    return torch.sigmoid(torch.randn(T, E, device=dev) * 2.0)


def _rank_from_top(pb):
    T = pb["T"]
    return max(1, min(T, math.ceil(pb["target"])))


def peer_qb(pb):
    T, E, k = pb["T"], pb["E"], pb["k"]
    s = _scores(T, E)
    b = torch.rand(E, device=dev) * 0.2 - 0.1
    asc = T - _rank_from_top(pb) + 1  # kthvalue is k-th smallest

    def alpha():
        return torch.topk(s + b, k + 1, dim=1).values[:, k]

    def qb_step():
        a = torch.topk(s + b, k + 1, dim=1).values[:, k]
        return -torch.kthvalue(s - a[:, None], asc, dim=0).values

    a = alpha()
    r = s - a[:, None]
    ms_topk = bench(alpha)
    ms_kth = bench(lambda: torch.kthvalue(r, asc, dim=0))
    del r
    ms = bench(qb_step)
    return f"torch.topk({k + 1})+torch.kthvalue(dim=0) [topk {ms_topk:.3f} ms, kthvalue {ms_kth:.3f} ms]", ms


def peer_column(pb):
    T, E = pb["T"], pb["E"]
    x = _scores(T, E)
    asc = T - _rank_from_top(pb) + 1
    return "torch.kthvalue(dim=0)", bench(lambda: torch.kthvalue(x, asc, dim=0))


PEERS = {"hist_quantile.qb": peer_qb, "hist_quantile.column": peer_column}
