#!/usr/bin/env bash
# Installs NVRTC 13.0 and ptxas 13.0 from PyPI wheels into .tools/cuda (or $K3K_CUDA_TOOLS), so k3k can compile
# and assemble every kernel on a machine with no GPU and no CUDA toolkit. Idempotent.
# `--sass` also installs cuobjdump and the nvdisasm it runs (wheels nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm),
# which `k3k emit --emit sass` uses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="${K3K_CUDA_TOOLS:-$root/.tools/cuda}"
if [ -f "$dest/nvidia/cu13/lib/libnvrtc.so.13" ] && [ -x "$dest/nvidia/cu13/bin/ptxas" ]; then
  echo "NVRTC and ptxas 13.0 already in $dest"
else
  mkdir -p "$dest"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" \
    nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-nvcc==13.0.88
  echo "installed NVRTC and ptxas 13.0 into $dest"
fi
if [ "${1:-}" = "--sass" ] && [ ! -x "$dest/nvidia/cu13/bin/nvdisasm" ]; then
  # pip --target does not merge into the existing nvidia/ tree of the NVRTC wheels (it skips it with a warning):
  # install into a scratch folder and copy the binaries over.
  tmp=$(mktemp -d)
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$tmp" \
    "nvidia-cuda-cuobjdump>=13.0,<14" "nvidia-cuda-nvdisasm>=13.0,<14"
  cp "$tmp/nvidia/cu13/bin/cuobjdump" "$tmp/nvidia/cu13/bin/nvdisasm" "$dest/nvidia/cu13/bin/"
  rm -rf "$tmp"
  echo "installed cuobjdump and nvdisasm into $dest"
fi
