#!/usr/bin/env bash
# What one GPU gives this project: peak memory and tokens/s of an update at several sequence
# lengths (old path vs chunked), then two real training steps (rollout tokens/s, update tokens/s,
# peak memory) with the flags of the memory plan.
#
#   bash benchmarks/gpu_check.sh                                   # Qwen/Qwen2.5-1.5B-Instruct
#   MODEL=/path/to/model SEQ_LENS=2048,8192 bash benchmarks/gpu_check.sh
#   MODEL=Qwen/Qwen2.5-7B-Instruct FLAGS="--micro-batch-size 1 --gradient-checkpointing true \
#       --mixed-precision bf16 --lora-rank 64" bash benchmarks/gpu_check.sh
#
# Everything it measures is printed and kept under $OUT_DIR (default runs/gpu_check).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}
SEQ_LENS=${SEQ_LENS:-1024,4096,8192}
FLAGS=${FLAGS:---micro-batch-size 1 --gradient-checkpointing true --mixed-precision bf16}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-2}
OUT_DIR=${OUT_DIR:-runs/gpu_check}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1

if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  GB=$(python -c "import torch; print(round(torch.cuda.get_device_properties(0).total_memory / 1e9 * 0.9, 1))")
  BF16=--bf16
else
  GB=${GB:-8}; BF16=
fi
echo "== memory plan for $MODEL (estimate from its config; $GB GB usable)"
python benchmarks/memory_plan.py --model "$MODEL" --seq-len 8192 --gpu-gb "$GB" | tee "$OUT_DIR/plan.md"

echo "== one update (policy + reference + AdamW step) per sequence length"
python benchmarks/update_memory.py --device "$DEVICE" $BF16 --models "$MODEL" --paths before,after,after+ckpt \
  --seq-lens "$SEQ_LENS" --max-gb "$GB" --out "$OUT_DIR/update.jsonl" | tee "$OUT_DIR/update.md"

echo "== $STEPS training steps: python train.py --model $MODEL $FLAGS"
python train.py --model "$MODEL" --env babyai --device "$DEVICE" --steps "$STEPS" --eval-episodes 0 \
  --tasks-per-step 4 --group-size 4 --rounds 5 --max-new-tokens 256 $FLAGS --out "$OUT_DIR/train"
python - "$OUT_DIR/train/metrics.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    print(f"step {m['step']}: rollout {m['charts/tokens_per_s']:.0f} agent tokens/s, "
          f"update {m.get('perf/update_tokens_per_s', float('nan')):.0f} tokens/s, "
          f"{m['charts/seconds_per_step']:.1f} s/step, peak memory {m.get('perf/peak_memory_gb', float('nan')):.1f} GB")
EOF
