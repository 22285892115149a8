"""`cacheon demo`: the whole subnet loop on one machine, no chain and no GPU.

An embedded local chain (SQLite), demo miners that submit the example bundles (honest miners
through `miner submit`, which verifies first; careless ones commit broken controls directly),
served over loopback; independent validators that fetch, screen in the sandbox, time on the
CPU arena (labelled cpu-timing), settle crowns, publish weights and read them back; then one
Yuma epoch over the published vectors. Prints the leaderboard, every verdict with its full
reason and the weight vectors on stdout (logs go to demo.log in the state dir), then checks every
miner's expected outcome on every validator: exit 0 only when all held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet import progress
from cacheon_subnet.log import get_logger
from cacheon_subnet.owned_dir import mark_owned, wipe_owned
from cacheon_subnet.words import ID_NOTE, baseline_name, block, evidence_words, fractions, speed_words, state_label

log = get_logger("cacheon.demo")
REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@dataclass(frozen=True)
class Expect:
    """A machine-checkable outcome for one demo miner, checked against every validator's state."""

    text: str  # what the summary says
    state: str  # the contribution's final state
    reason: str | None = None  # a substring its reason must hold
    outcome: str | None = None  # the settled outcome of its last evidence row

    def miss(self, c: dict[str, Any] | None) -> str | None:
        """None when met, else what was seen instead."""
        if c is None:
            return "no contribution recorded"
        last = c["evidence"][-1]["outcome"] if c["evidence"] else None
        if c["state"] != self.state:
            return f"state {c['state']} (expected {self.state}): {c['reason']}"
        if self.reason is not None and self.reason not in (c["reason"] or ""):
            return f"reason {c['reason']!r} lacks {self.reason!r}"
        if self.outcome is not None and last != self.outcome:
            return f"outcome {last or 'unsettled'} (expected {self.outcome})"
        return None


@dataclass(frozen=True)
class DemoMiner:
    hotkey: str
    bundle: str  # relative to examples/
    honest: bool  # honest miners go through `miner submit` (local verify first)
    expect: Expect


MINERS = (
    DemoMiner(
        "miner-fast",
        "demo/cpu_rmsnorm",
        True,
        Expect("crowned: faithful and faster than the baseline", "qualified", outcome="crowned"),
    ),
    DemoMiner(
        "miner-plain",
        "demo/stock_equivalent",
        True,
        Expect("verified, below the bar (no faster)", "qualified", outcome="below_bar"),
    ),
    DemoMiner(
        "miner-triton",
        "norm.rmsnorm",
        True,
        Expect("verified, below the bar: slower under the CPU interpreter", "qualified", outcome="below_bar"),
    ),
    DemoMiner("miner-wrong", "controls/wrong_math", False, Expect("failed: mismatch", "failed", "mismatch")),
    DemoMiner("miner-partial", "controls/partial_write", False, Expect("failed: partial_write", "failed", "partial_write")),
    DemoMiner("miner-sync", "controls/host_sync", False, Expect("failed: host_sync", "failed", "host_sync")),
    DemoMiner(
        "miner-policy", "controls/policy_violation", False, Expect("failed: policy (never executed)", "failed", "P001")
    ),
    DemoMiner(
        "miner-copycat",
        "demo/cpu_rmsnorm",
        False,
        Expect("failed: duplicate of an earlier commit", "failed", "duplicate of"),
    ),
)
VALIDATORS = (("validator-a", 1000.0), ("validator-b", 400.0))
NETUID = 1
REVEAL_BLOCKS = 3


def _raw_commit(chain: Any, hotkey: str, bundle_dir: Path, serve_dir: Path, base_url: str) -> str:
    """A careless miner: pack and commit without verifying first. Returns the contribution id."""
    from cacheon_subnet.bundle import hotkey_bound_digest, pack
    from cacheon_subnet.bundle.archive import load_bundle
    from cacheon_subnet.chain.commitment import encode

    digest = load_bundle(bundle_dir).digest
    pack(bundle_dir, serve_dir / f"{digest}.tar.gz")
    chain.commit(hotkey, NETUID, encode(digest, hotkey, f"{base_url}/{digest}.tar.gz", chain.url_policy()), REVEAL_BLOCKS)
    return hotkey_bound_digest(digest, hotkey)


def _prepare(state_dir: Path) -> Path:
    """Recreate the state dir (only one the demo made: see owned_dir) and send logs to a file in it,
    so stdout carries the summary alone. Returns the log file."""
    from cacheon_subnet import log as cacheon_log

    wipe_owned(state_dir)
    mark_owned(state_dir)
    log_path = state_dir / "demo.log"
    cacheon_log.configure(file=open(log_path, "a", buffering=1), json=True, force=True)  # noqa: SIM115 - lives as long as the process
    return log_path


