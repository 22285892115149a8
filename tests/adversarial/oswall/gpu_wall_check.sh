#!/bin/bash
# On the GPU box (root): the wall with CUDA children. Not run by CI (no GPU). Usage, from the repo root:
#   CACHEON_BWRAP=/path/to/bwrap [PY=python] bash tests/adversarial/oswall/gpu_wall_check.sh
# (pyseccomp must be importable by PY: pip install pyseccomp, or PYTHONPATH to its one-file module).
set -u
PY=${PY:-python3}
echo "== machine"; id; head -2 /etc/os-release; nvidia-smi -L; ls -la /dev/nvidia*
sysctl kernel.apparmor_restrict_unprivileged_userns user.max_user_namespaces 2>&1
$PY -c "import sys, torch, triton; print(sys.executable, torch.__version__, triton.__version__)"
# The sandbox uid must reach the tree: run from a world-searchable copy.
rm -rf /tmp/cacheon-gpu-wall && cp -r . /tmp/cacheon-gpu-wall && chmod -R o+rX /tmp/cacheon-gpu-wall && cd /tmp/cacheon-gpu-wall
export PYTHONPATH=/tmp/cacheon-gpu-wall${PYTHONPATH:+:$PYTHONPATH}
echo "== doctor --gpu"; timeout 120 $PY -m cacheon_subnet.cli doctor --gpu; echo "doctor rc=$?"
echo "== CUDA child behind the wall vs weak"; timeout 300 $PY tests/adversarial/oswall/gpu_wall_cost.py 2>&1 | grep -v "WEAK MODE\|sandbox.weak"
echo "== verify on cuda behind the wall"
timeout 400 $PY -m cacheon_subnet.cli verify examples/norm.rmsnorm --device cuda 2>&1 | tail -25; echo "verify rc=${PIPESTATUS[0]}"
