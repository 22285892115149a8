#!/usr/bin/env python3
"""The validator's own GPU path end to end on one box (issue 16, item 1). Measured on one H200
(2026-12-02, docs/benchmarks.md "Validator GPU end to end": 445 s product phase, 443 s TEST
crown); its CPU dry run (--engine-factory, tests/arena/test_gpu_e2e.py) checks only the
plumbing. Record real runs in docs/benchmarks.md.

    python scripts/gpu_e2e.py --config configs/arena/dense.toml --out e2e.json \
        [--work /var/tmp/cacheon-e2e] [--crown-bundle examples/norm.rmsnorm] \
        [--fail-bundle examples/controls/wrong_math] [--handicap-us 2000]

A local chain (SQLite) and miners that commit packed bundles served over loopback, then:
  phase "product": `neurons/validator.py --chain local --arena CONFIG --screen-device cuda --once`
      (the CLI an operator runs, its start-up checks included), pass after pass until idle: the
      failing bundle ends FAIL with its reason; the crown bundle gets the GPU arena's real verdict.
  phase "champion" (not in the default): the product path with one miner committing
      --champion-bundle (default examples/attention.decode, a real kernel the arena crowned on the
      H200): its crown, the weights and their read-back with no control involved.
  phase "test-handicap": the same loop (in-process Validator, same stages) whose qualifier is
      the GPU arena running the HANDICAP CONTROL for the committed bundle's slot (B/B′ = stock +
      a GPU spin per call, C = stock): a known speedup, so the crown, the weights and their
      read-back are exercised. Every record of this phase is labelled "TEST:handicap-control":
      it crowns the arena's control, not the bundle, until a champion bundle exists.
At the end: the chain's weights read back, `cacheon status` of each state dir, all in --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TEST_LABEL = "TEST:handicap-control"
VALIDATOR = "e2e-validator"
NETUIDS = {"product": 1, "test-handicap": 2, "champion": 3}
DEFAULT_PHASES = "product,test-handicap"


def _commit(chain: Any, netuid: int, hotkey: str, bundle_dir: Path, serve_dir: Path, base_url: str) -> str:
    from cacheon_subnet.bundle import pack
    from cacheon_subnet.bundle.archive import load_bundle
    from cacheon_subnet.chain.commitment import encode

    digest = load_bundle(bundle_dir).digest
    pack(bundle_dir, serve_dir / f"{digest}.tar.gz")
    chain.commit(hotkey, netuid, encode(digest, hotkey, f"{base_url}/{digest}.tar.gz", chain.url_policy()), 1)
    return digest


def _report(state_dir: Path, chain: Any, netuid: int) -> dict[str, Any]:
    from cacheon_subnet.validator import status
    from cacheon_subnet.validator.state import StateError

    try:
        rep: Any = status.collect(state_dir)
    except StateError as e:  # the validator died before writing state: keep its output, not this trace
        rep = {"error": str(e)}
    cli = subprocess.run(
        [sys.executable, "-m", "cacheon_subnet.cli", "status", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    return {
        "status": rep,
        "status_text": cli.stdout[-6000:],
        "status_rc": cli.returncode,
        "chain_weights": {str(k): v for k, v in chain.get_weights(netuid, VALIDATOR).items()},
    }


def product_phase(a: argparse.Namespace, chain_path: Path, state: Path, netuid: int) -> dict[str, Any]:
    """neurons/validator.py --once, pass after pass, as an operator runs it."""
    argv = [
        sys.executable,
        str(REPO / "neurons" / "validator.py"),
        "--netuid",
        str(netuid),
        "--chain",
        "local",
        "--local-chain",
        str(chain_path),
        "--wallet.hotkey",
        VALIDATOR,
        "--state-dir",
        str(state),
        "--once",
        "--arena",
        "cpu" if a.engine_factory else a.config,  # the CLI cannot take a fake engine
        "--screen-device",
        "cpu" if a.engine_factory else a.screen_device,
    ]
    passes = []
    t0 = time.monotonic()
    for n in range(a.max_passes):
        t = time.monotonic()
        # the pass's output goes to files beside the state dir as it is written: a run killed at
        # the device call's limit still leaves what the validator was doing (2026-12-03: it did not)
        out_log, err_log = state.parent / f"{state.name}-pass{n + 1}.out", state.parent / f"{state.name}-pass{n + 1}.log"
        with out_log.open("w") as fo, err_log.open("w") as fe:
            r = subprocess.run(argv, stdout=fo, stderr=fe, text=True, cwd=REPO, timeout=a.pass_timeout_s)
        stdout, stderr = out_log.read_text(), err_log.read_text()
        summary = json.loads(stdout) if r.returncode in (0, 1) and stdout.strip() else None
        passes.append(
            {
                "rc": r.returncode,
                "wall_s": round(time.monotonic() - t, 1),
                "summary": summary,
                "stderr_tail": stderr[-3000:] if summary is None else "",
                "log": str(err_log),
            }
        )
        if summary is None or summary.get("idle"):
            break
    return {"argv": argv, "passes": passes, "wall_s": round(time.monotonic() - t0, 1)}


@dataclass(frozen=True)
class _HandicapQualifier:
    """TEST ONLY: the GPU arena runs the handicap control for the committed op's slot."""

    inner: Any
    handicap_us: float
    engine_factory: str | None
    label: str = TEST_LABEL
    head_to_head: bool = False

    @property
    def arena_id(self) -> str:
        return self.inner.arena_id + "-test-handicap"

    def qualify(self, bundle: Any, op: Any, incumbent: Any) -> Any:
        from arena.qualifier import to_qualify_result
        from arena.run import run_arena, stock_control_op

        opts = self.inner.options(bundle, op)
        opts = replace(
            opts,
            workdir=opts.workdir.parent / f"test-handicap-{op.slot}",
            control="handicap",
            handicap_us=self.handicap_us,
            engine_factory=self.engine_factory,
        )
        result = run_arena(self.inner.config, None, stock_control_op(op.slot), opts)
        return to_qualify_result(result, op, incumbent, self.arena_id, self.label)


