#!/usr/bin/env bash
# The one command for the first GPU: does the GPU path do what the CPU tests say it does, and do
# the presets fit as planned? Parts 1 and 2 take about 10 minutes on one card, part 3 hours (below).
# Prints its tables and exits non-zero if any check fails.
#
#   bash benchmarks/gpu_check.sh                   # on a GPU
#   GPU_CHECK_CPU=1 bash benchmarks/gpu_check.sh   # every part, small, on a CPU (proves the script)
#
# 1. benchmarks/gpu_check.py: for SmolLM2-135M-Instruct and a Qwen2-shaped model from a config,
#    bf16 generation against the update's forward (and float32), the first minibatch on-policy after
#    pi_old is recomputed, the peak memory of a bf16 rollout against benchmarks/memory_plan.py, and
#    agent.generate's tokens/s against model.generate's on the same prompts; then FSDP (FULL_SHARD,
#    bf16 MixedPrecision) with its weight gathers counted (tests/fsdp_bf16.py).
# 2. Two real training steps of SmolLM2 per precision path a GPU user picks: GRPO and PPO (its critic
#    in float32, or its own adapters under LoRA) under --mixed-precision bf16, and PPO under fp16
#    (one loss scaler, two optimizers; on a CPU, where Accelerate refuses fp16, the suite's scaler
#    test instead). train.py prints the first minibatch's |log ratio|; the metrics give rollout
#    tokens/s, peak memory and the steps skipped.
# 3. benchmarks/preset_check.py: the first two steps of each preset (presets/) at Qwen2.5-3B-Instruct
#    where the machine holds it offline (else the largest Qwen2.5 it holds, else SmolLM2), with the
#    flags benchmarks/memory_plan.py fits to this card; each step's rollout and update seconds and
#    peak memory beside the plan's. PRESETS=scalinginter/babyai,... picks some (default: all ten,
#    4 to 32 minutes a preset at 3B on one H100 by the plan's estimate; on a CPU: scalinginter/babyai
#    with a tiny random Qwen2).
# Everything is kept under $OUT_DIR (default runs/gpu_check).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-runs/gpu_check}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
if [ "${GPU_CHECK_CPU:-0}" = 1 ]; then
  DEVICE=cpu; CPU_FLAG=--cpu; STEPS_FLAGS="--tasks-per-step 1 --group-size 2 --max-new-tokens 8 --rounds 2"
else
  DEVICE=cuda; CPU_FLAG=; STEPS_FLAGS="--tasks-per-step 4 --group-size 4 --max-new-tokens 128 --rounds 3"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
fi
fail=0

echo "== checks (benchmarks/gpu_check.py $CPU_FLAG)"
python benchmarks/gpu_check.py $CPU_FLAG 2>&1 | grep -v -i "warn" | tee "$OUT_DIR/checks.md"
[ "${PIPESTATUS[0]}" = 0 ] || fail=1

# steps NAME FLAGS...: two training steps of SmolLM2 with FLAGS and a table of their metrics; fails
# when the run fails, its first minibatch is off-policy, or a step was skipped for a non-finite loss
steps() {
  local name=$1; shift
  echo "== 2 training steps ($name): python train.py --model smollm2 $* ($DEVICE)"
  python train.py --model smollm2 --env babyai --device "$DEVICE" --steps 2 --eval-episodes 0 $STEPS_FLAGS \
    --micro-batch-size 1 --gradient-checkpointing true "$@" --out "$OUT_DIR/$name" \
    > "$OUT_DIR/$name.log" 2>&1 || { fail=1; tail -20 "$OUT_DIR/$name.log"; return; }
  grep "first minibatch" "$OUT_DIR/$name.log"
  python - "$OUT_DIR/$name/metrics.jsonl" <<'EOF' || fail=1
import json, sys
from update import ON_POLICY_TOL
rows = [json.loads(line) for line in open(sys.argv[1])]
print("| step | rollout agent tokens/s | update tokens/s | peak GB | sampled vs pi_old | first minibatch mean, max abs log ratio | skipped: non-finite, fp16 overflow |")
print("|---|---|---|---|---|---|---|")
for m in rows:
    print(f"| {m['step']} | {m['charts/tokens_per_s']:.0f} | {m['perf/update_tokens_per_s']:.0f} | "
          f"{m['perf/peak_memory_gb']:.2f} | {m.get('charts/sampling_logprob_gap', float('nan')):.1e} | "
          f"{m['charts/on_policy_gap']:.1e}, {m['charts/on_policy_gap_max']:.1e} | "
          f"{m['signals/nonfinite_skips']:g}, {m.get('charts/fp16_overflow_skips', 0):g} |")
on_policy = len(rows) == 2 and rows[0]["charts/on_policy_gap"] <= ON_POLICY_TOL
sys.exit(0 if on_policy and not any(m["signals/nonfinite_skips"] for m in rows) else 1)
EOF
}

steps grpo-bf16 --mixed-precision bf16
steps ppo-bf16 --algo ppo --mixed-precision bf16
steps ppo-bf16-lora --algo ppo --mixed-precision bf16 --lora-rank 16
if [ "$DEVICE" = cuda ]; then
  steps ppo-fp16 --algo ppo --mixed-precision fp16
else
  echo "== fp16 (a CPU: Accelerate refuses fp16; the loss scaler attached as Accelerate attaches it)"
  python -m pytest -q -p no:cacheprovider tests/test_precision_matrix.py -k fp16 || fail=1
fi

if [ "$DEVICE" = cuda ]; then PRESETS=${PRESETS:-all}; else PRESETS=${PRESETS:-scalinginter/babyai}; fi
echo "== the presets' first steps beside the plan (benchmarks/preset_check.py --presets $PRESETS $CPU_FLAG)"
python benchmarks/preset_check.py --presets "$PRESETS" $CPU_FLAG --out "$OUT_DIR/presets" 2>&1 \
  | grep -v -i "warn" | tee "$OUT_DIR/presets.md"
[ "${PIPESTATUS[0]}" = 0 ] || fail=1

if [ "$fail" = 0 ]; then echo "gpu_check: all passed"; else echo "gpu_check: FAILED"; fi
exit "$fail"
