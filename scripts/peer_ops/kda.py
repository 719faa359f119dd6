"""Peers for KDA, on exactly the problem `k3k bench` ran (its `problem()` JSON: shapes, cu_seqlens, gate form and
in-kernel options):
- `kda`: FlashKDA (MoonshotAI's CUTLASS forward, what FLA's chunk_kda dispatches to under inference with both
  installed) first, then FLA's chunk_kda pinned to its Triton path (FLA_FLASH_KDA=0);
- `kda.decode`: FLA's fused_recurrent_kda.

FLA: the wheels (fla-core==0.6.0 and flash-linear-attention==0.6.0) on PYTHONPATH. FlashKDA: built with
build-flashkda.sh (see ../shared/peers/README.md), its build folder on PYTHONPATH. Imports happen inside the peer
functions, so the other peer modules (and the other peer of an op) still run without them.

Inputs follow k3k's distributions: q, k unit rows (or raw N(0,1) with the in-kernel L2 norm), v ~ N(0,1),
beta ~ U(0,1) (or N(0,1) logits with the in-kernel sigmoid), pre-computed gates lb*sigmoid(N(0,1)) on the safe
path and log(sigmoid(N(0,1))) otherwise, raw gate inputs N(0,1) with a bias ~ N(0, 0.5^2) and A_log ~ U(-1, 1) for
the in-kernel gate forms, h0 ~ N(0,1) f32 when the problem has one. Every peer returns the final state
(output_final_state=True, or FlashKDA's final_state buffer), the work k3k's kernels do.

The raw gate input is drawn in the problem's `g_dtype` (k3k's `gbf16` dim: bf16, as FlashKDA's API takes it and as
the FlashKDA presets pass it, so both sides read the same bytes; else f32) and handed to every peer in that dtype:
FlashKDA gets a bf16 gate unchanged (an f32 one is rounded to bf16 before timing, its API's dtype), FLA's gate kernel
reads either. FlashKDA's states are [N, H, V, K] (k3k: [N, HV, K, V]); h0 is transposed to its order before timing,
outside the timed region. It normalises q and k and
applies the beta sigmoid whatever the problem says, so it runs only problems with the in-kernel beta sigmoid, K = V
= 128, no GVA and a lower-bound sigmoid gate (A_log = 0 where the problem's form has no exp(A_log) factor, a zero
bias where it has no bias: the same function). The FLA peer runs FlashKDA once, untimed, on its own inputs and
records how far apart the two outputs are (`extra` of its row).

Run as a script, `python3 scripts/peer_ops/kda.py flashkda-once REPORT.json PRESET` runs FlashKDA once on the
problem of that preset's row (e.g. under ncu), `... fla-once ...` FLA's Triton chunk_kda.
"""
import logging
import os

import torch
import torch.nn.functional as F
from timing import bench

dev = "cuda"


