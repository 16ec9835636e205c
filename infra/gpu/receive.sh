#!/usr/bin/env bash
# On the GPU machine: keep the bundle parts this call carried (DIR/part-NN, DIR defaults to .gpu)
# in /tmp/rftgpu/parts, which outlives the call while the machine stays warm. Prints which parts
# are there so far.
set -euo pipefail
dest=${RFT_GPU_HOME:-/tmp/rftgpu}/parts
mkdir -p "$dest"
src=${1:-.gpu}
for part in "$src"/part-* "$src"/bundle.sha256; do
  if [ -f "$part" ]; then cp "$part" "$dest/"; fi
done
echo "parts held: $(cd "$dest" && ls part-* 2>/dev/null | tr '\n' ' ')"