def run_demo(state_dir: Path, max_passes: int = 12, verify_cases: int = 2) -> int:
    """Run the loop, print the summary; exit 0 only when every expectation held on every validator."""
    from arena.cpu.qualifier import CpuQualifier
    from cacheon_subnet.bundle import hotkey_bound_digest
    from cacheon_subnet.chain.local import LocalChain
    from cacheon_subnet.miner.serve import start_in_thread
    from cacheon_subnet.miner.submit import submit
    from cacheon_subnet.scoring.weights import WeightPolicy
    from cacheon_subnet.validator.loop import Validator, ValidatorConfig
    from cacheon_subnet.validator.publish import PublishPolicy
    from cacheon_subnet.verify.runner import VerifyOptions

    t0 = time.monotonic()
    log_path = _prepare(state_dir)
    serve_dir = state_dir / "miner-serve"
    serve_dir.mkdir(parents=True)
    chain = LocalChain.create(
        state_dir / "chain.sqlite",
        NETUID,
        owner_hotkey="owner",
        tempo=360,
        weights_version_key=3,
        weights_rate_limit=2,
        seconds_per_block=0,
    )
    for hk, stake in VALIDATORS:
        chain.register(hk, f"{hk}-cold", stake=stake, validator_permit=True)
    for m in MINERS:
        chain.register(m.hotkey, f"{m.hotkey}-cold")
    print(f"== Cacheon demo: local chain {state_dir / 'chain.sqlite'} (netuid {NETUID}) + CPU arena ==")
    print(f"   logs (JSON lines): {log_path}")
    print("\n".join(block("   ids below are contribution ids: ", ID_NOTE)))
    server = start_in_thread(serve_dir)
    try:
        for m in MINERS:
            bundle = EXAMPLES / m.bundle
            if m.honest:
                r = submit(
                    bundle,
                    backend=chain,
                    netuid=NETUID,
                    hotkey=m.hotkey,
                    serve_dir=serve_dir,
                    base_url=server.base_url,
                    reveal_after_blocks=REVEAL_BLOCKS,
                    state_dir=state_dir / "miners" / m.hotkey,
                    verify_options=VerifyOptions(max_cases=verify_cases),  # as deep as the validators' screen
                )
                cid = hotkey_bound_digest(r.digest, m.hotkey)
            else:
                cid = _raw_commit(chain, m.hotkey, bundle, serve_dir, server.base_url)
            print(f"  commit  {m.hotkey:14} {cid[:12]}  examples/{m.bundle}")
            chain.advance(1)  # one block per commit: commit order is priority order
        chain.advance(REVEAL_BLOCKS + 1)
        validators = []
        for hk, _ in VALIDATORS:
            cfg = ValidatorConfig(
                netuid=NETUID,
                hotkey=hk,
                state_dir=state_dir / hk,
                verify_max_cases=verify_cases,
                interval_s=0,
                settle_hold_blocks=2,
                retry_base_s=0.0,
                # a shared laptop or CI runner: a noisy measurement is re-taken
                # (up to 3 times) rather than settled as no decision
                max_remeasure=3,
                publish=PublishPolicy(interval_blocks=1),
                weights=WeightPolicy(),
            )
            validators.append((hk, Validator(cfg, chain, CpuQualifier())))
        with progress.bar(desc="validator passes", total=max_passes, unit="pass") as passes:
            for n in range(max_passes):
                idle = True
                for hk, v in validators:
                    s = v.run_once()
                    idle &= s.idle and s.weights in (None, "unchanged", "verified")
                    log.info("demo.pass", validator=hk, n=n, moved=s.moved, crowns=s.crowns_changed, weights=s.weights)
                chain.advance(2)  # past the weights rate limit
                passes.update(1)
                if idle and n >= 2:
                    break
        for _, v in validators:
            v.close()
    finally:
        server.stop()
    text, misses = render(state_dir, chain)
    print(text)
    print(f"({time.monotonic() - t0:.0f} s; inspect with: {_cacheon()} status --state-dir {state_dir / VALIDATORS[0][0]})")
    return 1 if misses else 0


def _cacheon() -> str:
    """How to run `cacheon` from here: on PATH, else the interpreter's own venv script."""
    if shutil.which("cacheon"):
        return "cacheon"
    script = Path(sys.executable).parent / "cacheon"
    return str(script) if script.is_file() else f"{sys.executable} -m cacheon_subnet.cli"


