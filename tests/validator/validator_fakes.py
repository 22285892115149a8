"""Shared helpers for the validator tests: bundles, a loopback file server, fast fakes.

Imported by the tests and by restart_worker.py (the subprocess the restart test kills), so
it must not import pytest.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from cacheon_subnet.bundle import Bundle, OpEntry, pack
from cacheon_subnet.chain import LocalChain
from cacheon_subnet.chain.commitment import encode
from cacheon_subnet.records import QualifyResult
from cacheon_subnet.scoring.settle import Crown
from cacheon_subnet.validator.screen import ScreenResult

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
NETUID = 1
VALIDATOR = "validator-hk"


def make_archive(src: str | Path, out_dir: Path, name: str, extra: dict[str, str] | None = None) -> tuple[Path, str]:
    """Copy a bundle dir, add `extra` files (e.g. speed.txt), pack it; returns (archive, digest)."""
    work = out_dir / f"src-{name}"
    shutil.copytree(src, work)
    for rel, text in (extra or {}).items():
        (work / rel).write_text(text)
    archive = out_dir / f"{name}.tar.gz"
    bundle = pack(work, archive)
    return archive, bundle.digest


def fast_config(state_dir: Path, targets: tuple[str, ...], **cfg: Any) -> Any:
    """A ValidatorConfig for a local chain and local archive servers: no pauses, no retry waits."""
    from cacheon_subnet.netpolicy import LOCAL
    from cacheon_subnet.validator.loop import ValidatorConfig

    opts: dict[str, Any] = {
        "interval_s": 0,
        "retry_base_s": 0.0,
        "retry_max_s": 0.0,
        "chain_backoff_base_s": 0.01,
        "chain_call_retry_s": 0.0,
        "url_policy": LOCAL,
        **cfg,
    }
    return ValidatorConfig(netuid=NETUID, hotkey=VALIDATOR, state_dir=state_dir, targets=targets, **opts)


def make_chain(
    path: Path, *, version_key: int = 29, rate_limit: int = 5, seconds_per_block: float = 0.0, miners: int = 0
) -> LocalChain:
    """Owner uid 0, validator uid 1 (permit), miners m0..m{n-1} from uid 2."""
    chain = LocalChain.create(
        path, NETUID, weights_version_key=version_key, weights_rate_limit=rate_limit, seconds_per_block=seconds_per_block
    )
    chain.register(VALIDATOR, "vcold", stake=1000.0, validator_permit=True)
    for i in range(miners):
        chain.register(f"m{i}", f"c{i}")
    return chain


def commit(chain: LocalChain, hotkey: str, digest: str, url: str, reveal: int = 1) -> int:
    return chain.commit(hotkey, NETUID, encode(digest, hotkey, url, chain.url_policy()), reveal)


class FileServer:
    """aiohttp on 127.0.0.1 in a background thread. Routes: /f/<name> (registered bytes),
    /redirect/<n>/<name> (n hops then the file), /big (endless), /slow (sleeps), /status/<code>, /to?u=URL (redirect anywhere)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hits: list[str] = []  # names requested under /f/ (a refused connection adds none)
        self.big_sent = 0
        self._stopping = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def __enter__(self) -> FileServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("file server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        time.sleep(0.15)  # let /slow and /big handlers notice and return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def add(self, name: str, data: bytes | Path) -> str:
        self.files[name] = data.read_bytes() if isinstance(data, Path) else data
        return self.url(f"f/{name}")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/f/{name}", self._file)
        app.router.add_get("/redirect/{n}/{name}", self._redirect)
        app.router.add_get("/big", self._big)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/status/{code}", self._status)
        app.router.add_get("/to", self._to)
        runner = web.AppRunner(app, shutdown_timeout=0.2)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    async def _file(self, req: web.Request) -> web.Response:
        self.hits.append(req.match_info["name"])
        data = self.files.get(req.match_info["name"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    async def _redirect(self, req: web.Request) -> web.Response:
        n, name = int(req.match_info["n"]), req.match_info["name"]
        loc = f"/redirect/{n - 1}/{name}" if n > 1 else f"/f/{name}"
        raise web.HTTPFound(loc)

    async def _big(self, req: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # chunked: no Content-Length, so only the stream cap stops it
        await resp.prepare(req)
        chunk = b"x" * 65536
        try:
            for _ in range(100_000):
                if self._stopping.is_set():
                    break
                await resp.write(chunk)
                self.big_sent += len(chunk)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    async def _slow(self, req: web.Request) -> web.Response:
        for _ in range(300):
            if self._stopping.is_set():
                break
            await asyncio.sleep(0.05)
        return web.Response(body=b"late")

    async def _to(self, req: web.Request) -> web.Response:
        raise web.HTTPFound(req.query["u"])

    async def _status(self, req: web.Request) -> web.Response:
        return web.Response(status=int(req.match_info["code"]))


@dataclass(frozen=True)
class FakeQualifier:
    """PASS at the vs-stock speed written in the bundle's speed.txt (1.0 if none); measured
    against the incumbent like a real arena: speedup = vs_stock / incumbent.speedup_vs_stock."""

    delay_s: float = 0.0
    arena_id: str = "fake-arena"
    label: str = "fake-timing"

    def qualify(self, bundle: Bundle, op: OpEntry, incumbent: Crown | None) -> QualifyResult:
        if self.delay_s:
            time.sleep(self.delay_s)
        vs_stock = float(bundle.files.get("speed.txt", b"1.0").decode().strip())
        speedup = vs_stock / incumbent.speedup_vs_stock if incumbent else vs_stock
        return QualifyResult(
            op.slot,
            "PASS",
            True,
            speedup,
            vs_stock,
            0.001,
            self.arena_id,
            self.label,
            f"fake {vs_stock:.3f}x vs stock",
        )


def fake_screener(delay_s: float = 0.0) -> Callable[[Bundle], ScreenResult]:
    """Fails the broken controls (manifest name control-*), passes everything else."""

    def screen(bundle: Bundle) -> ScreenResult:
        if delay_s:
            time.sleep(delay_s)
        if bundle.manifest.name.startswith("control-"):
            return ScreenResult(False, (f"{bundle.manifest.name}: mismatch (fake screener)",), {"fake": True})
        return ScreenResult(True, (), {"fake": True})

    return screen


def snapshot(db: Any) -> dict[str, Any]:
    """The parts of a validator DB two equivalent runs must agree on."""
    con = db.con
    contributions = {
        r["id"]: (r["hotkey"], r["state"], r["rule"], _reason_key(r["reason"]))
        for r in con.execute("SELECT * FROM contributions")
    }
    # a duplicate's evidence depends on whether it was measured before the swap: not compared
    verdicts = sorted(
        {
            (r["contribution_id"], r["target"], r["verdict"])
            for r in con.execute(
                "SELECT e.* FROM evidence e JOIN contributions c ON c.id=e.contribution_id WHERE c.rule IS NOT 'duplicate'"
            )
        }
    )
    crowns = {
        r["target"]: (r["contribution_id"], r["hotkey"], round(r["speedup_vs_stock"], 6))
        for r in con.execute("SELECT * FROM crowns")
    }
    return {"contributions": contributions, "verdicts": verdicts, "crowns": crowns}


def _reason_key(reason: str) -> str:
    """Reasons up to the first parenthesis/colon detail that may carry run-specific blocks."""
    return reason.split(" (")[0].split(":")[0]
