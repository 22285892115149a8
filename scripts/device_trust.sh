#!/usr/bin/env bash
# The trust-boundary batches on one H200 (issue 14), each one device call under the 600 s limit.
# Runs the product's own paths (`cacheon doctor`, `cacheon verify`, `cacheon arena run` with the
# default work dir) behind the sandbox wall, from a world-readable copy of the tree (the sandbox's
# dedicated uid must read it). Carry .devpack (SGLang pack + a bwrap binary) and .whl (pyseccomp).
#
#   bash scripts/device_trust.sh wall       # doctor --gpu, CUDA child cost, verify --arena, attacks refused, role bias
#   bash scripts/device_trust.sh handicap   # the 150 us known gain through the full PASS path (crown)
#   bash scripts/device_trust.sh faithful   # examples/norm.rmsnorm: quality PASS on the timed windows
set -u
OUT=${OUT:-/tmp/out}
source .devpack/dev_env.sh || exit 9
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf /opt/cw && mkdir -p /opt/cw && cp -a . /opt/cw && chmod -R o+rX /opt/cw /tmp/site /tmp/sgl_devsite
install -m 0755 .devpack/bwrap /usr/local/bin/bwrap
cd /opt/cw
export PYTHONPATH=/tmp/site:/opt/cw:$PYTHONPATH CACHEON_LOG_LEVEL=warning
C="python3 -m cacheon_subnet"
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader; date -u +%FT%TZ
step() { local name=$1 lim=$2; shift 2; echo "== $name"; local t=$(date +%s.%N)
  timeout "$lim" "$@" >"$OUT/$name.txt" 2>"/tmp/$name.err"; local rc=$?
  echo "$name rc=$rc $(python3 -c "import time;print(round(time.time()-$t,1))") s"; tail -c 1500 "/tmp/$name.err" | grep -v '^{' | tail -5; }
case "${1:-}" in
  wall)
    step doctor 120 $C doctor --gpu
    cat "$OUT/doctor.txt"
    step verify-arena 240 $C verify examples/norm.rmsnorm --device cuda --arena configs/arena/dense.toml
    tail -4 "$OUT/verify-arena.txt"
    for a in clock_forward_clock_read steplog_open_prewrite; do  # refused before GPU time, on both paths
      step "attack-verify-$a" 120 $C verify "tests/adversarial/static/$a" --device cuda; head -3 "$OUT/attack-verify-$a.txt"
      step "attack-arena-$a" 120 $C arena run --config configs/arena/dense.toml --bundle "tests/adversarial/static/$a"
      head -2 "$OUT/attack-arena-$a.txt"
    done
    step rolebias 420 $C arena run --config configs/arena/dense.toml --control stock-as-candidate --slot norm.rmsnorm \
      --out "$OUT/rolebias.json"
    head -12 "$OUT/rolebias.txt"
    ;;
  wall2)  # verify's GPU tier on the arena's shapes, then the role bias again
    step verify-arena 140 $C verify examples/norm.rmsnorm --device cuda --arena configs/arena/dense.toml
    tail -6 "$OUT/verify-arena.txt"
    step rolebias2 360 $C arena run --config configs/arena/dense.toml --control stock-as-candidate --slot norm.rmsnorm \
      --out "$OUT/rolebias2.json"
    head -12 "$OUT/rolebias2.txt"
    ;;
  handicap)
    step handicap 560 $C arena run --config configs/arena/dense.toml --control handicap --slot norm.rmsnorm \
      --handicap-us 150 --out "$OUT/handicap.json"
    head -14 "$OUT/handicap.txt"
    ;;
  faithful)
    step faithful 500 $C arena run --config configs/arena/dense.toml --bundle examples/norm.rmsnorm --out "$OUT/faithful.json"
    head -14 "$OUT/faithful.txt"
    step verify-arena 80 $C verify examples/norm.rmsnorm --device cuda --arena configs/arena/dense.toml
    tail -4 "$OUT/verify-arena.txt"
    ;;
  *) echo "usage: $0 wall|handicap|faithful"; exit 2 ;;
esac
pkill -9 -f 'arena[.]engine_child|sglang[.]srt' 2>/dev/null
(cd /var/tmp/cacheon 2>/dev/null && find . -maxdepth 5 \( -name '*.jsonl' -o -name 'result.json' \) -size -8M | tar czf "$OUT/work.tgz" -T - 2>/dev/null)
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; date -u +%FT%TZ
