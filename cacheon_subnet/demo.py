"""`cacheon demo`: the whole subnet loop on one machine, no chain and no GPU.

An embedded local chain (SQLite), demo miners that submit the example bundles (honest miners
through `miner submit`, which verifies first; careless ones commit broken controls directly),
served over loopback; independent validators that fetch, screen in the sandbox, time on the
CPU arena (labelled cpu-timing), settle crowns, publish weights and read them back; then one
Yuma epoch over the published vectors. Prints the leaderboard, every verdict with its reason
and the weight vectors.
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet.log import get_logger

log = get_logger("cacheon.demo")
REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@dataclass(frozen=True)
class DemoMiner:
    hotkey: str
    bundle: str  # relative to examples/
    honest: bool  # honest miners go through `miner submit` (local verify first)
    expect: str  # what the demo shows


MINERS = (
    DemoMiner("miner-fast", "demo/cpu_rmsnorm", True, "crowned: faithful and faster than the baseline"),
    DemoMiner("miner-plain", "demo/stock_equivalent", True, "verified, below the bar (no faster)"),
    DemoMiner("miner-triton", "norm.rmsnorm", True, "verified; slower under the CPU interpreter"),
    DemoMiner("miner-wrong", "controls/wrong_math", False, "failed: mismatch"),
    DemoMiner("miner-partial", "controls/partial_write", False, "failed: partial_write"),
    DemoMiner("miner-sync", "controls/host_sync", False, "failed: host_sync"),
    DemoMiner("miner-policy", "controls/policy_violation", False, "failed: policy (never executed)"),
    DemoMiner("miner-copycat", "demo/cpu_rmsnorm", False, "failed: duplicate of an earlier commit"),
)
VALIDATORS = (("validator-a", 1000.0), ("validator-b", 400.0))
NETUID = 1
REVEAL_BLOCKS = 3


def _raw_commit(chain: Any, hotkey: str, bundle_dir: Path, serve_dir: Path, base_url: str) -> str:
    """A careless miner: pack and commit without verifying first."""
    from cacheon_subnet.bundle import pack
    from cacheon_subnet.bundle.archive import load_bundle
    from cacheon_subnet.chain.commitment import encode

    digest = load_bundle(bundle_dir).digest
    pack(bundle_dir, serve_dir / f"{digest}.tar.gz")
    chain.commit(hotkey, NETUID, encode(digest, hotkey, f"{base_url}/{digest}.tar.gz", chain.url_policy()),
                 REVEAL_BLOCKS)
    return digest


def run_demo(state_dir: Path, max_passes: int = 12, verify_cases: int = 2) -> int:
    from cacheon_subnet.chain.local import LocalChain
    from cacheon_subnet.miner.serve import start_in_thread
    from cacheon_subnet.miner.submit import submit
    from cacheon_subnet.scoring.weights import WeightPolicy
    from cacheon_subnet.validator.loop import Validator, ValidatorConfig
    from cacheon_subnet.validator.publish import PublishPolicy
    from cacheon_subnet.validator.qualify import CpuQualifier

    t0 = time.monotonic()
    if state_dir.exists():
        shutil.rmtree(state_dir)
    serve_dir = state_dir / "miner-serve"
    serve_dir.mkdir(parents=True)
    chain = LocalChain.create(state_dir / "chain.sqlite", NETUID, owner_hotkey="owner", tempo=360,
                              weights_version_key=3, weights_rate_limit=2, seconds_per_block=0)
    for hk, stake in VALIDATORS:
        chain.register(hk, f"{hk}-cold", stake=stake, validator_permit=True)
    for m in MINERS:
        chain.register(m.hotkey, f"{m.hotkey}-cold")
    print(f"== Cacheon demo: local chain {state_dir / 'chain.sqlite'} (netuid {NETUID}) + CPU arena ==")
    server = start_in_thread(serve_dir)
    try:
        for m in MINERS:
            bundle = EXAMPLES / m.bundle
            if m.honest:
                r = submit(bundle, backend=chain, netuid=NETUID, hotkey=m.hotkey, serve_dir=serve_dir,
                           base_url=server.base_url, reveal_after_blocks=REVEAL_BLOCKS,
                           state_dir=state_dir / "miners" / m.hotkey)
                digest = r.digest
            else:
                digest = _raw_commit(chain, m.hotkey, bundle, serve_dir, server.base_url)
            print(f"  commit  {m.hotkey:14} {digest[:12]}  examples/{m.bundle:28} ({m.expect})")
            chain.advance(1)  # one block per commit: commit order is priority order
        chain.advance(REVEAL_BLOCKS + 1)
        validators = []
        for hk, _ in VALIDATORS:
            cfg = ValidatorConfig(netuid=NETUID, hotkey=hk, state_dir=state_dir / hk, verify_max_cases=verify_cases,
                                  interval_s=0, settle_hold_blocks=2, retry_base_s=0.0,
                                  publish=PublishPolicy(interval_blocks=1), weights=WeightPolicy())
            validators.append((hk, Validator(cfg, chain, CpuQualifier())))
        for n in range(max_passes):
            idle = True
            for hk, v in validators:
                s = v.run_once()
                idle &= s.idle and s.weights in (None, "unchanged", "verified")
                log.info("demo.pass", validator=hk, n=n, moved=s.moved, crowns=s.crowns_changed, weights=s.weights)
            chain.advance(2)  # past the weights rate limit
            if idle and n >= 2:
                break
        for _, v in validators:
            v.close()
    finally:
        server.stop()
    print(render(state_dir, chain))
    print(f"({time.monotonic() - t0:.0f} s; inspect with: cacheon status --state-dir {state_dir / VALIDATORS[0][0]})")
    return 0


def render(state_dir: Path, chain: Any) -> str:
    from cacheon_subnet.scoring.yuma import yuma_epoch
    from cacheon_subnet.slots import all_slots
    from cacheon_subnet.validator.status import collect

    meta = chain.metagraph(NETUID)
    name = {n.uid: n.hotkey for n in meta.neurons}
    reports = {hk: collect(state_dir / hk) for hk, _ in VALIDATORS}
    first = reports[VALIDATORS[0][0]]
    lines = ["", "Leaderboard (crowns per target; arena: cpu-timing = slot-level CPU timing, advisory)"]
    crowns = {c["target"]: c for c in first["crowns"]}
    for spec in all_slots():
        c = crowns.get(spec.id)
        if c:
            lines.append(f"  {spec.id:24} {c['hotkey']:14} {float(c['speedup_vs_stock']):6.3f}x vs stock   ({c['contribution_id'][:12]})")
        else:
            lines.append(f"  {spec.id:24} {'-':14} uncrowned: its share burns to the owner")
    lines += ["", f"Verdicts ({VALIDATORS[0][0]})"]
    for c in first["contributions"]:
        ev = "; ".join(f"{e['target']} {e['verdict']} {float(e['speedup'] or 0):.3f}x -> {e['outcome'] or 'unsettled'}"
                       for e in c["evidence"])
        why = c["reason"] or ""
        lines.append(f"  {c['hotkey']:14} {c['state']:10} {(ev or why)[:150]}")
    for hk, _ in VALIDATORS[1:]:
        other = {c["target"]: c["hotkey"] for c in reports[hk]["crowns"]}
        same = other == {t: c["hotkey"] for t, c in crowns.items()}
        lines.append(f"  {hk} settled {'the same crowns' if same else f'DIFFERENT crowns: {other}'} independently")
    lines += ["", "Weights published and read back from the chain"]
    for hk, stake in VALIDATORS:
        w = reports[hk]["weights"]
        if not w:
            lines.append(f"  {hk} (stake {stake:.0f}): none published")
            continue
        total = sum(w["vals"]) or 1
        vec = "  ".join(f"{name.get(u, u)}={v / total:.3f}" for u, v in zip(w["uids"], w["vals"]))
        lines.append(f"  {hk} (stake {stake:.0f}) [{w['state']}, version key {w['version_key']}]: {vec}")
    hotkeys, stakes, matrix = chain.weights_matrix(NETUID)
    if matrix and any(any(r) for r in matrix):
        y = yuma_epoch([list(r) for r in matrix], list(stakes))
        lines += ["", "Yuma epoch over the published weights (incentive per uid)"]
        ranked = sorted(((float(v), u) for u, v in enumerate(y.incentive) if v > 0), reverse=True)
        lines += [f"  uid {u:2} {name.get(u, '?'):14} incentive {v:.3f}" for v, u in ranked]
        lines += ["  dividends: " + "  ".join(f"{h}={float(d):.3f}" for h, d in zip(hotkeys, y.dividends))]
    return "\n".join(lines)


def _cmd(args: argparse.Namespace) -> int:
    return run_demo(Path(args.state_dir), max_passes=args.max_passes, verify_cases=args.verify_cases)


def register(sub: Any, groups: dict[str, Any]) -> None:
    p = sub.add_parser("demo", help="the whole loop on an embedded local chain + CPU arena (no GPU, no network)")
    p.add_argument("--state-dir", default=".cacheon/demo", help="wiped and recreated on every run")
    p.add_argument("--max-passes", type=int, default=12)
    p.add_argument("--verify-cases", type=int, default=2, help="workload shapes per dtype in screening")
    p.set_defaults(handler=_cmd)
