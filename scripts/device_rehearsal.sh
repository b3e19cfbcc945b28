#!/usr/bin/env bash
# Rehearse scripts/device_check.sh here, without a GPU, against two emulations of the lent image
# (benchmarks/device_image.txt, built from PyPI), so that no device minute is spent on an install error:
#   A. the image's Python (3.12) with the image's versions and no torch: the check's own install step
#      (`python -m benchmarks.device_wheels install wheels/device SITE`), then the same plan again over the
#      result (nothing left to install), the imports of what the check loads but torch (and the toy
#      tokenizer through the shipped transformers), and every shipped wheel installed on that Python.
#      No torch: the image's 2.11+cu130 cannot be installed here, and PyPI's only x86_64 torch for 3.12
#      is a CUDA build (a 531 MB wheel that needs ~3 GB of CUDA libraries to import).
#   B. this machine's Python with the CPU torch (TORCH_SPEC) and the image's other versions: the whole
#      check in its CPU mode, `scripts/device_check.sh --cpu-smoke` (install step, imports, trainer).
# What only the GPU machine can show (torch 2.11 with CUDA 13 on Python 3.12, the CUDA tests, bf16, NCCL)
# stays for it. The emulations are kept in DIR (git-ignored) and rebuilt when the image's list, the
# interpreter or the torch pin changes.
#
#   bash scripts/device_rehearsal.sh [--dir DIR]      (make device-rehearsal fills wheels/device first)
#
# DEVICE_PYTHON: the 3.12 interpreter (default python3.12, else pyenv's newest 3.12); HOST_PYTHON: B's
# interpreter (default python3); TORCH_SPEC: B's torch (default torch==2.13.0, the Makefile's CPU build).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=".device-image"
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir="$2"; shift 2 ;;
        *) echo "device_rehearsal: error: unknown argument '$1'; use --dir DIR" >&2; exit 2 ;;
    esac
done
die() { echo "device_rehearsal: error: $*" >&2; exit 1; }
[ -n "$(ls wheels/device/*.whl 2>/dev/null)" ] || die "wheels/device/ is empty; run \`make device-wheels\` first"
want="$(.venv/bin/python -c 'from benchmarks.device_wheels import DEVICE_PYTHON as v; print("%d.%d" % v)' 2>/dev/null \
        || echo 3.12)"
py312="${DEVICE_PYTHON:-}"
if [ -z "$py312" ]; then
    if python3.12 -c '' 2>/dev/null; then py312=python3.12
    elif command -v pyenv >/dev/null; then
        v="$(pyenv versions --bare | grep -E "^${want//./\\.}\.[0-9]+$" | sort -V | tail -1)"
        [ -n "$v" ] && py312="$(pyenv root)/versions/$v/bin/python"
    fi
fi
[ -n "$py312" ] && "$py312" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))" \
    || die "no Python $want found (the image's); install one (pyenv install $want) or set DEVICE_PYTHON"
host="${HOST_PYTHON:-python3}"
torch_spec="${TORCH_SPEC:-torch==2.13.0}"
pipq=(-m pip --disable-pip-version-check -q)
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

# build NAME PYTHON TORCH: a venv DIR/NAME from the image's list (and TORCH, if any), reused while its key holds.
build() {
    local name="$1" py="$2" torch="$3" venv="$dir/$1"
    local key; key="$("$py" -VV | head -1) | $torch | $(sha256sum benchmarks/device_image.txt | cut -c1-16)"
    if [ "$(cat "$venv/.key" 2>/dev/null)" = "$key" ]; then echo "emulation $name: reused ($key)"; return; fi
    echo "emulation $name: building ($key)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    if [ -n "$torch" ]; then
        "$venv/bin/python" "${pipq[@]}" install "$torch"
        "$venv/bin/python" -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > "$venv/torch-pin.txt"
        "$venv/bin/python" "${pipq[@]}" install -c "$venv/torch-pin.txt" -r benchmarks/device_image.txt
    else
        "$venv/bin/python" "${pipq[@]}" install -r benchmarks/device_image.txt
    fi
    echo "$key" > "$venv/.key"
}

# As on the device: a clean environment, the shipped wheels' site first on the path, the checkout next.
on_image() {
    local site="$1"; shift
    env -i PATH="$PATH" HOME="$HOME" PYTHONNOUSERSITE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        PYTHONPATH="$site:$PWD" "$@"
}

build py312-image "$py312" ""
build host-cpu-torch "$host" "$torch_spec"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
A="$dir/py312-image/bin/python"

echo "== A/1 the check's install step on Python $want (no torch)"
on_image "$work/site" "$A" -m benchmarks.device_wheels install wheels/device "$work/site"
echo "== A/2 the plan again over what it installed: nothing left to install"
on_image "$work/site" "$A" -m benchmarks.device_wheels install wheels/device "$work/site-again" | tee "$work/again.txt"
grep -q "nothing to install" "$work/again.txt" || die "a second plan still installs something (above)"
echo "== A/3 imports (all but torch) and the toy tokenizer through the shipped transformers"
on_image "$work/site" "$A" - <<'EOF'
import bagit, detect_secrets, huggingface_hub, hydra, omegaconf, psutil, rocrate, submitit, tokenizers, transformers  # noqa: E401, F401
import evidence.__main__, launcher.planning  # noqa: E401, F401 - the evidence room and the planner load without torch
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained("trainer/assets/toy/model")
assert tok("2 + 3 =")["input_ids"], "the toy tokenizer encodes nothing"
print(f"Python 3.12 image: transformers {transformers.__version__}, huggingface-hub {huggingface_hub.__version__}, "
      f"tokenizers {tokenizers.__version__}, hydra {hydra.__version__}, submitit {submitit.__version__}: imported; "
      "torch not installed (its steps run in B)")
EOF
echo "== A/4 every shipped wheel installs on Python $want"
"$A" "${pipq[@]}" install --no-index --no-deps --no-compile --target "$work/every" wheels/device/*.whl
echo "$(ls wheels/device/*.whl | wc -l) wheels installed"

echo "== B the whole check, --cpu-smoke, on $("$dir/host-cpu-torch/bin/python" -V) with $torch_spec (CPU)"
env -u VIRTUAL_ENV PYTHON="$dir/host-cpu-torch/bin/python" bash scripts/device_check.sh --cpu-smoke --steps 2 \
    --out "$dir/out"
echo "device_rehearsal: passed (A: Python $want install, plan, imports, wheels; B: --cpu-smoke); figures in $dir/out"
