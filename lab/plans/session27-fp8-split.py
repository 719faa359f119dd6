"""Session 27: can bf16 activations be split into two e4m3 terms (hi + lo) for an FP8 tensor-core path?

Emulates e4m3 rounding in numpy (round half to even, subnormals below 2^-6, saturation at 448), takes bf16-rounded
activations (4 tokens x K=3584, normal or heavy-tailed magnitudes), a per-token power-of-two scale so the largest is
<= 256, hi = e4m3(x s), lo = e4m3(x s - hi), and compares (hi + lo) W^T / s and hi W^T / s against the exact
product with random MXFP4 weights (fp4 values x power-of-two block scales), as SPEC 3 measures (norm-wise rel).
Usage: python3 session27-fp8-split.py (numpy needed; CPU only).
"""
import numpy as np
rng = np.random.default_rng()
def e4m3(v):
    a = np.abs(v); s = np.sign(v)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.maximum(e, -6)               # subnormals: quantum 2^-9
    q = 2.0 ** (e - 3)
    r = np.round(a / q) * q             # half to even
    return s * np.minimum(r, 448.0)
fp4 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6])
def trial(K=3584, N=512, T=4, dist="normal"):
    w = rng.choice(fp4, size=(N, K)) * rng.choice([-1, 1], size=(N, K))
    sc = 2.0 ** rng.integers(-8, 2, size=(N, K // 32))
    W = w * np.repeat(sc, 32, axis=1)
    x = rng.standard_normal((T, K)) if dist == "normal" else rng.standard_normal((T, K)) * np.exp(rng.standard_normal((T, K)) * 2)
    xb = x.astype(np.float32)  # stand-in for bf16 inputs: round to bf16
    xb = (xb.view(np.uint32) + 0x7FFF + ((xb.view(np.uint32) >> 16) & 1)).astype(np.uint32) & 0xFFFF0000
    xb = xb.view(np.float32).astype(np.float64)
    ref = xb @ W.T
    s = 2.0 ** np.floor(np.log2(256.0 / np.abs(xb).max(axis=1, keepdims=True)))
    hi = e4m3(xb * s); lo = e4m3(xb * s - hi)
    y = ((hi + lo) @ W.T) / s
    y1 = (hi @ W.T) / s
    return np.linalg.norm(y - ref) / np.linalg.norm(ref), np.linalg.norm(y1 - ref) / np.linalg.norm(ref)
for d in ["normal", "heavy"]:
    r = np.array([trial(dist=d) for _ in range(5)])
    print(d, "hi+lo rel max %.2e" % r[:, 0].max(), " hi only rel max %.2e" % r[:, 1].max())
