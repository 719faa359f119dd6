#!/usr/bin/env python3
"""NVRTC compile time of a kernel's emitted CUDA with the whole prelude against the same source without the
prelude fragments it does not use (issue 44, 2026-12-07: would a per-kernel partial prelude pay?).
Usage: nvrtc_prelude_time.py LIBNVRTC PRELUDE_DIR SOURCE.cu [REPS]   (SOURCE: one kernel of `k3k emit --emit cuda`)
Removes the text of prelude/tiles/{mx_decode,fp4_gemv,wgmma}.cuh that the source does not call, compiles both
sources REPS times interleaved (sm_90a, as k3k-codegen's options) and prints the minimum and median of each."""
import ctypes, statistics, sys, time

lib = ctypes.CDLL(sys.argv[1])
pdir, src_path = sys.argv[2], sys.argv[3]
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
src = open(src_path).read()
full = src
uses = {"mx_decode": "dequant_fp4", "fp4_gemv": "k3k::fp4_gemv<", "wgmma": "wgmma_"}
body = src[src.index("__global__"):] if "__global__" in src else src
dropped = []
for frag, call in uses.items():
    text = open(f"{pdir}/tiles/{frag}.cuh").read()
    if frag == "wgmma":  # the fragment closes the namespace: keep that line
        text = text[: text.rindex("}  // namespace k3k")]
    if call not in body and text in src:
        src = src.replace(text, "", 1)
        dropped.append(frag)

def compile_once(code):
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"k.cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"--device-as-default-execution-space"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    t = time.perf_counter()
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    dt = time.perf_counter() - t
    if rc != 0:
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        sys.exit(f"compile failed ({rc}): {log.value.decode()[:2000]}")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return dt

times = {"full": [], "partial": []}
for _ in range(reps):
    times["full"].append(compile_once(full))
    times["partial"].append(compile_once(src))
print(f"{src_path}: dropped {dropped or 'nothing'}; {len(full) - len(src)} of {len(full)} bytes")
for k, v in times.items():
    print(f"  {k:8s} min {min(v):.3f} s  median {statistics.median(v):.3f} s  ({reps} runs)")