def check_expectations(reports: dict[str, dict[str, Any]]) -> tuple[list[str], int]:
    """Every miner's Expect against every validator's state, and the validators' crowns against
    each other. Returns the lines to print and the number of misses."""
    lines, misses = ["", "Expectations (checked on every validator)"], 0
    for m in MINERS:
        seen = {
            hk: m.expect.miss({c["hotkey"]: c for c in rep["contributions"]}.get(m.hotkey)) for hk, rep in reports.items()
        }
        bad = {hk: why for hk, why in seen.items() if why}
        misses += bool(bad)
        lines.append(f"  {'ok  ' if not bad else 'MISS'}  {m.hotkey:14} {m.expect.text}")
        for hk, why in bad.items():
            lines += block(f"          {hk}: ", why)
    names = list(reports)
    first = {c["target"]: c["hotkey"] for c in reports[names[0]]["crowns"]}
    for hk in names[1:]:
        other = {c["target"]: c["hotkey"] for c in reports[hk]["crowns"]}
        if other == first:
            lines.append(f"  ok    {hk} settled the same crowns independently")
        else:
            misses += 1
            diff = {
                t: (first.get(t, "-"), other.get(t, "-"))
                for t in sorted(set(first) | set(other))
                if first.get(t) != other.get(t)
            }
            lines.append(
                f"  MISS  {hk} settled DIFFERENT crowns from {names[0]}: "
                + ", ".join(f"{t}: {a} vs {b}" for t, (a, b) in diff.items())
            )
    lines.append(f"  {'all expectations held' if not misses else f'{misses} expectation(s) missed: exit 1'}")
    return lines, misses


def render(state_dir: Path, chain: Any) -> tuple[str, int]:
    """The summary (leaderboard, verdicts with full reasons, weights as fractions, Yuma) and the
    number of missed expectations."""
    from cacheon_subnet.scoring.yuma import yuma_epoch
    from cacheon_subnet.slots import all_slots
    from cacheon_subnet.validator.status import collect

    meta = chain.metagraph(NETUID)
    name = {n.uid: n.hotkey for n in meta.neurons}
    reports = {hk: collect(state_dir / hk) for hk, _ in VALIDATORS}
    first = reports[VALIDATORS[0][0]]
    lines = [
        "",
        "Leaderboard (crowns per target; arena: cpu-timing = slot-level CPU timing against the fp32 reference, advisory)",
    ]
    crowns = {c["target"]: c for c in first["crowns"]}
    for spec in all_slots():
        c = crowns.get(spec.id)
        if c:
            lines.append(
                f"  {spec.id:30} {c['hotkey']:14} {speed_words(float(c['speedup_vs_stock']), baseline_name(c['arena_id']))}"
                f"   ({c['contribution_id'][:12]})"
            )
        else:
            lines.append(f"  {spec.id:30} {'-':14} uncrowned: its share burns to the owner")
    lines += ["", f"Verdicts ({VALIDATORS[0][0]})"]
    for c in first["contributions"]:
        shown = state_label(c["state"], [e.get("outcome") for e in c["evidence"]])  # never "qualified" below the bar
        head = f"  {c['hotkey']:14} {shown:13} "
        ev = "; ".join(f"{e['target']}: {evidence_words(e)}" for e in c["evidence"][-1:])
        lines += block(head, ev or c["reason"] or "")
    lines += ["", "Weights published and read back from the chain (fractions)"]
    for hk, stake in VALIDATORS:
        w = reports[hk]["weights"]
        if not w:
            lines.append(f"  {hk} (stake {stake:.0f}): none published")
            continue
        vec = "  ".join(f"{name.get(u, u)}={f:.3f}" for u, f in zip(w["uids"], fractions(w["vals"])))
        lines.append(f"  {hk} (stake {stake:.0f}) [{w['state']}, version key {w['version_key']}]: {vec}")
    hotkeys, stakes, matrix = chain.weights_matrix(NETUID)
    if matrix and any(any(r) for r in matrix):
        y = yuma_epoch([list(r) for r in matrix], list(stakes))
        lines += ["", "Yuma epoch over the published weights (incentive per uid)"]
        ranked = sorted(((float(v), u) for u, v in enumerate(y.incentive) if v > 0), reverse=True)
        lines += [f"  uid {u:2} {name.get(u, '?'):14} incentive {v:.3f}" for v, u in ranked]
        lines += ["  dividends: " + "  ".join(f"{h}={float(d):.3f}" for h, d in zip(hotkeys, y.dividends))]
    checks, misses = check_expectations(reports)
    return "\n".join(lines + checks), misses


def _cmd(args: argparse.Namespace) -> int:
    return run_demo(Path(args.state_dir), max_passes=args.max_passes, verify_cases=args.verify_cases)


def register(sub: Any, groups: dict[str, Any]) -> None:
    p = sub.add_parser("demo", help="the whole loop on an embedded local chain + CPU arena (no GPU, no network)")
    p.add_argument(
        "--state-dir",
        default=".cacheon/demo",
        help="recreated on every run (only if the demo created it: it refuses an unmarked non-empty dir)",
    )
    p.add_argument("--max-passes", type=int, default=12, help="validator passes before the demo gives up")
    p.add_argument(
        "--verify-cases",
        type=int,
        default=2,
        help="workload shapes per dtype in every verify (the miners' own check before submitting and the validators' screen)",
    )
    p.set_defaults(handler=_cmd)