class _FlaDispatch(logging.Handler):
    """Records FLA's backend choices ("[FLA Backend] kda.chunk_kda -> <backend>", logged once per backend)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.chosen = set()

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("[FLA Backend]") and "->" in msg and "rejected" not in msg:
            self.chosen.add(msg.split("->", 1)[1].strip())


_DISPATCH = _FlaDispatch()
_fla_logger = logging.getLogger("fla")
_fla_logger.addHandler(_DISPATCH)
_fla_logger.setLevel(logging.INFO)


def _pin_fla_triton():
    """FLA_FLASH_KDA=0, read by FLA 0.6.0's dispatcher at every call (fla/backends.py: BaseBackend.is_enabled reads
    os.environ; only can_use() is cached, and dispatch does not use it). The FLA calls here also run with autograd
    enabled and the state in [K, V] order, which FLA's FlashKDA verifier rejects too; `_check_pinned` fails the
    peer if FLA ever reports another choice than its own kernels."""
    os.environ["FLA_FLASH_KDA"] = "0"


def _check_pinned():
    other = {b for b in _DISPATCH.chosen if "kda" in b.replace("_", "").lower() and "flash" in b.lower()}
    if other:
        raise RuntimeError(f"FLA dispatched chunk_kda to {sorted(other)} despite FLA_FLASH_KDA=0: not the Triton path")


def _fla(name):
    _pin_fla_triton()
    try:
        import fla.ops.kda as m
    except Exception as e:  # ImportError, or a broken install
        raise RuntimeError(
            "FLA is not importable (pip install fla-core==0.6.0 flash-linear-attention==0.6.0, or put the wheels on "
            f"PYTHONPATH): {e}"
        ) from e
    if not hasattr(m, name):
        raise RuntimeError(f"fla.ops.kda has no `{name}` (need flash-linear-attention 0.6.0)")
    return getattr(m, name)


def _flash_kda():
    try:
        import flash_kda
    except Exception as e:
        raise RuntimeError(
            "FlashKDA is not importable (build it with build-flashkda.sh SRC_TGZ BUILD_DIR and put BUILD_DIR on "
            f"PYTHONPATH): {e}"
        ) from e
    return flash_kda


def _gate_params(pb, heads):
    """(dt_bias [HV, K] or None, A_log [HV] or None) of an in-kernel gate form."""
    K = pb["K"]
    bias = 0.5 * torch.randn(heads, K, device=dev, dtype=torch.float32) if pb.get("gate_bias") else None
    scaled = pb.get("gate_a_log", not pb["gate"].startswith("lbsig"))
    a_log = torch.empty(heads, device=dev, dtype=torch.float32).uniform_(-1, 1) if scaled else None
    return bias, a_log


def _inputs(pb, lead):
    """q, k, v, g, beta, gate kwargs for a problem; `lead` is the leading shape ([B, T] or [N, T])."""
    H, HV, K, V = pb["H"], pb["HV"], pb["K"], pb["V"]
    l2 = pb["l2norm"]

    def qk():
        x = torch.randn(*lead, H, K, device=dev, dtype=torch.bfloat16)
        return x if l2 else F.normalize(x.float(), dim=-1).to(torch.bfloat16)

    q, k = qk(), qk()
    v = torch.randn(*lead, HV, V, device=dev, dtype=torch.bfloat16)
    x = torch.randn(*lead, HV, K, device=dev, dtype=torch.float32)
    gate = pb["gate"]
    if pb.get("g_dtype") == "bf16" and gate != "pre":
        # k3k's `gbf16`: the raw gate input in bf16, as every peer then reads it.
        x = x.to(torch.bfloat16)
    kw = {}
    lb = pb.get("lower_bound", -5.0)
    if gate == "pre":
        g = lb * torch.sigmoid(x) if pb.get("safe", False) else F.logsigmoid(x)
    else:
        g = x
        kw["use_gate_in_kernel"] = True
        bias, a_log = _gate_params(pb, HV)
        if bias is not None:
            kw["dt_bias"] = bias.reshape(HV * K)
        if a_log is not None:
            kw["A_log"] = a_log
        if gate.startswith("lbsig"):
            # FLA's lower-bound form: lb * sigmoid(exp(A_log) * (g + dt_bias)), or without A_log
            # lb * sigmoid(g + dt_bias) (fla/ops/kda/gate.py).
            kw["lower_bound"] = lb
    if pb["beta_sigmoid"]:
        beta = torch.randn(*lead, HV, device=dev, dtype=torch.bfloat16)
        kw["use_beta_sigmoid_in_kernel"] = True
    else:
        beta = torch.rand(*lead, HV, device=dev, dtype=torch.bfloat16)
    if l2:
        kw["use_qk_l2norm_in_kernel"] = True
    return q, k, v, g, beta, kw


def _run_fla_chunk(chunk_kda, pb, q, k, v, g, beta, h0, cu_t, kw):
    if pb["safe"]:
        kw = dict(kw, safe_gate=True, lower_bound=pb.get("lower_bound", -5.0))
    return lambda: chunk_kda(q, k, v, g, beta, scale=pb["scale"], initial_state=h0, output_final_state=True,
                             cu_seqlens=cu_t, **kw)


def _flashkda_unsupported(pb):
    """Why FlashKDA cannot run the problem (None when it can)."""
    H, HV, K, V = pb["H"], pb["HV"], pb["K"], pb["V"]
    if K != 128 or V != 128:
        return f"FlashKDA supports K = V = 128 only (problem: K = {K}, V = {V})"
    if HV != H:
        return f"FlashKDA has no GVA (problem: H = {H}, HV = {HV})"
    if not pb["gate"].startswith("lbsig"):
        return f"FlashKDA computes the gate lb*sigmoid(exp(A_log)*(g+bias)) in its kernel; the problem's is `{pb['gate']}`"
    if not pb["beta_sigmoid"]:
        return "FlashKDA applies the beta sigmoid in its kernel; the problem passes post-sigmoid beta"
    return None


def _flashkda_call(pb, q, k, v, g, beta, bias, a_log, h0_kv, cu_t):
    """A closure running flash_kda.fwd once on k3k-layout inputs, and its (o, final state [N, H, V, K]) buffers.
    g is passed as bf16 (FlashKDA's dtype: a bf16 gate unchanged, an f32 one rounded here, before any timing); h0 [N, H, K, V] is transposed to [N, H, V, K] here, before any timing;
    a form without bias or A_log gets zeros (the same function)."""
    fk = _flash_kda()
    H, K, V = pb["H"], pb["K"], pb["V"]
    n = h0_kv.shape[0] if h0_kv is not None else (len(pb["cu_seqlens"]) - 1 if pb.get("cu_seqlens") else pb["B"])
    dt_bias = bias if bias is not None else torch.zeros(H, K, device=dev, dtype=torch.float32)
    a_log = a_log if a_log is not None else torch.zeros(H, device=dev, dtype=torch.float32)
    h0 = h0_kv.transpose(-1, -2).contiguous() if h0_kv is not None else None
    ht = torch.empty(n, H, V, K, device=dev, dtype=torch.float32)
    out = torch.empty_like(v)
    g16 = g if g.dtype == torch.bfloat16 else g.to(torch.bfloat16)
    lb, scale = pb.get("lower_bound", -5.0), pb["scale"]
    fn = lambda: fk.fwd(q, k, v, g16, beta, scale, out, a_log, dt_bias, lb, initial_state=h0, final_state=ht,
                        cu_seqlens=cu_t)
    return fn, out, ht


def _problem_inputs(pb):
    B, T = pb["B"], pb["T"]
    q, k, v, g, beta, kw = _inputs(pb, (B, T))
    cu = pb.get("cu_seqlens")
    n = len(cu) - 1 if cu is not None else B
    cu_t = torch.tensor(cu, device=dev, dtype=torch.long) if cu is not None else None
    h0 = torch.randn(n, pb["HV"], pb["K"], pb["V"], device=dev, dtype=torch.float32) if pb["h0"] else None
    return q, k, v, g, beta, kw, cu_t, h0


def _rel(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def peer_flashkda(pb):
    """FlashKDA's flash_kda.fwd on the problem (its workspace allocation inside the timing, as a caller pays it)."""
    why = _flashkda_unsupported(pb)
    if why:
        raise RuntimeError(why)
    q, k, v, g, beta, kw, cu_t, h0 = _problem_inputs(pb)
    fn, out, ht = _flashkda_call(pb, q, k, v, g, beta, _bias_of(pb, kw), kw.get("A_log"), h0, cu_t)
    ms = bench(fn)
    fn()
    torch.cuda.synchronize()
    extra = {"state_order": "[N, H, V, K], h0 transposed outside the timing", "g_dtype": "bf16",
             "g_dtype_problem": pb.get("g_dtype", "f32"),
             "finite": bool(torch.isfinite(out).all() and torch.isfinite(ht).all())}
    return "FlashKDA 1ce47ea (CUTLASS)", ms, extra


peer_flashkda.peer = "FlashKDA 1ce47ea (CUTLASS)"


def _bias_of(pb, kw):
    b = kw.get("dt_bias")
    return b.reshape(pb["HV"], pb["K"]) if b is not None else None


def peer_fla_kda(pb):
    """FLA's chunk_kda pinned to its Triton kernels. Where FlashKDA can run the problem, the raw gate is drawn
    bf16-exact and, untimed, FlashKDA runs the same inputs once: the relative L2 differences of o and of the final
    state go into the row's `extra` (a check that both peers computed the same problem; FlashKDA keeps its state in
    bf16 while it computes, so expect ~1e-2 rather than 1e-3)."""
    chunk_kda = _fla("chunk_kda")
    q, k, v, g, beta, kw, cu_t, h0 = _problem_inputs(pb)
    fk_ok = _flashkda_unsupported(pb) is None
    if fk_ok and g.dtype != torch.bfloat16:
        g = g.to(torch.bfloat16).float()
    fn = _run_fla_chunk(chunk_kda, pb, q, k, v, g, beta, h0, cu_t, kw)
    fn()
    _check_pinned()
    ms = bench(fn)
    _check_pinned()
    extra = {}
    if fk_ok:
        try:
            o_fla, ht_fla = fn()
            fk_fn, o_fk, ht_fk = _flashkda_call(pb, q, k, v, g, beta, _bias_of(pb, kw), kw.get("A_log"), h0, cu_t)
            fk_fn()
            torch.cuda.synchronize()
            extra["vs_flashkda_rel_o"] = _rel(o_fk, o_fla)
            extra["vs_flashkda_rel_state"] = _rel(ht_fk.transpose(-1, -2), ht_fla)
        except Exception as e:
            extra["vs_flashkda"] = f"not compared: {e!r}"[:200]
    name = "FLA chunk_kda (Triton, FLA_FLASH_KDA=0)" + (" safe_gate" if pb["safe"] else "")
    return (name, ms, extra) if extra else (name, ms)


peer_fla_kda.peer = "FLA chunk_kda (Triton, FLA_FLASH_KDA=0)"


def peer_kda_decode(pb):
    fused_recurrent_kda = _fla("fused_recurrent_kda")
    N, T = pb["N"], pb["T"]
    q, k, v, g, beta, kw = _inputs(pb, (N, T))
    h0 = torch.randn(N, pb["HV"], pb["K"], pb["V"], device=dev, dtype=torch.float32)
    fn = lambda: fused_recurrent_kda(q, k, v, g, beta, scale=pb["scale"], initial_state=h0,
                                     output_final_state=True, **kw)
    return "FLA fused_recurrent_kda (Triton)", bench(fn)


peer_kda_decode.peer = "FLA fused_recurrent_kda (Triton)"

# Each op's peers in rank order: the first is the report's peer column, the others get rows of their own.
PEERS = {"kda": [peer_flashkda, peer_fla_kda], "kda.decode": peer_kda_decode}


def _once(which, report, preset):
    import json
    rows = [r for r in json.load(open(report))["rows"] if r["preset"] == preset]
    if not rows:
        raise SystemExit(f"{report}: no row for preset `{preset}`")
    pb = rows[0]["problem"]
    q, k, v, g, beta, kw, cu_t, h0 = _problem_inputs(pb)
    if which == "flashkda-once":
        why = _flashkda_unsupported(pb)
        if why:
            raise SystemExit(why)
        fn = _flashkda_call(pb, q, k, v, g, beta, _bias_of(pb, kw), kw.get("A_log"), h0, cu_t)[0]
    elif which == "fla-once":
        fn = _run_fla_chunk(_fla("chunk_kda"), pb, q, k, v, g, beta, h0, cu_t, kw)
    else:
        raise SystemExit(f"unknown mode {which}: flashkda-once or fla-once")
    fn()
    torch.cuda.synchronize()
    print(f"{which} {preset}: ran once", flush=True)


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 4:
        raise SystemExit("usage: kda.py flashkda-once|fla-once REPORT.json PRESET")
    _once(*sys.argv[1:])
