#!/usr/bin/env bash
# On the GPU machine, after install.sh: the measurements of bench/RESULTS.md, one stage per call
# (each call has 10 minutes). Output goes to stdout and, when the device tool sets it, to $OUT.
#   bash infra/gpu/measure.sh engines       # HF generate vs HF compiled (P5)
#   bash infra/gpu/measure.sh vllm-engine   # vLLM (P5), same prompts
#   bash infra/gpu/measure.sh weight-sync   # WeightVersion -> rolling out on it, hf and vllm (P2)
#   bash infra/gpu/measure.sh loop ENGINE NAME [--override k=v ...]   # the arithmetic example
#     on one GPU (explorer and trainer share it), or GPUS=2: the explorer on cuda:0, trainer cuda:1
set -euo pipefail
home=${RFT_GPU_HOME:-/tmp/rftgpu}
source "$home/env.sh"
out=${OUT:-$home/out}
mkdir -p "$out"
stage=$1; shift
kafka_up() {
  python3 -m rft.cli.main stack up --only kafka --timeout 180 | tail -1
}
case "$stage" in
  engines)
    python3 bench/rollout_engines.py --engines hf,hf-compiled --batches 256,1024 \
      --max-tokens 128 --repeats 3 2>&1 | tee "$out/engines.txt" ;;
  vllm-engine)
    python3 bench/rollout_engines.py --engines vllm --batches 256,1024 \
      --max-tokens 128 --repeats 3 2>&1 | tee "$out/vllm-engine.txt" ;;
  weight-sync)
    kafka_up
    for engine in ${1:-hf vllm}; do
      python3 bench/weight_sync.py --engine "$engine" --store "file://$home/ws" --versions 5 \
        2>&1 | grep -v "^INFO" | tee "$out/weight-sync-$engine.txt"
    done ;;
  loop)
    engine=$1; name=$2; shift 2
    extra=()
    # explorer and trainer share the GPU: vLLM must leave the trainer its memory
    if [ "$engine" = vllm ] && [ "${GPUS:-1}" = 1 ]; then
      extra=(--override explorer.rollout_model.gpu_memory_utilization=0.3)
    fi
    kafka_up
    # the arithmetic example on the GPU: bf16 rollouts, autocast training on fp32 masters,
    # 32 tasks x 8 rollouts per step, checkpoints on the local disk (no MinIO needed)
    /usr/bin/time -v python3 -m rft.cli.main run --config examples/arithmetic/arithmetic.yaml \
      --override name="$name" --override cluster.gpu_per_node="${GPUS:-1}" --override model.dtype=auto \
      --override stack.object_store.uri="file://$home/ckpt" --override buffer.batch_size=32 \
      --override explorer.runner_per_model=32 --override trainer.micro_batch_size=64 \
      --override buffer.total_steps="${STEPS:-30}" --override explorer.rollout_model.engine_type="$engine" \
      "${extra[@]}" "$@" 2>&1 | tee "$out/loop-$name.txt" | grep -v "^INFO" ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
