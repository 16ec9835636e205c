#!/usr/bin/env bash
# On the GPU machine, after install.sh: the measurements of docs/benchmarks.md and the recipe's
# checks, one stage per call (each call has 10 minutes). Every stage prints as it goes and keeps
# its output in $OUT (set by the device tool; else $RFT_GPU_HOME/out). See infra/gpu/README.md.
#   bash infra/gpu/measure.sh engines       # HF generate vs HF compiled (P5)
#   bash infra/gpu/measure.sh vllm-engine   # vLLM (P5), same prompts
#   bash infra/gpu/measure.sh vllm-overhead [MODEL] [ARGS...]   # rft's vllm engine against
#       LLM.generate on the same engine (bench/vllm_overhead.py; MODEL smollm2 or qwen2.5-1.5b-shape)
#   bash infra/gpu/measure.sh scale-loop fixed|fully_async   # the 1.5B-shape loop on two GPUs
#       (qwen2.5-1.5b-shape: random weights, throughput only): the vLLM explorer and the trainer
#       placed by the ray launcher, 256-token responses, STEPS (8) steps; needs --vllm --ray;
#       trainer micro-batches of 16 with gradient checkpointing (64 ran out of an H100's memory)
#       TRAINER=fsdp2 runs the fsdp2 engine instead of the example's torch engine (its ranks:
#       the GPUs left after the explorer's, or --override trainer.world_size=N)
#   bash infra/gpu/measure.sh learn NAME=CONFIG ...   # several runs of the loop at once on one GPU
#       (hf engine, STEPS steps each, the loop's sizes): learning curves side by side, not speed
#   bash infra/gpu/measure.sh dpo   # DPO on pairs from the arithmetic loop's rollouts: a SRC_STEPS (4)
#       step GRPO run, `rft replay pairs` of its experience topic, DPO on them from the base
#       weights (examples/dpo/arithmetic_dpo.yaml), held-out accuracy of version 0 and the last
#   bash infra/gpu/measure.sh weight-sync   # WeightVersion -> rolling out on it, hf and vllm (P2)
#   bash infra/gpu/measure.sh durable-weights [MODEL ...]   # bench/durable_weights.py on one GPU:
#       publish -> loaded in an hf explorer, beside a raw copy (one file, and 8 at once) through
#       a local store; MODEL smollm2 (default), synthetic-1g or qwen2.5-1.5b-shape
#   bash infra/gpu/measure.sh store-put   # bench/store_put.py: where a version's upload to a
#       local file store goes (digests, fsync, small files), SmolLM2's and the 1.5B shape's sizes
#   bash infra/gpu/measure.sh upload-beside-state   # bench/upload_beside_state.py at the 1.5B
#       shape's sizes: a version's weights (2.6 GiB) going up beside a training state (17 GiB)
#   bash infra/gpu/measure.sh upload-beside-retention   # bench/upload_beside_retention.py at
#       the 1.5B shape's sizes: the next version's weights beside a prune of one with its state
#   bash infra/gpu/measure.sh step-beside-upload [--ways W]   # bench/step_beside_upload.py: the
#       fsdp2 trainer's 1.5B-shape step alone, beside a version's upload, a disk writer, busy
#       cores and a busy second GPU, and all three together (why the step is slower in
#       fully_async than in fixed), with the step thread's CPU seconds
#   bash infra/gpu/measure.sh step-gpu-busy [--no-grad-ckpt]   # bench/step_gpu_busy.py: the same
#       step's GPU kernel time (torch.profiler) against its wall time, and its host syncs
#   bash infra/gpu/measure.sh pinned-host [--ways W]   # bench/pinned_host.py: a 1.5B-shape training state's
#       first take off the GPU against later ones, per way of getting pinned host memory
#   bash infra/gpu/measure.sh fast-weights [hf vllm]   # the fast weight path against the store,
#       announce -> serving, trainer on cuda:0 and explorer on cuda:1 (NCCL: needs 2 GPUs)
#   bash infra/gpu/measure.sh nccl-group   # tests/gpu/nccl_weight_group.py: the nccl weight-sync
#       group's failure paths on real NCCL, trainer on cuda:0 and members on cuda:1 (2 GPUs)
#   bash infra/gpu/measure.sh fast-weights-memory [hf vllm]   # the same with sync_method memory
#       (CUDA IPC), trainer and explorer both on cuda:0 (one GPU)
#   bash infra/gpu/measure.sh chain STAGE ARGS... + STAGE ARGS...   # the stages one after
#       another, detached from the call (setsid), files in $home/chain-out; then, in short calls,
#   WAIT_S=240 bash infra/gpu/measure.sh chain-tail   # its last lines; brings its files back
#   bash infra/gpu/measure.sh loop ENGINE NAME [--config FILE] [--override k=v ...]
#       a run of FILE (default examples/arithmetic/arithmetic.yaml) on one GPU (explorer and
#       trainer share it), or GPUS=2: the explorer on cuda:0, the trainer on cuda:1; STEPS steps
#   bash infra/gpu/measure.sh shared-gpu ENGINE   # the check: the arithmetic loop on one shared
#       GPU with ENGINE (hf or vllm), STEPS=15, must end with every step trained
#   bash infra/gpu/measure.sh lora ENGINE   # the check: examples/arithmetic/arithmetic_lora.yaml
#       on one shared GPU with ENGINE (hf: peft on the base; vllm: a LoRARequest per version),
#       STEPS=10, must end with every step trained, each version an adapter the explorer loaded
#   bash infra/gpu/measure.sh trainer-memory  # bench/trainer_memory.py: peak GPU memory and step
#       time per memory setting, Qwen2.5-1.5B's shape with random weights, bf16 compute
#   bash infra/gpu/measure.sh serve-agent   # examples/serve_agent on one shared GPU: the endpoint,
#       a mode-train trainer and the openai-client agent, ROUNDS (10) rounds of TASKS (16)
#       problems x 4 episodes, 64 held-out problems (needs the bundle built with --serve)
set -euo pipefail
home=${RFT_GPU_HOME:-/tmp/rftgpu}
source "$home/env.sh"
export PYTHONPATH=$PWD:$PYTHONPATH  # the checkout this stage runs from wins over install time's
out=${OUT:-$home/out}
mkdir -p "$out"
export RFT_CHECKPOINT_ROOT_DIR=$home/runs  # run logs and local state, outside the repository
stage=$1; shift
kafka_up() {
  python3 -m rft.cli.main stack up --only kafka --timeout 180 | tail -1
}
# A run that prints nothing for STALL_S seconds: every rft process prints its threads' stacks
# into its log (SIGUSR1, rft/cli/main.py), and the last lines of the run's logs are shown.
watch_stalls() {
  local file=$1 name=$2 last=-1 quiet=0 size f
  while sleep 15; do
    size=$(stat -c %s "$file" 2>/dev/null || echo 0)
    if [ "$size" != "$last" ]; then last=$size; quiet=0; continue; fi
    quiet=$((quiet + 15))
    if [ "$quiet" -ge "${STALL_S:-120}" ]; then
      echo "=== no output for ${quiet}s: stacks of the rft processes, then their logs' last lines"
      pkill -USR1 -f "rft.cli.main (explore|train|feed)" || true
      sleep 2
      for f in "$RFT_CHECKPOINT_ROOT_DIR"/*/"$name"/logs/*.log; do
        [ -f "$f" ] && { echo "--- $f"; tail -n 60 "$f"; }
      done
      quiet=$((-600))  # once more after ten more quiet minutes
    fi
  done
}
loop() {
  local engine=$1 name=$2; shift 2
  local config=examples/arithmetic/arithmetic.yaml
  if [ "${1:-}" = --config ]; then config=$2; shift 2; fi
  local extra=()
  # explorer and trainer share the GPU: vLLM must leave the trainer its memory
  if [ "$engine" = vllm ] && [ "${GPUS:-1}" = 1 ]; then
    extra=(--override explorer.rollout_model.gpu_memory_utilization=0.3)
  fi
  kafka_up
  rm -rf "${RFT_CHECKPOINT_ROOT_DIR:?}"/*/"$name" "$home/ckpt/$name"  # a fresh run each time
  : > "$out/loop-$name.txt"
  watch_stalls "$out/loop-$name.txt" "$name" &
  local watcher=$!
  # bf16 rollouts, autocast training on fp32 masters, 32 tasks x 8 rollouts per step,
  # checkpoints on the local disk (no MinIO needed); later overrides win
  local rc=0
  /usr/bin/time -v python3 -m rft.cli.main run --config "$config" \
    --override name="$name" --override cluster.gpu_per_node="${GPUS:-1}" --override model.dtype=auto \
    --override stack.object_store.uri="file://$home/ckpt/$name" --override buffer.batch_size=32 \
    --override explorer.runner_per_model=32 --override trainer.micro_batch_size=64 \
    --override buffer.total_steps="${STEPS:-30}" --override explorer.rollout_model.engine_type="$engine" \
    "${extra[@]}" "$@" 2>&1 | tee -a "$out/loop-$name.txt" | grep --line-buffered -v "^INFO" \
    || rc=$?
  kill "$watcher" 2>/dev/null || true
  for f in "$RFT_CHECKPOINT_ROOT_DIR"/*/"$name"/monitor/metrics.jsonl; do
    [ -f "$f" ] || continue
    cp "$f" "$out/$name-metrics.jsonl"
    python3 -m bench.loop_steps "$f" | tee "$out/$name-steps.txt"
  done
  for f in "$RFT_CHECKPOINT_ROOT_DIR"/*/"$name"/logs/*.log; do
    [ -f "$f" ] || continue
    cp "$f" "$out/$name-$(basename "$f")"
    # each version taken and published, retention, and the training state beside them
    grep -qE "version [0-9]+ taken in" "$f" && echo "--- versions and training state in $(basename "$f"):"
    grep -hE "(version [0-9]+ taken in|published weight version|pruned checkpoint versions \[[0-9, ]+\]|training state of v[0-9]+ (written|is durable))" "$f" \
      | cut -c12- || true
    echo "--- warnings and errors of $(basename "$f"):"
    grep -E " (WARNING|ERROR|CRITICAL) |Traceback|Error" "$f" | tail -n 15 || true
  done
  return $rc
}
case "$stage" in
  engines)
    python3 bench/rollout_engines.py --engines hf,hf-compiled --batches 256,1024 \
      --max-tokens 128 --repeats 3 2>&1 | tee "$out/engines.txt" ;;
  vllm-engine)
    python3 bench/rollout_engines.py --engines vllm --batches 256,1024 \
      --max-tokens 128 --repeats 3 2>&1 | tee "$out/vllm-engine.txt" ;;
  vllm-overhead)
    model=${1:-smollm2}; shift || true
    python3 -m bench.vllm_overhead --model "$model" "$@" 2>&1 \
      | grep --line-buffered -v -e "^INFO" -e "^(EngineCore" -e "^WARNING" \
      | tee "$out/vllm-overhead-$model.txt" ;;
  scale-loop)
    style=$1; shift
    async=()
    if [ "$style" = fully_async ]; then
      async=(--override synchronizer.sync_style=fully_async
             --override synchronizer.max_head_offpolicyness=2
             --override buffer.trainer_input.max_staleness=4
             --override algorithm.policy_loss_fn=decoupled_ppo)
    fi
    GPUS=2 STEPS=${STEPS:-8} loop vllm "q15-$style-$(date +%H%M%S)" \
      --override model.model_path=qwen2.5-1.5b-shape --override cluster.launcher=ray \
      --override model.max_response_tokens=256 \
      --override buffer.explorer_input.taskset.rollout_args.max_tokens=256 \
      --override explorer.eval_interval=1000 --override explorer.rollout_model.gpu_memory_utilization=0.7 \
      --override trainer.micro_batch_size=16 --override trainer.enable_gradient_checkpointing=true \
      --override trainer.trainer_type="${TRAINER:-torch}" --override 'monitor.monitor_type=[console,jsonl]' \
      "${async[@]}" "$@" ;;
  weight-sync)
    kafka_up
    for engine in ${1:-hf vllm}; do
      python3 bench/weight_sync.py --engine "$engine" --store "file://$home/ws" --versions 5 \
        2>&1 | grep --line-buffered -v "^INFO" | tee "$out/weight-sync-$engine.txt"
    done ;;
  durable-weights)
    # ROOTS: the checkouts to compare, e.g. ".gpu-src ." with main before a change carried as .gpu-src
    # shellcheck disable=SC2086
    python3 bench/durable_weights.py --roots ${ROOTS:-.} --label .gpu-src=before --label .=after \
      --store file --model "${@:-smollm2}" \
      --device cuda --dtype bfloat16 --versions "${VERSIONS:-3}" --rounds "${ROUNDS:-1}" \
      --threads 8 2>&1 | tee "$out/durable-weights.txt" ;;
  store-put)
    { python3 bench/store_put.py --mib 257 --files 8 --dir "$home"
      python3 bench/store_put.py --mib 2648 --files 16 --rounds 3 --dir "$home"; } 2>&1 \
      | tee "$out/store-put.txt" ;;
  upload-beside-state)
    python3 bench/upload_beside_state.py --weights-mib 2648 --files 16 --state-mib 17700 \
      --state-files 24 --lead 1.0 --rounds "${ROUNDS:-2}" --dir "$home" "$@" 2>&1 \
      | tee "$out/upload-beside-state.txt" ;;
  upload-beside-retention)
    python3 bench/upload_beside_retention.py --weights-mib 2648 --files 16 --state-mib 17700 \
      --state-files 24 --rounds "${ROUNDS:-2}" --dir "$home" "$@" 2>&1 \
      | tee "$out/upload-beside-retention.txt" ;;
  step-beside-upload)
    python3 -m bench.step_beside_upload --engine "${ENGINE:-fsdp2}" --device cuda --bf16 \
      --rounds "${ROUNDS:-3}" --dir "$home" "$@" 2>&1 | grep --line-buffered -v "^INFO" \
      | tee -a "$out/step-beside-upload.txt" ;;
  step-gpu-busy)
    python3 -m bench.step_gpu_busy --engine "${ENGINE:-fsdp2}" --bf16 "$@" 2>&1 \
      | grep --line-buffered -v "^INFO" | tee -a "$out/step-gpu-busy.txt" ;;
  pinned-host)
    python3 bench/pinned_host.py "$@" 2>&1 | tee "$out/pinned-host.txt" ;;
  fast-weights)
    for engine in ${1:-hf vllm}; do
      python3 bench/fast_weights.py --engine "$engine" --store file --model smollm2 \
        --device cuda:0 --explorer-device cuda:1 --dtype bfloat16 --versions 5 \
        2>&1 | grep --line-buffered -v "^INFO" | tee "$out/fast-weights-$engine.txt"
    done ;;
  nccl-group)
    python3 -m tests.gpu.nccl_weight_group 2>&1 | grep --line-buffered -v "^INFO" \
      | tee "$out/nccl-group.txt"
    exit "${PIPESTATUS[0]}" ;;
  fast-weights-memory)
    for engine in ${1:-hf vllm}; do
      python3 bench/fast_weights.py --sync-method memory --engine "$engine" --store file \
        --model smollm2 --device cuda:0 --explorer-device cuda:0 --dtype bfloat16 --versions 5 \
        2>&1 | grep --line-buffered -v "^INFO" | tee "$out/fast-weights-memory-$engine.txt"
    done ;;
  loop)
    loop "$@" ;;
  chain)
    # stages separated by "+", one after another in a process session of their own, which
    # outlives this call (the machine's other processes end with it): two long stages that must
    # share a host (the two sync styles) do not fit in one call, and a machine stays the same
    # host only while calls keep coming. Their files go to $home/chain-out; follow with
    # `chain-tail`, which shows the last lines and brings those files back.
    cmds=(); cur=()
    for a in "$@"; do
      if [ "$a" = + ]; then cmds+=("$(printf '%q ' "${cur[@]}")"); cur=(); else cur+=("$a"); fi
    done
    cmds+=("$(printf '%q ' "${cur[@]}")")
    script=""
    for c in "${cmds[@]}"; do
      script+="echo \"== \$(date +%T) stage: $c\"; bash infra/gpu/measure.sh $c; echo \"== stage rc=\$?\"; "
    done
    script+='echo "== chain done"'
    mkdir -p "$home/chain-out"
    OUT=$home/chain-out setsid nohup bash -c "$script" > "$home/chain.txt" 2>&1 < /dev/null &
    echo "chain started: ${#cmds[@]} stages; follow with: bash infra/gpu/measure.sh chain-tail" ;;
  chain-tail)
    sleep "${WAIT_S:-0}"
    tail -n "${LINES:-8}" "$home/chain.txt"
    # one archive, not the files: a call brings back at most 8 files, and a loop leaves 5 or more
    # (the eleventh and thirteenth leases lost files past the 8th); chain.txt too, which alone
    # holds each version's take, publish and retention lines
    [ "$out" = "$home/chain-out" ] \
      || tar -czf "$out/chain-out.tar.gz" -C "$home" chain.txt chain-out 2>/dev/null || true ;;
  dpo)
    stamp=$(date +%H%M%S); src=dposrc-$stamp; dpo=dpo-$stamp
    STEPS=${SRC_STEPS:-4} loop hf "$src" --override explorer.eval_interval=1000 > "$out/dpo-source.log" 2>&1
    tail -n 3 "$out/dpo-source.log"
    python3 -m rft.cli.main replay pairs "rft-examples.$src.experiences" -o "rft-examples.$dpo.pairs" \
      2>&1 | grep -v "^INFO" | tee "$out/dpo-pairs.txt"
    dpo_args=(--config examples/dpo/arithmetic_dpo.yaml --override name="$dpo"
      --override cluster.gpu_per_node=1 --override model.dtype=auto
      --override stack.object_store.uri="file://$home/ckpt/$dpo" "$@")
    python3 -m rft.cli.main bench "${dpo_args[@]}" --override mode=bench --versions 0 2>&1 \
      | grep -v "^INFO" | tail -n 4 | tee "$out/dpo-bench-before.txt"
    python3 -m rft.cli.main train "${dpo_args[@]}" --from-topic "rft-examples.$dpo.pairs" \
      --override synchronizer.sync_interval=1 --override trainer.save_interval=1 2>&1 \
      | grep -v "^INFO" | tee "$out/dpo-train.txt" | grep -E "trainer step|dpo_loss|wall" | tail -n 12
    last=$(sed -n 's/.*model_version=\([0-9]*\).*/\1/p; s/.*version \([0-9]*\).*/\1/p' "$out/dpo-train.txt" | sort -n | tail -1)
    python3 -m rft.cli.main bench "${dpo_args[@]}" --override mode=bench --versions "${last:-1}" 2>&1 \
      | grep -v "^INFO" | tail -n 4 | tee "$out/dpo-bench-after.txt" ;;
  learn)
    kafka_up
    pids=()
    for spec in "$@"; do
      name=${spec%%=*}
      loop hf "$name" --config "${spec#*=}" > "$out/learn-$name.log" 2>&1 &
      pids+=($!)
    done
    rc=0
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    for spec in "$@"; do
      name=${spec%%=*}
      echo "--- $name"; grep -E "eval|trainer steps|wall" "$out/loop-$name.txt" | tail -12
    done
    exit $rc ;;
  shared-gpu)
    engine=$1; shift
    steps=${STEPS:-15}
    name=shared-$engine-$(date +%H%M%S)  # a run of its own each time (topics outlive a call)
    rc=0
    STEPS=$steps loop "$engine" "$name" "$@" || rc=$?
    summary=$out/loop-$name.txt
    trained=$(sed -n 's/.*trainer steps: \([0-9]*\).*/\1/p' "$summary" | tail -1)
    if [ "$rc" = 0 ] && [ "${trained:-0}" = "$steps" ]; then
      echo "CHECK shared-gpu $engine: passed, $trained of $steps steps trained"
    else
      echo "CHECK shared-gpu $engine: FAILED (exit $rc, ${trained:-no} trainer steps of $steps)"
      exit 1
    fi ;;
  lora)
    engine=$1; shift
    steps=${STEPS:-10}
    name=lora-$engine-$(date +%H%M%S)
    rc=0
    STEPS=$steps loop "$engine" "$name" --config examples/arithmetic/arithmetic_lora.yaml "$@" || rc=$?
    summary=$out/loop-$name.txt
    trained=$(sed -n 's/.*trainer steps: \([0-9]*\).*/\1/p' "$summary" | tail -1)
    loaded=$(cat "$out/$name"-*explore*.log 2>/dev/null | grep -c "loaded weight version" || true)
    refused=$(cat "$out/$name"-*explore*.log 2>/dev/null | grep -c "refused" || true)
    if [ "$rc" = 0 ] && [ "${trained:-0}" = "$steps" ] && [ "${loaded:-0}" -gt 0 ] && [ "${refused:-0}" = 0 ]; then
      echo "CHECK lora $engine: passed, $trained of $steps steps trained, $loaded adapter versions loaded"
    else
      echo "CHECK lora $engine: FAILED (exit $rc, ${trained:-no} of $steps steps, ${loaded:-0} loaded, ${refused:-0} refused)"
      exit 1
    fi ;;
  trainer-memory)
    python3 -m bench.trainer_memory --device cuda --bf16 "$@" 2>&1 | tee "$out/trainer-memory.txt" ;;
  serve-agent)
    kafka_up
    name=serve-agent-$(date +%H%M%S)
    rounds=${ROUNDS:-10}
    config=(--config examples/serve_agent/serve.yaml --override name="$name"
      --override cluster.gpu_per_node=1 --override model.dtype=auto
      --override stack.object_store.uri="file://$home/ckpt/$name"
      --override buffer.batch_size="${TASKS:-16}" --override explorer.runner_per_model=64
      --override trainer.micro_batch_size=64 --override buffer.total_steps="$rounds")
    export RFT_SERVE_API_KEY=sk-rft-gpu
    python3 -m rft.cli.main run "${config[@]}" > "$out/$name-server.txt" 2>&1 &
    server=$!
    python3 -m rft.cli.main run "${config[@]}" --override mode=train > "$out/$name-trainer.txt" 2>&1 &
    trainer=$!
    for _ in $(seq 1 150); do grep -q "rft serve:" "$out/$name-server.txt" && break; sleep 2; done
    grep "rft serve:" "$out/$name-server.txt" || { tail -n 40 "$out/$name-server.txt"; exit 1; }
    rc=0
    /usr/bin/time -v python3 examples/serve_agent/agent.py --rounds "$rounds" --tasks "${TASKS:-16}" \
      --repeat 4 --eval 64 --workers 64 --trainer-steps "$rounds" 2>&1 | tee "$out/$name-agent.txt" || rc=$?
    [ "$rc" = 0 ] || kill -INT "$trainer"  # it would wait for rounds that never come
    wait "$trainer" || rc=$?
    kill -INT "$server"; wait "$server" || true
    for f in "$RFT_CHECKPOINT_ROOT_DIR"/*/"$name"/logs/*.log; do
      [ -f "$f" ] && cp "$f" "$out/$name-$(basename "$f")"
    done
    grep -h -E "rollout tokens/s|trainer steps|peak" "$out/$name-trainer.txt" "$out/$name-server.txt" | tail -n 8 || true
    exit $rc ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
