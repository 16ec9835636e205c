#!/usr/bin/env bash
# On the GPU machine: keep the bundle parts this call carried (.gpu/part-NN) in /tmp/rftgpu/parts,
# which outlives the call while the machine stays warm. Prints which parts are there so far.
set -euo pipefail
dest=${RFT_GPU_HOME:-/tmp/rftgpu}/parts
mkdir -p "$dest"
for part in .gpu/part-* .gpu/bundle.sha256; do
  if [ -f "$part" ]; then cp "$part" "$dest/"; fi
done
echo "parts held: $(cd "$dest" && ls part-* 2>/dev/null | tr '\n' ' ')"
