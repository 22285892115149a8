#!/usr/bin/env bash
# The device session's batches on nvidia-h200-x2 (one call each, under the 600 s call limit).
# Tracks on different GPUs run at the same time (CUDA_VISIBLE_DEVICES); every result is JSON in
# $OUT. Engines outlive a killed host (own session), so each batch ends by killing leftovers.
#
#   bash scripts/device_batch.sh arena1     # GPU0: faithful, role-bias | GPU1: seam overhead, never-fires, role-bias
#   bash scripts/device_batch.sh tp2        # both GPUs: TP=2 arena (collective.all_reduce) + NCCL verify
#   bash scripts/device_batch.sh arena2     # GPU0: wrong, then NCCL verify (both GPUs) | GPU1: role-bias ×2
# One H200 (box monitor on, scripts/box_monitor.py -> $OUT/monitor.jsonl):
#   bash scripts/device_batch.sh rolebias   # dense role-bias ×2: drift and role bias over repeated runs
#   bash scripts/device_batch.sh handicap   # dense known-speedup control, full PASS path (teacher + confirm)
#   bash scripts/device_batch.sh moe        # MoE arena: top-k router faithful (quality, evidence) + role bias
#   bash scripts/device_batch.sh moe2       # MoE arena: known-gain control (15 us spin ≈ 1.1 %) + role bias again
#   bash scripts/device_batch.sh moe3       # MoE arena: role bias a third time + the wrong-math control (quality FAIL)
set -u
OUT=${OUT:-/tmp/out}
LIMIT=${LIMIT:-530}
source .devpack/dev_env.sh || exit 9
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD:$PYTHONPATH
nvidia-smi --query-gpu=index,name,memory.used,clocks.sm --format=csv,noheader
date -u +%FT%TZ

gpu() {  # gpu IDS NAME COMMAND...: one track, its own log, bounded by LIMIT
  local ids=$1 name=$2; shift 2
  (export CUDA_VISIBLE_DEVICES=$ids; timeout "$LIMIT" bash -c "$*" >"$OUT/$name.log" 2>&1; echo "$name rc=$?") &
}

collect() {  # $OUT gives back at most 8 files: the JSON summaries, two logs, everything else in one tarball
  pkill -9 -f 'arena[.]engine[.]child|cacheon_subnet[.]verify|sglang[.]srt' 2>/dev/null
  (cd /tmp && find cb-* -maxdepth 3 \( -name 'result.json' -o -name '*.log' -o -name '*.jsonl' -o -name 'receipt-*.json' \
     -o -name 'verify-*' \) -size -8M 2>/dev/null | tar czf "$OUT/work.tgz" -T - 2>/dev/null)
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
  date -u +%FT%TZ
}

verify_collectives() {  # NCCL verify of the collective bundles and controls, results in /tmp/cb-verify
  mkdir -p /tmp/cb-verify
  for b in "$@"; do n=$(basename "$b")
    timeout 150 python3 -m cacheon_subnet verify "$b" --device cuda --world-size 2 --call-timeout 30 --max-cases 6 \
      --json >/tmp/cb-verify/verify-$n.json 2>/tmp/cb-verify/verify-$n.err; echo "verify $n rc=$?"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1], d['status'], d['reasons'][:1])" \
      /tmp/cb-verify/verify-$n.json 2>&1 | cut -c1-400
  done
}
export -f verify_collectives

AB="python3 scripts/arena_benchmarks.py"
declare -A MOE_RUNS=([moe]="moe-faithful,role-bias" [moe2]="handicap,role-bias --handicap-us 15" [moe3]="role-bias,wrong")
monitor() { python3 scripts/box_monitor.py --out "$OUT/monitor.jsonl" & MON=$!; }  # GPU/host samples next to the windows
case "${1:-}" in
  arena1)
    gpu 0 gpu0 "$AB --runs faithful,role-bias --work /tmp/cb-g0 --checkpoints /tmp/ck0 --out $OUT/ab-gpu0.json"
    gpu 1 gpu1 "python3 scripts/seam_overhead.py --work /tmp/cb-ov --checkpoints /tmp/ck1 --out $OUT/overhead.json; \
                $AB --runs never-fires,role-bias --work /tmp/cb-g1 --checkpoints /tmp/ck1 --out $OUT/ab-gpu1.json"
    ;;
  tp2)
    gpu 0,1 tp2 "$AB --config configs/arena/dense-tp2.toml --runs ar-faithful --work /tmp/cb-tp2 --checkpoints /tmp/ck2 \
                 --out $OUT/ab-tp2.json"
    gpu 0,1 verify "verify_collectives examples/collective.all_reduce examples/collective.ar_residual_rmsnorm \
                 examples/controls/corrupt_one_rank examples/controls/skip_collective"
    ;;
  arena2)
    gpu 0 gpu0 "$AB --runs wrong --work /tmp/cb-g0b --checkpoints /tmp/ck0 --out $OUT/ab-gpu0b.json; \
                CUDA_VISIBLE_DEVICES=0,1 verify_collectives examples/collective.ar_residual_rmsnorm examples/controls/skip_collective"
    gpu 1 gpu1 "$AB --runs role-bias,role-bias --work /tmp/cb-g1b --checkpoints /tmp/ck1 --out $OUT/ab-gpu1b.json"
    ;;
  rolebias)
    monitor
    gpu 0 gpu0 "$AB --runs role-bias,role-bias --work /tmp/cb-rb --checkpoints /tmp/ck0 --out $OUT/ab-rolebias.json"
    ;;
  handicap)
    monitor
    gpu 0 gpu0 "$AB --runs handicap --work /tmp/cb-hc --checkpoints /tmp/ck0 --out $OUT/ab-handicap.json"
    ;;
  moe|moe2|moe3)
    monitor
    gpu 0 gpu0 "$AB --config configs/arena/moe.toml --runs ${MOE_RUNS[$1]} --work /tmp/cb-$1 --checkpoints /tmp/ck0 \
                --out $OUT/ab-$1.json"
    ;;
  *) echo "usage: device_batch.sh arena1|tp2|arena2|rolebias|handicap|moe|moe2|moe3"; exit 2 ;;
esac
wait $(jobs -p | grep -v "^${MON:-none}$")
[ -n "${MON:-}" ] && kill "$MON" 2>/dev/null
for f in "$OUT"/ab-*.json; do  # windows next to the monitor's GPU/host samples (scripts/noise_report.py)
  [ -n "${MON:-}" ] && [ -f "$f" ] && python3 scripts/noise_report.py "$f" "$OUT/monitor.jsonl" --tokens 32768 \
    > "${f%.json}.noise.txt" 2>&1
done
collect