def _test_config(a: argparse.Namespace, work: Path) -> str:
    """The test phase's arena: --config itself, or with --test-cycles a copy with fewer timed cycles
    in the resident and the confirmation engine (so the four engines of a crown fit one device
    call), named as a TEST arena (its own id)."""
    if not a.test_cycles:
        return a.config
    import re

    text = Path(a.config).read_text()
    text, n = re.subn(r"(?m)^cycles\s*=\s*\d+", f"cycles = {int(a.test_cycles)}", text, count=1)
    text, m = re.subn(r'(?m)^name\s*=\s*"([^"]*)"', r'name = "\1-TEST-e2e"', text, count=1)
    text = re.sub(r"(?m)^confirm_cycles\s*=.*\n", "", text)  # the fresh engine's re-measure: as short
    text, k = re.subn(
        r"(?m)^\[speed\][^\n]*\n", lambda mt: mt.group(0) + f"confirm_cycles = {int(a.test_cycles)}\n", text, count=1
    )
    if not (n and m and k):
        raise SystemExit(f"--test-cycles: {a.config} has no top-level name / [workload] cycles / [speed] line to change")
    out = work / "test-arena.toml"
    out.write_text(f"# TEST ONLY (scripts/gpu_e2e.py --test-cycles): {a.config} with {a.test_cycles} cycles\n" + text)
    return str(out)


