"""Cacheon miner neuron: submit a bundle once, then keep it reachable.

    python neurons/miner.py --netuid N --subtensor.network finney \\
        --wallet.name W --wallet.hotkey H --bundle ./my-bundle \\
        --serve-dir ~/.cacheon/miner/serve --host 0.0.0.0 --port 8787 \\
        --base-url https://my.host.example/cacheon

Idempotent across restarts (pm2): the same digest + URL already committed (pending or
revealed) is not committed again, since a re-commit would reset its commit block and lose
priority. With --serve-dir it then serves `<digest>.tar.gz` until SIGINT/SIGTERM; with --url
(hosted elsewhere) it probes that URL periodically and logs whether validators can fetch it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script from a checkout: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

try:
    from cacheon_subnet import log as cacheon_log
    from cacheon_subnet.errors import CacheonError
    from cacheon_subnet.miner.commands import ChainContext, add_chain_args, open_chain
except ImportError as _exc:  # another interpreter than the checkout's .venv (e.g. no structlog)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _bootstrap import reexec_or_explain

    reexec_or_explain(_exc, sys.argv[0], sys.argv[1:])

if TYPE_CHECKING:
    from cacheon_subnet.miner.submit import SubmitResult

CHAIN_RETRIES = 5


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neurons/miner.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--bundle", required=True, help="bundle directory to submit")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--serve-dir", help="self-host: pack into DIR and serve it")
    where.add_argument("--url", help="you host <digest>.tar.gz at this https URL")
    p.add_argument("--host", default="127.0.0.1", help="serve bind address")
    p.add_argument("--port", type=int, default=8787, help="serve port")
    p.add_argument(
        "--base-url",
        default=None,
        help="public base URL of --serve-dir (default http://HOST:PORT; must be https unless loopback)",
    )
    p.add_argument("--reveal-blocks", type=int, default=None, help="sealed blocks (default 20)")
    p.add_argument("--verify-device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--max-cases", type=int, default=None)
    p.add_argument("--probe-interval", type=float, default=600.0, help="with --url: seconds between reachability probes")
    p.add_argument("--log-level", default=None)
    add_chain_args(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cacheon_log.configure(level=args.log_level)
    log = cacheon_log.get_logger("cacheon.neuron.miner")
    try:
        ctx = open_chain(args)
        log.info("miner.start", chain=ctx.label, netuid=ctx.netuid, hotkey=ctx.hotkey, bundle=args.bundle)
        result = _submit_with_retries(args, ctx, log)
    except CacheonError as exc:
        log.error("miner.submit_refused", error=str(exc), reason=getattr(exc, "reason", None))
        return 1
    log.info(
        "miner.submitted",
        status=result.status,
        digest=result.digest,
        url=result.url,
        commit_block=result.commit_block,
        reveal_block=result.reveal_block,
    )
    if args.serve_dir:
        from cacheon_subnet.miner.serve import serve_forever

        log.info("miner.serving", dir=args.serve_dir, host=args.host, port=args.port)
        serve_forever(args.serve_dir, args.host, args.port)
    else:
        _watch(result.url, result.digest, args.probe_interval, log)
    log.info("miner.stop")
    return 0


def _submit_with_retries(args: argparse.Namespace, ctx: ChainContext, log: Any) -> SubmitResult:
    """Submit; an unreachable chain is retried with exponential backoff, anything else is not."""
    from cacheon_subnet.miner.serve import base_url
    from cacheon_subnet.miner.submit import DEFAULT_REVEAL_BLOCKS, SubmitError, submit
    from cacheon_subnet.retry import call_with_retries
    from cacheon_subnet.verify import VerifyOptions

    reveal = DEFAULT_REVEAL_BLOCKS if args.reveal_blocks is None else args.reveal_blocks
    opts = VerifyOptions(device=args.verify_device, max_cases=args.max_cases)

    def once() -> SubmitResult:
        return submit(
            args.bundle,
            backend=ctx.backend,
            netuid=ctx.netuid,
            hotkey=ctx.hotkey,
            url=args.url,
            serve_dir=args.serve_dir,
            base_url=args.base_url or base_url(args.host, args.port),
            reveal_after_blocks=reveal,
            verify_options=opts,
            state_dir=args.state_dir,
        )

    def retryable(exc: BaseException) -> bool:
        # Only reads failed: a commit that went out (exc.sent) may have landed and is never re-sent.
        return isinstance(exc, SubmitError) and exc.reason == "chain:unavailable" and not exc.sent

    def logged(exc: BaseException, attempt: int) -> None:
        if retryable(exc) and attempt < CHAIN_RETRIES:
            log.warning("miner.chain_retry", attempt=attempt, error=getattr(exc, "detail", str(exc)))

    return call_with_retries(once, attempts=CHAIN_RETRIES, base_s=5.0, cap_s=300.0, retry_if=retryable, on_error=logged)


def _watch(url: str, digest: str, interval: float, log: Any) -> None:
    """Probe the externally hosted URL until SIGINT/SIGTERM."""
    from cacheon_subnet.miner.serve import probe

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set():
        pr = probe(url, digest)
        (log.info if pr.ok else log.warning)("miner.probe", url=url, ok=pr.ok, reason=pr.reason, detail=pr.detail)
        stop.wait(max(1.0, interval))


if __name__ == "__main__":
    sys.exit(main())
