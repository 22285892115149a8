"""`cacheon miner submit | status | serve`, plus the chain flags the neurons share.

Chain selection (same flags as neurons/): `--chain local|bittensor` (default: local when
`--local-chain PATH` is given, else bittensor), `--netuid`, `--subtensor.network`,
`--wallet.name`, `--wallet.hotkey`, `--wallet.path`. On the local chain the hotkey is a plain
name: `--hotkey NAME`, else `--wallet.hotkey`. On bittensor it is the wallet hotkey's ss58.
Heavy imports (torch, the SDK) happen inside handlers so `cacheon --help` stays fast.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from cacheon_subnet.cliout import Exit, emit
from cacheon_subnet.env import LOCAL_CHAIN, MINER_STATE
from cacheon_subnet.errors import UsageError


@dataclass(frozen=True)
class ChainContext:
    """An opened backend plus who we are on it."""

    backend: Any
    netuid: int
    hotkey: str
    label: str


def add_chain_args(p: argparse.ArgumentParser) -> None:
    """The conventional chain/wallet flags (shared with neurons/miner.py)."""
    g = p.add_argument_group("chain")
    g.add_argument(
        "--chain",
        choices=["local", "bittensor"],
        default=None,
        help="local SQLite chain or the real one (default: local if --local-chain)",
    )
    g.add_argument("--local-chain", default=LOCAL_CHAIN.get(), help=f"local chain file (env {LOCAL_CHAIN.name})")
    g.add_argument("--netuid", type=int, default=None, help="subnet uid (local default: the chain file's default netuid)")
    g.add_argument(
        "--subtensor.network", dest="network", default="finney", help="finney | test | local | ws://... (bittensor)"
    )
    g.add_argument("--wallet.name", dest="wallet_name", default="default", help="bittensor wallet (coldkey) name")
    g.add_argument("--wallet.hotkey", dest="wallet_hotkey", default="default", help="bittensor wallet hotkey name")
    g.add_argument(
        "--wallet.path",
        dest="wallet_path",
        default=None,
        help="wallets directory (default: the SDK's, ~/.bittensor/wallets)",
    )
    g.add_argument("--hotkey", default=None, help="local chain: the hotkey name to act as")
    g.add_argument(
        "--state-dir", default=None, help=f"miner state dir (env {MINER_STATE.name}, default {MINER_STATE.default})"
    )


def open_chain(args: argparse.Namespace) -> ChainContext:
    """Backend, netuid and hotkey from the chain flags; UsageError says which flag is wrong."""
    from cacheon_subnet.chain import BittensorChain, LocalChain
    from cacheon_subnet.miner.submit import chain_label

    kind = args.chain or ("local" if args.local_chain else "bittensor")
    if kind == "local":
        if not args.local_chain:
            raise UsageError(f"--chain local needs --local-chain PATH (or ${LOCAL_CHAIN.name})")
        backend: Any = LocalChain.open(args.local_chain)
        netuid = backend.default_netuid if args.netuid is None else args.netuid
        hotkey = args.hotkey or args.wallet_hotkey
    else:
        if args.netuid is None:
            raise UsageError("--netuid is required with --chain bittensor")
        backend = BittensorChain(
            network=args.network,
            wallet_name=args.wallet_name,
            wallet_hotkey=args.wallet_hotkey,
            wallet_path=args.wallet_path,
        )
        netuid = args.netuid
        hotkey = backend.hotkey
        if args.hotkey and args.hotkey != hotkey:
            raise UsageError(f"--hotkey {args.hotkey} is not wallet {args.wallet_name}/{args.wallet_hotkey} ({hotkey})")
    return ChainContext(backend, int(netuid), hotkey, chain_label(backend))


# -- handlers ---------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace) -> int:
    from cacheon_subnet.miner.submit import (
        DEFAULT_BASE_URL,
        DEFAULT_REVEAL_BLOCKS,
        SubmitError,
        submit,
    )
    from cacheon_subnet.verify import VerifyOptions

    ctx = open_chain(args)
    opts = VerifyOptions(device=args.verify_device, max_cases=args.max_cases)
    try:
        result = submit(
            args.bundle,
            backend=ctx.backend,
            netuid=ctx.netuid,
            hotkey=ctx.hotkey,
            url=args.url,
            serve_dir=args.serve_dir,
            base_url=args.base_url or DEFAULT_BASE_URL,
            reveal_after_blocks=(DEFAULT_REVEAL_BLOCKS if args.reveal_blocks is None else args.reveal_blocks),
            verify_options=opts,
            check_url=args.check_url,
            state_dir=args.state_dir,
            force=args.force,
        )
    except SubmitError as exc:
        payload = {
            "status": "refused",
            "reason": exc.reason,
            "detail": exc.detail,
            "reasons": list(exc.reasons),
            "codes": list(exc.codes),
        }
        emit(args, payload, str(exc))
        return Exit.USAGE if exc.reason == "usage" else Exit.FAIL
    emit(args, result.to_json(), result.render())
    return Exit.OK


def cmd_status(args: argparse.Namespace) -> int:
    from cacheon_subnet.miner.status import miner_status

    ctx = open_chain(args)
    st = miner_status(
        ctx.backend,
        ctx.netuid,
        ctx.hotkey,
        state_dir=args.state_dir,
        chain=ctx.label,
        fetch=not args.no_fetch,
        timeout_s=args.timeout,
        verdicts=not args.no_verdicts,
        verdict_timeout_s=args.verdict_timeout,
    )
    emit(args, st.to_json(), st.render())
    healthy = st.registered and all(p.ok for p in st.probes) and st.state != "invalid"
    return Exit.OK if healthy else Exit.FAIL


def cmd_serve(args: argparse.Namespace) -> int:
    from cacheon_subnet.miner.serve import DEFAULT_HOST, DEFAULT_PORT, serve_forever

    os.makedirs(args.dir, exist_ok=True)
    serve_forever(args.dir, args.host or DEFAULT_HOST, DEFAULT_PORT if args.port is None else args.port)
    return Exit.OK


# -- parser -----------------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction, groups: dict[str, Any]) -> None:
    """Add the miner verbs to `cacheon miner ...` (called by cli.build_parser)."""
    # Defaults that live in serve/submit are resolved in the handlers: importing those modules
    # here would pull aiohttp/torch and configure logging before --log-level is read.
    m = groups["miner"]
    s = m.add_parser("submit", help="verify, pack and commit a bundle (timelocked)")
    s.add_argument("bundle", help="bundle directory")
    where = s.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="https URL where you host <digest>.tar.gz yourself")
    where.add_argument("--serve-dir", help="self-host: pack into DIR for `cacheon miner serve`")
    s.add_argument(
        "--base-url",
        default=None,
        help="with --serve-dir: public base URL of that dir, https except loopback "
        "(default http://127.0.0.1:8787, what `miner serve` binds)",
    )
    s.add_argument("--reveal-blocks", type=int, default=None, help="blocks the commitment stays sealed (default 20)")
    s.add_argument("--verify-device", default="cpu", choices=["cpu", "cuda"], help="device of the verify run first")
    s.add_argument("--max-cases", type=int, default=None, help="verify fewer shapes (faster)")
    s.add_argument("--check-url", action="store_true", help="fetch the URL first and require it to serve this bundle")
    s.add_argument(
        "--force", action="store_true", help="re-commit an already committed digest+url (resets the commit block)"
    )
    s.add_argument("--json", action="store_true")
    add_chain_args(s)
    s.set_defaults(handler=cmd_submit)

    s = m.add_parser("status", help="registration, commitment, URL health, weights and every validator's verdicts")
    s.add_argument("--no-fetch", action="store_true", help="do not fetch the committed URLs")
    s.add_argument("--timeout", type=float, default=60.0, help="seconds per URL fetch")
    s.add_argument(
        "--no-verdicts", action="store_true", help="do not fetch each validator's verdicts from its announced leaderboard"
    )
    s.add_argument(
        "--verdict-timeout", type=float, default=10.0, help="seconds per validator leaderboard fetch (default 10)"
    )
    s.add_argument("--json", action="store_true")
    add_chain_args(s)
    s.set_defaults(handler=cmd_status)

    s = m.add_parser("serve", help="serve <digest>.tar.gz archives from a directory (blocking)")
    s.add_argument("--dir", required=True, help="directory holding the <digest>.tar.gz archives")
    s.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="port (default 8787)")
    s.set_defaults(handler=cmd_serve)