def test_phase(a: argparse.Namespace, chain: Any, state: Path) -> dict[str, Any]:
    from arena import GpuQualifier, load_config
    from cacheon_subnet.scoring.settle import SpeedPolicy
    from cacheon_subnet.validator.loop import Validator, ValidatorConfig
    from cacheon_subnet.validator.publish import PublishPolicy

    arena_config = _test_config(a, state.parent)
    q = _HandicapQualifier(GpuQualifier(load_config(arena_config)), a.handicap_us, a.engine_factory)
    speed = replace(
        SpeedPolicy(),
        max_noise=a.settle_max_noise or SpeedPolicy().max_noise,
        max_speedup=a.settle_max_speedup or SpeedPolicy().max_speedup,
    )
    cfg = ValidatorConfig(
        netuid=NETUIDS["test-handicap"],
        hotkey=VALIDATOR,
        state_dir=state,
        interval_s=0,
        screen_device="cpu" if a.engine_factory else "cuda",
        retry_base_s=0.0,
        speed=speed,
        settle_hold_blocks=1,
        publish=PublishPolicy(interval_blocks=1),
    )
    v = Validator(cfg, chain, q)
    passes = []
    t0 = time.monotonic()
    try:
        for _ in range(a.max_passes):
            s = v.run_once()
            passes.append({k: getattr(s, k) for k in ("block", "moved", "crowns_changed", "weights", "chain_error")})
            chain.advance(1)
            if s.idle and s.weights in ("verified", "unchanged"):
                break
    finally:
        v.close()
    return {
        "passes": passes,
        "wall_s": round(time.monotonic() - t0, 1),
        "label": TEST_LABEL,
        "arena_config": arena_config,
        "settle_policy": {"max_noise": speed.max_noise, "max_speedup": speed.max_speedup},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the validator's GPU path end to end (local chain, loopback miners)")
    ap.add_argument("--config", default=str(REPO / "configs" / "arena" / "dense.toml"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/var/tmp/cacheon-e2e", help="wiped only if this script created it")
    ap.add_argument("--crown-bundle", default=str(REPO / "examples" / "norm.rmsnorm"))
    ap.add_argument("--fail-bundle", default=str(REPO / "examples" / "controls" / "wrong_math"))
    ap.add_argument(
        "--handicap-us",
        type=float,
        default=200.0,
        help="spin per baseline call; pick it so the end-to-end ratio stays under settle's "
        "max_speedup (3.0), else the crown is re-measured as implausible (value not yet measured)",
    )
    ap.add_argument("--settle-max-noise", type=float, default=None, help="test phase only (CPU dry runs)")
    ap.add_argument("--settle-max-speedup", type=float, default=None, help="test phase only (CPU dry runs)")
    ap.add_argument(
        "--champion-bundle",
        default=str(REPO / "examples" / "attention.decode"),
        help="phase champion: the one bundle committed (the H200 crowned this one at C/B 1.29)",
    )
    ap.add_argument(
        "--phases",
        default=DEFAULT_PHASES,
        help=f"comma list of {', '.join(NETUIDS)} (one device call each fits under 10 minutes)",
    )
    ap.add_argument(
        "--test-cycles",
        type=int,
        help="test phase only: its arena runs this many timed cycles "
        "(a TEST-named copy of --config, so a crown's four engines fit one device call)",
    )
    ap.add_argument(
        "--screen-device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="the validator's verify screen (product and champion phases); the validator's own "
        "default is cpu. cuda screens at the arena's shapes (attention.decode: > 320 s on the "
        "H200, 2026-12-03), cpu in the Triton interpreter at CPU shapes (~130 s on a 2-core box)",
    )
    ap.add_argument("--max-passes", type=int, default=8)
    ap.add_argument("--pass-timeout-s", type=float, default=3600.0)
    ap.add_argument("--engine-factory", help="tests only: a CPU stand-in engine (module:Class); no GPU number")
    a = ap.parse_args(argv)
    phases = [p for p in a.phases.split(",") if p]
    if not phases or any(p not in NETUIDS for p in phases):
        ap.error(f"--phases {a.phases!r}: expected a comma list of {', '.join(NETUIDS)}")

    from cacheon_subnet.chain.local import LocalChain
    from cacheon_subnet.miner.serve import start_in_thread
    from cacheon_subnet.owned_dir import mark_owned, wipe_owned

    work = Path(a.work)
    wipe_owned(work)  # refuses a dir it did not create
    mark_owned(work)
    serve = work / "serve"
    serve.mkdir()
    out: dict[str, Any] = {
        "script": "scripts/gpu_e2e.py",
        "config": a.config,
        "handicap_us": a.handicap_us,
        "mode": "fake-engine CPU dry run (no GPU number)" if a.engine_factory else "gpu",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "phases": {},
    }
    from cacheon_subnet.validator.startup import identity

    out["identity"] = identity()
    server = start_in_thread(serve)
    try:
        for phase, netuid in NETUIDS.items():
            if phase not in phases:
                continue
            chain_path = work / f"chain-{phase}.sqlite"
            chain = LocalChain.create(chain_path, netuid, owner_hotkey="owner", weights_rate_limit=1, seconds_per_block=0)
            chain.register(VALIDATOR, "e2e-cold", stake=1000.0, validator_permit=True)
            miners = {"miner-crown": Path(a.crown_bundle), "miner-fail": Path(a.fail_bundle)}
            if phase == "champion":  # a real contribution crowned by the product path, nothing else
                miners = {"miner-champion": Path(a.champion_bundle)}
            if phase == "product" and a.engine_factory:
                miners.pop("miner-crown")  # CPU timing of an interpreted Triton bundle: minutes, no signal
            if phase == "test-handicap":
                miners.pop("miner-fail")  # its FAIL is the product phase's; one arena verdict fits one call
            commits = {}
            for hk, bundle in miners.items():
                chain.register(hk, f"{hk}-cold")
                commits[hk] = _commit(chain, netuid, hk, bundle, serve, server.base_url)
                chain.advance(1)
            chain.advance(2)
            state = work / f"state-{phase}"
            ran = test_phase(a, chain, state) if phase == "test-handicap" else product_phase(a, chain_path, state, netuid)
            out["phases"][phase] = {"netuid": netuid, "commits": commits, **ran, **_report(state, chain, netuid)}
            chain.close()
    finally:
        server.stop()
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    broken = False
    for phase, p in out["phases"].items():
        print(f"== {phase} ({p.get('label', 'product path')}): {p['wall_s']} s, weights on chain {p['chain_weights']}")
        print(p["status_text"])
        for i, ps in enumerate(p.get("passes", [])):
            if ps.get("stderr_tail"):  # a pass that printed no summary (the validator crashed): say why
                broken = True
                print(f"pass {i + 1}: rc {ps['rc']}, no summary; stderr tail:\n{ps['stderr_tail']}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
