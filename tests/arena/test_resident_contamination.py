"""The contamination test of docs/arena.md ("Resident timed engine"), on the CPU fake engine: a real
scheduler process started with spawn, the real seams, the real driver, sandbox and record pipes.

Contribution A (tests/arena/contamination.py, one bundle per variant) tries to outlive its turn
in a resident timed engine; B, the faithful torch bundle, runs next. B after A must read exactly
what B reads as the first contribution of a fresh engine: every window's tokens, logprobs and
top-k, every rank's counts, errors, declines, static-input watch and route acks. Each variant has
its broken control: the guard that stops it switched off, after which A does reach B (the test
can fail). The Triton-cache variant needs Triton's compiled mode and runs in a child process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import arena_harness as h
import contamination as c
import pytest

from arena.engine import resident_timed
from arena.engine.resident_timed import TimedPool
from cacheon_subnet.policy.scan import scan_files
from cacheon_subnet.sandbox import remove_tree
from seams.receipts import read_receipts

REPO = h.REPO


@pytest.fixture(scope="module")
def env():
    """Outside pytest's 0700 temp root (other pytest runs on this box re-close it while engines run)."""
    tmp = Path(tempfile.mkdtemp(prefix="cacheon-contamination-", dir="/var/tmp"))
    tmp.chmod(0o755)
    try:
        with pytest.MonkeyPatch.context() as mp:
            root = h.seam_harness.write_runtime(tmp / "fake-sglang")
            mp.setenv("PYTHONPATH", str(root))
            mp.setenv("TRITON_INTERPRET", "1")
            yield tmp
    finally:
        remove_tree(tmp)


@pytest.fixture(scope="module")
def fresh_b(env):
    """B as the first contribution of a fresh engine: what B must read after any A."""
    with TimedPool() as pool:
        b = c.Runner(env / "fresh-b", pool).run(h.torch_bundle("b"))
    assert not b.run.error and b.post.ok and not b.post.reused, (b.run.error, b.post)
    return c.fingerprint(b.run)


def _a_then_b(tmp: Path, variant: str, engine: str = "FakeEngine") -> tuple[c.Contribution, c.Contribution]:
    with TimedPool() as pool:
        runner = c.Runner(tmp, pool, engine)
        a = runner.run(c.bundle(variant), scan=c.POLICY_CLEAN[variant])
        b = runner.run(h.torch_bundle("b"))
    assert not b.run.error, b.run.error
    return a, b


def test_each_variant_is_policy_clean_exactly_where_the_module_says():
    for name in c.VARIANTS:
        b = c.bundle(name)
        findings = scan_files(dict(b.files))
        assert (not findings) == c.POLICY_CLEAN[name], (name, [str(f) for f in findings][:3])


# variant -> words the post-condition must name after A (the guards that stop it)
CAUGHT_BY = {
    "counter_in_weight": ("stock canary window differs", "weights and buffers digest differs"),
    "patched_torch": ("alive of a contribution",),
    "late_writer": ("frames of a contribution",),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(CAUGHT_BY))
def test_b_after_a_reads_what_b_reads_in_a_fresh_engine(env, fresh_b, variant):
    a, b = _a_then_b(env / f"ok-{variant}", variant)
    assert not a.post.ok, a.post
    for words in CAUGHT_BY[variant]:
        assert any(words in r for r in a.post.reasons), (words, a.post.reasons)
    assert not b.post.reused  # the engine A left was restarted, never handed to B
    assert c.fingerprint(b.run) == fresh_b
    assert b.post.ok


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(CAUGHT_BY))
def test_broken_control_without_the_post_condition_a_reaches_b(env, fresh_b, variant, monkeypatch):
    monkeypatch.setattr(resident_timed.TimedEngine, "verify", lambda self, run, held: [])
    a, b = _a_then_b(env / f"broken-{variant}", variant)
    assert b.post.reused  # B ran in the engine A left
    assert c.fingerprint(b.run) != fresh_b, f"{variant} did not reach B: the test could not fail"


@pytest.mark.slow
def test_a_clean_contribution_leaves_the_engine_to_the_next_one(env, fresh_b):
    """A faithful A: the post-condition holds, B runs in the same engine and reads as fresh; A's
    answers dir went to A's workdir, its tree copy is gone, and nothing of it is in B's dir."""
    with TimedPool() as pool:
        runner = c.Runner(env / "clean", pool)
        a = runner.run(h.torch_bundle("a"))
        home = next((env / "clean" / "home").glob("*/*"))
        assert sorted(p.name for p in (home / "answers").iterdir()) == ["start"]
        assert list((home / "trees").iterdir()) == []
        assert (a.receipts_dir / "answers-0.jsonl").is_file()
        b = runner.run(h.torch_bundle("b"))
    assert a.post.ok and b.post.ok and b.post.reused, (a.post, b.post)
    assert c.fingerprint(b.run) == fresh_b
    assert {r["role"] for r in read_receipts(b.receipts_dir)} == {"scheduler"}


