"""`cacheon chain local create | register | advance | show`: a chain on one machine.

The README's miner flow (init, verify, pack, submit, a validator pass, status) needs a chain to
commit to and a validator to judge; these verbs drive the embedded SQLite LocalChain the demo and
tests use, so the whole flow runs on a laptop. Every verb takes `--local-chain PATH` (env
CACHEON_LOCAL_CHAIN, the same flag and variable `cacheon miner ...` read).

Local defaults differ from subtensor on purpose: blocks do not advance with wall time
(`--seconds-per-block 0`; move them with `advance`) and the weights rate limit is 1 block, so a
validator pass can publish right away. Pass the subtensor values to rehearse real timing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cacheon_subnet.cliout import PLAIN, Exit, emit
from cacheon_subnet.env import LOCAL_CHAIN
from cacheon_subnet.errors import UsageError


def _path(args: argparse.Namespace) -> Path:
    if not args.local_chain:
        raise UsageError(f"no chain file: pass --local-chain PATH or set ${LOCAL_CHAIN.name}")
    return Path(args.local_chain)


def _open(args: argparse.Namespace) -> Any:
    from cacheon_subnet.chain.backend import ChainUnavailable
    from cacheon_subnet.chain.local import LocalChain

    path = _path(args)
    try:
        return LocalChain.open(path)
    except ChainUnavailable as exc:
        raise UsageError(str(exc)) from None


def cmd_create(args: argparse.Namespace) -> int:
    from cacheon_subnet.chain.backend import ChainError
    from cacheon_subnet.chain.local import LocalChain

    path = _path(args)
    if path.exists():
        raise UsageError(f"{path}: already exists; `cacheon chain local show --local-chain {path}` reads it")
    try:
        chain = LocalChain.create(
            path,
            args.netuid,
            owner_hotkey=args.owner,
            tempo=args.tempo,
            weights_version_key=args.version_key,
            weights_rate_limit=args.weights_rate_limit,
            seconds_per_block=args.seconds_per_block,
        )
    except ChainError as exc:
        raise UsageError(f"{path}: {exc}") from None
    block = chain.current_block()
    emit(
        args,
        {"chain": str(path), "netuid": args.netuid, "owner": args.owner, "block": block},
        f"created local chain {path}: netuid {args.netuid}, owner {args.owner!r} is uid 0, block {block}\n"
        f"next: cacheon chain local register HOTKEY --local-chain {path}",
        PLAIN,
    )
    return Exit.OK


def cmd_register(args: argparse.Namespace) -> int:
    from cacheon_subnet.chain.backend import ChainError

    chain = _open(args)
    netuid = chain.default_netuid if args.netuid is None else args.netuid
    try:
        uid = chain.register(
            args.hotkey,
            args.coldkey or f"{args.hotkey}-cold",
            stake=args.stake,
            validator_permit=args.validator,
            netuid=netuid,
        )
    except ChainError as exc:
        raise UsageError(f"register {args.hotkey}: {exc}") from None
    role = f"validator (stake {args.stake:g})" if args.validator else "miner"
    emit(
        args,
        {"hotkey": args.hotkey, "uid": uid, "netuid": netuid, "validator": args.validator, "stake": args.stake},
        f"registered {args.hotkey!r} as uid {uid} on netuid {netuid}: {role}",
        PLAIN,
    )
    return Exit.OK


def cmd_advance(args: argparse.Namespace) -> int:
    if args.blocks < 0:
        raise UsageError(f"advance: {args.blocks} blocks; blocks never go back")
    block = _open(args).advance(args.blocks)
    emit(args, {"block": block}, f"block {block}", PLAIN)
    return Exit.OK


def cmd_show(args: argparse.Namespace) -> int:
    chain = _open(args)
    netuid = chain.default_netuid if args.netuid is None else args.netuid
    meta = chain.metagraph(netuid)
    commits = chain.revealed_commitments(netuid)
    weights = {n.hotkey: chain.get_weights(netuid, n.hotkey) for n in meta.neurons}
    payload = {
        "chain": str(chain.path) if hasattr(chain, "path") else args.local_chain,
        "netuid": netuid,
        "block": meta.block,
        "tempo": chain.tempo(netuid),
        "weights_version_key": chain.weights_version_key(netuid),
        "weights_rate_limit": chain.weights_rate_limit(netuid),
        "neurons": [
            {
                "uid": n.uid,
                "hotkey": n.hotkey,
                "coldkey": n.coldkey,
                "stake": n.stake,
                "validator_permit": n.validator_permit,
            }
            for n in meta.neurons
        ],
        "revealed_commitments": [
            {
                "hotkey": c.hotkey,
                "uid": c.uid,
                "commit_block": c.commit_block,
                "reveal_block": c.reveal_block,
                "data": c.data,
            }
            for c in commits
        ],
        "weights": {hk: {str(u): w for u, w in row.items()} for hk, row in weights.items() if row},
    }
    lines = [
        f"local chain {args.local_chain}: netuid {netuid}, block {meta.block} (tempo {payload['tempo']}, "
        f"weights version key {payload['weights_version_key']}, rate limit {payload['weights_rate_limit']} blocks)",
        "neurons:",
    ]
    name = {n.uid: n.hotkey for n in meta.neurons}
    for n in meta.neurons:
        role = f"validator, stake {n.stake:g}" if n.validator_permit else ("owner" if n.uid == 0 else "miner")
        lines.append(f"  uid {n.uid:<3} {n.hotkey:20} {role}")
    lines.append(f"revealed commitments ({len(commits)}; sealed ones stay hidden until their reveal block):")
    lines += [f"  {c.hotkey:20} committed @{c.commit_block}, revealed @{c.reveal_block}: {c.data}" for c in commits]
    lines.append("weights (fractions of each setter's row):")
    for hk, row in weights.items():
        if row:
            lines.append(f"  {hk:20} " + ", ".join(f"{name.get(u, u)}={w:.3f}" for u, w in sorted(row.items())))
    if not any(weights.values()):
        lines.append("  none set yet")
    emit(args, payload, "\n".join(lines), PLAIN)
    return Exit.OK


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--local-chain", default=LOCAL_CHAIN.get(), help=f"the chain's SQLite file (env {LOCAL_CHAIN.name})")
    p.add_argument("--json", action="store_true")


def register(sub: Any, groups: dict[str, Any]) -> None:
    """cli.EXTENSIONS hook: `cacheon chain local ...`."""
    chain = sub.add_parser("chain", help="chain tools (a local chain for trying the whole flow on one machine)")
    kinds = chain.add_subparsers(dest="chain_cmd", required=True)
    local = kinds.add_parser(
        "local",
        help="the embedded SQLite chain: create, register, advance, show",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = local.add_subparsers(dest="local_cmd", required=True)

    s = verbs.add_parser("create", help="a new chain file with one subnet (owner = uid 0)")
    _common(s)
    s.add_argument("--netuid", type=int, default=1, help="the subnet's uid")
    s.add_argument("--owner", default="owner", help="owner hotkey (uid 0; uncrowned shares burn to it)")
    s.add_argument("--tempo", type=int, default=360, help="blocks per epoch")
    s.add_argument("--version-key", type=int, default=0, help="WeightsVersionKey")
    s.add_argument("--weights-rate-limit", type=int, default=1, help="blocks between weight sets (subtensor: 100)")
    s.add_argument(
        "--seconds-per-block",
        type=float,
        default=0.0,
        help="0 (default): blocks move only with `advance`; 12 follows wall time like subtensor",
    )
    s.set_defaults(handler=cmd_create)

    s = verbs.add_parser("register", help="register a hotkey (next uid); --validator for a validator permit")
    s.add_argument("hotkey", help="the hotkey name to register")
    _common(s)
    s.add_argument("--coldkey", default=None, help="default HOTKEY-cold")
    s.add_argument("--stake", type=float, default=0.0, help="stake (TAO) the hotkey holds")
    s.add_argument("--validator", action="store_true", help="grant a validator permit")
    s.add_argument("--netuid", type=int, default=None, help="default: the chain file's default netuid")
    s.set_defaults(handler=cmd_register)

    s = verbs.add_parser("advance", help="move the chain forward N blocks (default 1)")
    s.add_argument("blocks", type=int, nargs="?", default=1, help="blocks to advance")
    _common(s)
    s.set_defaults(handler=cmd_advance)

    s = verbs.add_parser("show", help="block, hyperparameters, neurons, revealed commitments, weights")
    _common(s)
    s.add_argument("--netuid", type=int, default=None, help="default: the chain file's default netuid")
    s.set_defaults(handler=cmd_show)
