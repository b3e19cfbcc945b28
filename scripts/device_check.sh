#!/usr/bin/env bash
# One command on a GPU machine without network (an NVIDIA H200 image with torch+CUDA, transformers,
# numpy, pyarrow, ... but not hydra-core, omegaconf, antlr4, submitit, bagit or ray):
#   1. installs what the image lacks from wheels/device/ (wheels for the image's Python 3.12, filled beforehand
#      where there is network by `make device-wheels`; git-ignored, so send the folder with the tree; rehearsed
#      without a GPU by `make device-rehearsal`),
#   2. runs the CUDA tests (pytest -m cuda: no host sync under set_sync_debug_mode("error"), a one-rank
#      NCCL group, bf16 determinism of two identical runs),
#   3. measures the trainer's response tok/s and s/step on a Qwen3-0.6B-architecture model at seed 000's
#      geometry (benchmarks/device_throughput.py: random weights when the real ones are absent, and it says so),
#   4. writes the figures to <out>/device_check.json (with cuda_tests.xml and trainer.log beside it).
#
#   bash scripts/device_check.sh [--out DIR] [--steps N] [--budget-s S] [--cpu-smoke]
#
# --out defaults to $OUT (the device runner's output folder), else device-check-out/. The whole check
# stays within --budget-s (default 450 s): the trainer is stopped when the budget is spent and the steps
# it logged are reported. --cpu-smoke checks this script where there is no GPU: a tiny model and geometry
# on the CPU, CUDA tests skipped. PYTHON selects the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
out="${OUT:-device-check-out}"
steps=3
budget=450
smoke=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --steps) steps="$2"; shift 2 ;;
        --budget-s) budget="$2"; shift 2 ;;
        --cpu-smoke) smoke="--cpu-smoke"; shift ;;
        *) echo "device_check: error: unknown argument '$1'; use --out DIR, --steps N, --budget-s S, --cpu-smoke" >&2
           exit 2 ;;
    esac
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"
site="$(mktemp -d)"
trap 'rm -rf "$site"' EXIT
# The shipped wheels go first on the path, so they win over older copies in the image.
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONNOUSERSITE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
start=$SECONDS
status=0

echo "== 1/3 dependencies"
"$PY" -m benchmarks.device_wheels install wheels/device "$site"
"$PY" - "$smoke" <<'EOF'
import sys

import bagit, hydra, omegaconf, submitit, torch, transformers  # noqa: E401, F401 - all importable

cuda = torch.cuda.is_available()
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s)"
      f"{': ' + torch.cuda.get_device_name(0) if cuda else ''}), transformers {transformers.__version__}, "
      f"hydra {hydra.__version__}")
if not cuda and sys.argv[1] != "--cpu-smoke":
    sys.exit("device_check: error: no CUDA device is visible; run on the GPU machine, or pass --cpu-smoke")
EOF

echo "== 2/3 CUDA tests"
if [ -n "$smoke" ]; then
    rm -f "$out/cuda_tests.xml"
    echo "skipped (--cpu-smoke)"
else
    "$PY" -m pytest -q -rs -m cuda -p no:cacheprovider --junitxml="$out/cuda_tests.xml" tests || status=1
fi

echo "== 3/3 throughput ($steps steps)"
"$PY" -m benchmarks.device_throughput --out "$out" --steps "$steps" --budget-s $((budget - (SECONDS - start))) \
    $smoke || status=1

echo "device_check: $((SECONDS - start)) s, figures in $out/device_check.json$([ $status -ne 0 ] && echo ' (with failures)')"
exit $status