@pytest.mark.slow
def test_an_extra_receipt_a_writes_stays_in_its_own_answers_dir(env, fresh_b):
    a, b = _a_then_b(env / "stray", "stray_receipt")
    assert a.post.ok and b.post.reused  # nothing of A is left in the rank: B ran in the same engine
    assert "detokenizer" in {r["role"] for r in read_receipts(a.receipts_dir)}  # A's own record keeps it
    assert {r["role"] for r in read_receipts(b.receipts_dir)} == {"scheduler"}
    assert c.fingerprint(b.run) == fresh_b


@pytest.mark.slow
def test_broken_control_one_answers_dir_for_every_contribution_hands_a_s_lines_to_b(env, monkeypatch):
    """Without a dir per contribution, what A wrote there is read as B's: its stray receipt (B's
    evidence would FAIL) and its own answer lines (B's first RPC finds more than one new line: B's
    forging FAIL)."""
    monkeypatch.setattr(resident_timed.TimedEngine, "job_dir", lambda self: self.answers / "start")
    monkeypatch.setattr(resident_timed, "move", lambda src, dst: shutil.copytree(src, dst, symlinks=True))
    monkeypatch.setattr(resident_timed.TimedEngine, "verify", lambda self, run, held: [])
    with TimedPool() as pool:
        runner = c.Runner(env / "stray-broken", pool)
        runner.run(c.bundle("stray_receipt"), scan=False)
        b = runner.run(h.torch_bundle("b"))
    assert b.run.forgery or "detokenizer" in {r["role"] for r in read_receipts(b.receipts_dir)}, b.run.error


@pytest.fixture(scope="module")
def fresh_counter(env):
    with TimedPool() as pool:
        a = c.Runner(env / "fresh-counter", pool).run(c.bundle("global_counter"), scan=False)
    assert not a.run.error and a.post.ok
    return c.fingerprint(a.run)


@pytest.mark.slow
def test_the_same_package_installed_again_starts_from_its_own_source(env, fresh_counter):
    """The incumbent runs in every head-to-head job: installed again, its module globals start
    afresh (the removal purged its modules), so its second job reads as its first."""
    with TimedPool() as pool:
        runner = c.Runner(env / "counter", pool)
        first = runner.run(c.bundle("global_counter"), scan=False)
        again = runner.run(c.bundle("global_counter"), scan=False)
    assert first.post.ok and again.post.reused
    assert c.fingerprint(first.run) == c.fingerprint(again.run) == fresh_counter


@pytest.mark.slow
def test_a_module_the_removal_left_is_named_by_the_post_condition(env):
    """Second layer: a rank whose purge left the modules (KeepModulesEngine) fails the
    post-condition, which names them, so the engine is restarted."""
    with TimedPool() as pool:
        first = c.Runner(env / "counter-kept", pool, "KeepModulesEngine").run(c.bundle("global_counter"), scan=False)
    assert not first.post.ok and any("modules of a contribution" in r for r in first.post.reasons), first.post


@pytest.mark.slow
def test_broken_control_without_the_purge_and_the_post_condition_its_globals_reach_the_next_install(
    env, fresh_counter, monkeypatch
):
    monkeypatch.setattr(resident_timed.TimedEngine, "verify", lambda self, run, held: [])
    with TimedPool() as pool:
        runner = c.Runner(env / "counter-broken", pool, "KeepModulesEngine")
        runner.run(c.bundle("global_counter"), scan=False)
        again = runner.run(c.bundle("global_counter"), scan=False)
    assert again.post.reused and c.fingerprint(again.run) != fresh_counter


