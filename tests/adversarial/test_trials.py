"""Attack class 5 (issue 14, item 4): verify's trials are unpredictable and complete.

Every bundle under trials/ is an honest torch RMSNorm with one cheat that the old fixed schedule
(at most 4 calls per shape, token counts {1, 7, 33}, fresh inputs that never share a row) let
pass. Each must end FAIL with its specific reason here.

These are tests of the DYNAMIC gate alone: they call the runner below the static scan
(`runner._Run.execute`, which verify_bundle calls only after policy.scan_files found nothing),
because the allowlist policy refuses module-level mutable state statically and would stop these
bundles before they run. No production flag skips the policy; only this test reaches past it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.verify import VerifyOptions
from cacheon_subnet.verify.runner import _Run
from cacheon_subnet.verify.shapes import ArenaShapes

CORPUS = Path(__file__).parent / "trials"
SEED = 20261201
# A small arena for the CPU tier: decode graphs up to 128, one prefill size above it.
ARENA = ArenaShapes(profile="qwen3-0.6b", decode_batches=(1, 8, 128), prefill_tokens=(40, 160))

EXPECTED = {  # bundle -> (reason(s), stage prefix the failure is seen in)
    "stale_after_5": ("mismatch", "eager"),
    "stale_after_9": ("mismatch", "eager"),
    "stale_after_9_global": ("mismatch", "eager"),
    "wrong_ge128": ("mismatch", "eager"),
    "wrong_off_list": ("mismatch", "eager"),
    "memo_first_element": ("mismatch", "eager"),
    "memo_first_row": ("mismatch", "eager"),
    "memo_last_row": ("mismatch", "eager"),
    # stale when the allocator reuses an address: which trial meets the stale entry first (a pair
    # whose second call lands on a cached address, or a fresh call) depends on allocation order
    "cache_data_ptr": (("mismatch", "nondeterministic"), "eager"),
    "wrong_second_dtype": ("mismatch", "eager"),
    # the k-th call may be one of the identical-input pair: then the two runs disagree
    "wrong_kth_call": (("mismatch", "nondeterministic"), "eager"),
    "stale_in_runs": ("mismatch", "eager"),
    "poison_sniffer": ("mismatch", "eager"),
    # policy-clean device-to-host copies HostSyncWatch used to miss (keyword device=, a CPU type string)
    "host_copy_device_kwarg": ("host_sync", "eager"),
    "host_copy_type_string": ("host_sync", "eager"),
    # policy-clean: under TRITON_INTERPRET pointers are host addresses; the kernel walked from
    # str(fn)'s address into a function default, a counter (wrong from call 400): the worker's
    # interpreter bound (verify/interp_fix.py) ends its first launch
    "interp_pointer_poke": ("exception", "eager"),
}
NEEDS_ARENA = {"wrong_ge128"}  # the CPU tier's own sizes stay below 128 tokens
# cheats only a CUDA graph trial can show (faithful on every eager call): CUDA runs only
CUDA_ONLY = {"write_input_under_capture": ("input_mutated", "graph")}


def dynamic_verify(name: str, seed: int = SEED, **opts: object):
    """The dynamic gate alone (see the module doc): import, schedule, judge; no static scan."""
    bundle = load_bundle(CORPUS / name)
    options = VerifyOptions(device="cpu", max_cases=2, compile_check=False, call_timeout_s=60, seed=seed, **opts)
    run = _Run(bundle, options, seed)
    try:
        results, _ = run.execute()
    finally:
        run.close()
    assert len(results) == 1
    return results[0]


def test_corpus_is_listed():
    on_disk = {p.name for p in CORPUS.iterdir() if (p / "manifest.toml").exists()}
    assert on_disk == set(EXPECTED) | set(CUDA_ONLY) | {"honest_torch"}


@pytest.mark.slow
def test_honest_control_passes():
    r = dynamic_verify("honest_torch", arena=ARENA)
    assert r.status == "PASS", r.failure
    assert r.calls >= 3 * r.cases


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_attack_fails_with_its_reason(name):
    r = dynamic_verify(name, arena=ARENA if name in NEEDS_ARENA else None)
    reason, stage = EXPECTED[name]
    assert r.status == "FAIL", f"{name} passed the dynamic gate ({r.calls} calls / {r.cases} cases)"
    reasons = (reason,) if isinstance(reason, str) else reason
    assert r.failure.reason in reasons and r.failure.stage.startswith(stage), str(r.failure)


@pytest.mark.slow
def test_wrong_ge128_needs_the_arena_sizes():
    """Without the arena's shapes the CPU tier stays below 128 tokens: the cheat passes there,
    which is why the validator's screen passes its GPU arena's shapes (--arena)."""
    assert dynamic_verify("wrong_ge128").status == "PASS"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stale_replay_fails_for_any_seed(seed):
    """The soak (10..14 calls on one random case) catches a per-shape counter whatever the seed."""
    assert dynamic_verify("stale_after_9", seed=seed).failure.reason == "mismatch"


@pytest.mark.parametrize("name", sorted(CUDA_ONLY))
def test_cuda_graph_attack_fails_with_its_reason(name):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("CUDA graph trials need a GPU (the host-side check runs on CPU in test_trials_protocol.py)")
    bundle = load_bundle(CORPUS / name)
    run = _Run(bundle, VerifyOptions(device="cuda", max_cases=2, call_timeout_s=120, seed=SEED), SEED)
    try:
        (r,), _ = run.execute()
    finally:
        run.close()
    reason, stage = CUDA_ONLY[name]
    assert r.status == "FAIL" and r.failure.reason == reason and r.failure.stage.startswith(stage), str(r.failure)


@pytest.mark.slow
def test_interp_pointer_poke_is_policy_clean_and_only_the_interpreter_bound_stops_it():
    """The bound is what stops it: the policy finds nothing (without the bound, these trials
    PASSed: the counter stays below 400 calls; seen with `_bound_memory` not applied)."""
    from cacheon_subnet.policy import scan as policy

    b = load_bundle(CORPUS / "interp_pointer_poke")
    assert policy.scan_files(b.files) == []
    r = dynamic_verify("interp_pointer_poke")
    assert r.status == "FAIL" and "outside every tensor the launch was handed" in str(r.failure), str(r.failure)
