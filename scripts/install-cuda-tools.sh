#!/usr/bin/env bash
# Installs NVRTC 13.0 and ptxas 13.0 from PyPI wheels into .tools/cuda (or $K3K_CUDA_TOOLS), so k3k can compile
# and assemble every kernel on a machine with no GPU and no CUDA toolkit. Idempotent.
# `--sass` also installs cuobjdump (wheel nvidia-cuda-cuobjdump), which `k3k emit --emit sass` uses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="${K3K_CUDA_TOOLS:-$root/.tools/cuda}"
if [ "${1:-}" = "--sass" ] && [ ! -x "$dest/nvidia/cu13/bin/cuobjdump" ]; then
  mkdir -p "$dest"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" "nvidia-cuda-cuobjdump>=13.0,<14"
  echo "installed cuobjdump into $dest"
fi
if [ -f "$dest/nvidia/cu13/lib/libnvrtc.so.13" ] && [ -x "$dest/nvidia/cu13/bin/ptxas" ]; then
  echo "NVRTC and ptxas 13.0 already in $dest"
  exit 0
fi
mkdir -p "$dest"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" \
  nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-nvcc==13.0.88
echo "installed NVRTC and ptxas 13.0 into $dest"
