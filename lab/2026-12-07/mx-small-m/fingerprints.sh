#!/bin/bash
# The kernels i45c changes (no GPU): every-point fingerprints (sampled 20000) of the presets that existed before,
# OLD binary (the branch point, f35ff00) against NEW (.dev/bin/k3k of i45c). Expected: the bf16 presets identical,
# and on the MXFP8 presets only the `_x8` tile-path kernels gone (now the bf16 kernel behind the dequant launch),
# no PATH=gemv line changed. Usage: bash fingerprints.sh OLD_K3K NEW_K3K   (K3K_NVRTC set as scripts/test.sh does)
set -u
OLD=$1; NEW=$2; T=$(mktemp -d)
for P in "MXFP4 decode 28 experts x 4 tokens N6144 K3584 mxfp8-act" "MXFP4 decode 28 experts x 4 tokens N6144 K3584" \
  "MXFP4 linear M1 N6144 K3584" "MXFP4 linear M16 N6144 K3584" "MXFP4 decode 28 experts x 4 tokens N6144 K3584 situ_glu+p" \
  "MXFP4 linear M64 N6144 K3584" "MXFP4 linear M4096 N6144 K3584 mxfp8-act"; do
  $OLD fingerprint --op mxfp4_matmul --preset "$P" --every-point --sample 20000 > $T/a.txt 2>&1
  $NEW fingerprint --op mxfp4_matmul --preset "$P" --every-point --sample 20000 > $T/b.txt 2>&1
  gone=$(comm -23 <(sort $T/a.txt) <(sort $T/b.txt) | grep -v '^#' | grep -v 'kernels$')
  echo "$P: old $(head -1 $T/a.txt), new $(head -1 $T/b.txt); only in old: $(echo -n "$gone" | grep -c .)" \
    "(_x8: $(echo -n "$gone" | grep -c _x8_), PATH=gemv: $(echo -n "$gone" | grep -c pathgemv))"
done
rm -rf $T
