#!/usr/bin/env bash
# On the GPU machine: join the parts, check the bundle's sha256, unpack it, install the wheels
# into a --target dir and write env.sh (PYTHONPATH, Java, Kafka jars, model). Idempotent.
set -euo pipefail
home=${RFT_GPU_HOME:-/tmp/rftgpu}
if [ -f "$home/env.sh" ]; then echo "already installed: source $home/env.sh"; exit 0; fi
read -r want count < "$home/parts/bundle.sha256"
have=$(ls "$home"/parts/part-* | wc -l)
if [ "$have" != "$count" ]; then echo "have $have of $count parts" >&2; exit 1; fi
got=$(cat "$home"/parts/part-* | sha256sum | cut -d' ' -f1)
if [ "$got" != "$want" ]; then echo "bundle sha256 $got, expected $want" >&2; exit 1; fi
mkdir -p "$home/bundle"
cat "$home"/parts/part-* | tar -x -C "$home/bundle"
rm -rf "$home/parts"
started=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$home/site" \
  "$home"/bundle/wheels/*.whl
echo "wheels installed in $(( $(date +%s) - started )) s"
# rft's stack looks for the broker jars in its cache (rft.stack.kafka_install)
kafka_version=$(ls "$home"/bundle/kafka/libs | sed -n 's/^kafka_2\.13-\([0-9.]*\)\.jar$/\1/p')
mkdir -p "$home/stack-cache/kafka-$kafka_version"
ln -sfn "$home/bundle/kafka/libs" "$home/stack-cache/kafka-$kafka_version/libs"
cat > "$home/env.sh" <<ENV
export PYTHONPATH=$PWD:$home/site\${PYTHONPATH:+:\$PYTHONPATH}
export PATH=$home/site/bin:\$PATH
export RFT_STACK_CACHE=$home/stack-cache
export RFT_SMOLLM2_GGUF=$home/bundle/model/smollm2.gguf
export RFT_CACHE_DIR=$home/cache
export PYTHONUNBUFFERED=1
ENV
echo "installed: source $home/env.sh"
