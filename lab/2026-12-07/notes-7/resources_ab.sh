#!/bin/bash
# ptxas resources (registers, stack, spills) of the default kernels of every fingerprinted (op, preset), one line
# per kernel: bash resources_ab.sh BINARY > file (then diff two files). Needs K3K_NVRTC and K3K_PTXAS.
awk -F'\t' '!/^#/{print $1"\t"$2}' results/nvidia-h200/fingerprints.txt | sort -u | while IFS=$'\t' read op preset; do
  $1 emit --op "$op" --preset "$preset" --emit resources 2>&1 \
    | sed -E "s/^([^:]+): Resources \{ registers: ([0-9]+),.*stack_frame_bytes: ([0-9]+), spill_store_bytes: ([0-9]+), spill_load_bytes: ([0-9]+).*/$op | $preset | \1 regs=\2 stack=\3 spill=\4\/\5/"
done
