#!/usr/bin/env bash
# The GPU checks of the agent loop, in one run (a GPU machine's time is short):
#   1. the agent recipe (GRPO through the Trainer, CUDA bf16 autocast) for a fixed number of
#      steps: tokens/s and MFU, then its GPU checkpoint resumed on the CPU (bench.agent_gpu);
#   2. the same on a bigger model (~0.4B parameters), where MFU means something (no CPU resume);
#   3. the serving bench in bf16 on CUDA (bench.serving).
# Usage: bench/gpu_checks.sh [OUTDIR]   (default .flywheel/gpu; PYTHON overrides the interpreter)
set -uo pipefail
out=${1:-.flywheel/gpu}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 FLYWHEEL_HOME=${FLYWHEEL_HOME:-$out/home}
nvidia-smi -L 2>&1 | tee "$out/device.txt"
$py -c "import torch, transformers; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$out/device.txt"
status=0
timeout 120 $py -m bench.agent_gpu --steps 50 2>&1 | tee "$out/agent_gpu_small.txt" || status=1
timeout 120 $py -m bench.agent_gpu --steps 20 --hidden 1536 --layers 12 --no-cpu-resume 2>&1 \
    | tee "$out/agent_gpu_large.txt" || status=1
timeout 270 $py -m bench.serving --device cuda --dtype bfloat16 2>&1 | tee "$out/serving.txt" \
    || status=1
cp "$FLYWHEEL_HOME/bench/serving.json" "$out/" 2>/dev/null
exit $status
