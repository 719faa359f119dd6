#!/usr/bin/env bash
# The test command: installs the NVRTC/ptxas wheels if missing, then runs every test of the workspace.
# Without a GPU this covers: IR validation, the CPU interpreter against the f64 reference, every kernel compiled
# with NVRTC and assembled with ptxas for sm_90a (0 spills), the results store, and the CPU fuzz budget.
# On a GPU machine, K3K_GPU=1 also runs the GPU-vs-reference tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-cuda-tools.sh
exec cargo test --workspace "$@"