# The Triton-cache variant: A ships B's Triton kernel line for line with ACC = tl.float64 (policy-
# clean: a module constant the code generator reads and Triton's key leaves out). A and B are
# installed one after the other in one rank with one cache dir, as in a resident engine; B must
# compile its own binary. Compiled mode only (the fake engine's interpreter has no compile cache).
CHILD = r"""
import sys, types, uuid
from pathlib import Path
try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError:
    print("SKIP no triton"); raise SystemExit(0)
from cacheon_subnet.bundle.archive import bundle_from_files
from cacheon_subnet.bundle.engine_tree import build_tree
from seams import activate, hooks, resident
from seams.dispatch import Registry
from seams.table import seam_environment

KERNEL = '''# RMSNorm accumulating in a module-level dtype.

import torch
import triton
import triton.language as tl

ACC = tl.{acc}


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    x = tl.load(x_ptr + row * H + cols, mask=mask, other=0.0).to(ACC)
    var = tl.sum(x * x, axis=0) / H
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(out_ptr + row * H + cols, (x / tl.sqrt(var + eps) * w).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    T, H = x.shape
    _rmsnorm_kernel[(T,)](x, weight, out, H, eps, BLOCK=triton.next_power_of_2(H))
'''
SIGNATURE = {"x_ptr": "*fp32", "w_ptr": "*fp32", "out_ptr": "*fp32", "H": "i32", "eps": "fp32", "BLOCK": "constexpr"}
salt = uuid.uuid4().hex


def bundle(acc):
    manifest = (f'schema = "cacheon.bundle/2"\n\n[bundle]\nname = "acc-{acc}-{salt}"\n\n'
                '[[ops]]\nslot = "norm.rmsnorm"\nentry = "rmsnorm:rmsnorm"\ndtypes = ["float32"]\n')
    return bundle_from_files({"manifest.toml": manifest.encode(), "rmsnorm.py": KERNEL.format(acc=acc).encode()})


tmp = Path(sys.argv[1])
import os
os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton")  # the resident engine's one cache copy
activate.adapter_hooks = lambda adapter: {}  # no SGLang here: nothing to hook
hooks.install_hooks = lambda hs: None
if sys.argv[2] == "unsalted":  # the broken control: installs without the salt
    activate.salt_kernel_keys = lambda package: 0
for d in ("answers/a", "answers/b", "answers/start", "trees"):
    (tmp / d).mkdir(parents=True)
env = {**seam_environment(("norm",)), "CACHEON_RESIDENT": "1", "CACHEON_RECEIPT_DIR": str(tmp / "answers/start"),
       "CACHEON_RESIDENT_TREES": str(tmp / "trees"), "CACHEON_RESIDENT_ANSWERS": str(tmp / "answers")}
reg = Registry()
assert activate.activate_scheduler(0, reg, env) is True
runner = types.SimpleNamespace(graph_runner=None, piecewise_cuda_graph_runner=None, model=None)
rank = resident.ResidentRank(types.SimpleNamespace(tp_worker=types.SimpleNamespace(model_runner=runner)), 0, reg, env)
target = GPUTarget("cuda", 90, 32)  # compiling needs no GPU (ptxas ships with Triton)
ttir = {}
for who, acc in (("a", "float64"), ("b", "float32")):  # A first, then B, in the same process and cache
    b = bundle(acc)
    tree = build_tree(tmp / "trees" / who, [(b, b.manifest.ops)])
    rank.install({"CACHEON_ENGINE_TREE": str(tree.root), "CACHEON_ENGINE_TREE_DIGEST": tree.digest},
                 str(tmp / "answers" / who), (who * 32)[:31] + "1")
    kernel = sys.modules[f"{tree.ops[0].package}.rmsnorm"]._rmsnorm_kernel
    try:
        ttir[who] = triton.compile(ASTSource(kernel, SIGNATURE, {"BLOCK": 64}), target=target).asm["ttir"]
    except Exception as e:  # a Triton without the CUDA toolchain
        print("NOCOMPILE", repr(e)[:200]); raise SystemExit(0)
    del kernel
    rank.remove((who * 32)[:31] + "2")
print("LEFT", rank.leftovers()["modules"], rank.leftovers()["alive"])
print("BINARY", "own" if "f64" in ttir["a"] and "f64" not in ttir["b"] else "shared")
"""


def _jit_child(tmp: Path, mode: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp), mode], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    if "SKIP" in out.stdout:
        pytest.skip("no triton")
    return out.stdout


@pytest.mark.slow
def test_b_installed_after_a_twin_kernel_compiles_its_own_binary(tmp_path):
    got = _jit_child(tmp_path, "salted")
    assert "LEFT [] []" in got, got
    assert "BINARY own" in got or "NOCOMPILE" in got, got


@pytest.mark.slow
def test_broken_control_without_the_salt_b_runs_a_s_binary(tmp_path):
    got = _jit_child(tmp_path, "unsalted")
    assert "BINARY shared" in got or "NOCOMPILE" in got, got
