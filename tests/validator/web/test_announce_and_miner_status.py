"""Miners find the leaderboards: validators announce them as their axon (LocalChain here, the SDK's
ServeAxon on bittensor), and `cacheon miner status` reads every validator's verdicts from them,
surviving validators that are down, slow, oversized, off-schema, redirecting or hostile."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path

import pytest
from aiohttp import web
from board_fixtures import XSS_REASON, cid, make_state

from cacheon_subnet.chain import ChainError, LocalChain, NotRegistered
from cacheon_subnet.chain.endpoints import announce, validator_endpoints
from cacheon_subnet.cli import main as cli_main
from cacheon_subnet.miner.status import miner_status
from cacheon_subnet.miner.verdicts import safe
from cacheon_subnet.validator.web.server import Leaderboard
from cacheon_subnet.webapi import SCHEMA

MINER = "miner-good"
MODE: web.AppKey[str] = web.AppKey("mode", str)


def chain_at(path: Path, validators: int) -> LocalChain:
    chain = LocalChain.create(path, netuid=1, seconds_per_block=0)
    chain.register(MINER)
    for i in range(validators):
        chain.register(f"v{i}", stake=1000.0, validator_permit=True)
    return chain


def test_local_chain_serves_and_reads_axons(tmp_path):
    chain = chain_at(tmp_path / "c.db", 2)
    chain.serve_axon("v0", 1, "203.0.113.7", 8090)
    chain.serve_axon("v1", 1, "2001:db8::1", 9000)
    mg = chain.metagraph(1)
    assert [n.axon for n in mg.neurons] == [None, None, "203.0.113.7:8090", "[2001:db8::1]:9000"]
    assert [e.url for e in validator_endpoints(mg)] == ["http://203.0.113.7:8090", "http://[2001:db8::1]:9000"]
    with pytest.raises(ChainError, match="not an IPv4/IPv6 address"):
        chain.serve_axon("v0", 1, "leaderboard.example.com", 8090)
    with pytest.raises(ChainError, match="port"):
        chain.serve_axon("v0", 1, "203.0.113.7", 70000)
    with pytest.raises(NotRegistered):
        chain.serve_axon("stranger", 1, "203.0.113.7", 8090)
    con = sqlite3.connect(tmp_path / "c.db")  # a chain file from before the axons table
    con.execute("DROP TABLE axons")
    con.commit()
    con.close()
    assert all(n.axon is None for n in chain.metagraph(1).neurons)
    chain.serve_axon("v0", 1, "203.0.113.8", 8090)
    assert chain.metagraph(1).neurons[2].axon == "203.0.113.8:8090"


def test_announce_calls_the_chain_only_when_the_endpoint_changed(tmp_path):
    chain = chain_at(tmp_path / "c.db", 1)
    calls = []
    real = chain.serve_axon
    chain.serve_axon = lambda *a, **k: (calls.append(a), real(*a, **k))  # type: ignore[method-assign]
    assert announce(chain, 1, "v0", "203.0.113.7", 8090) is True
    assert announce(chain, 1, "v0", "203.0.113.7", 8090) is False  # restart: no call (ServingRateLimit)
    assert announce(chain, 1, "v0", "203.0.113.7", 8091) is True and len(calls) == 2
    with pytest.raises(NotRegistered):
        announce(chain, 1, "nobody", "203.0.113.7", 8090)


def test_validator_run_serves_the_leaderboard_and_announces_it(tmp_path, capsys):
    chain = chain_at(tmp_path / "c.db", 1)
    base = [
        "validator",
        "run",
        "--chain",
        "local",
        "--local-chain",
        str(tmp_path / "c.db"),
        "--netuid",
        "1",
        "--wallet.hotkey",
        "v0",
        "--state-dir",
        str(tmp_path / "state"),
        "--once",
    ]
    assert cli_main(base + ["--leaderboard", "127.0.0.1:0"]) == 0
    axon = chain.metagraph(1).neurons[2].axon
    assert axon is not None and axon.startswith("127.0.0.1:") and not axon.endswith(":0")
    capsys.readouterr()
    assert cli_main(base + ["--leaderboard", "0.0.0.0:8090"]) == 2  # nothing to announce: say so
    assert "--leaderboard-announce" in capsys.readouterr().err


def _doc(rows: list) -> dict:
    return {"schema": SCHEMA, "total": len(rows), "contributions": rows}


ROW = {
    "id": "ab" * 32,
    "hotkey": MINER,
    "commit_block": 5,
    "state": "failed",
    "reason": "x\x1b[2J\x07 cleared",
    "evidence": [],
}


async def _hostile(request: web.Request) -> web.StreamResponse:
    mode = request.app[MODE]
    if mode == "slow":
        await asyncio.sleep(5)
    if mode == "huge":
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for _ in range(80):  # 5 MiB > the 4 MiB cap
            await resp.write(b" " * 65536)  # no Content-Length: the cap is enforced while reading
        return resp
    if mode == "schema":
        return web.json_response({"schema": "cacheon.leaderboard/99", "contributions": []})
    if mode == "redirect":
        raise web.HTTPFound("http://127.0.0.1:1/")
    if mode == "html":
        return web.Response(text="<html>", content_type="text/html")
    if mode == "badverdict":
        return web.json_response(
            _doc([{**ROW, "evidence": [{"target": "t", "verdict": "WIN", "reason": "", "arena_id": "a", "label": "l"}]}])
        )
    return web.json_response(_doc([ROW, {**ROW, "hotkey": "someone-else"}]))  # "ansi"


class Hostile:
    """One loopback server per misbehaviour, all on one event loop in a thread."""

    MODES = ("slow", "huge", "schema", "redirect", "html", "badverdict", "ansi")

    def __enter__(self) -> dict[str, int]:
        self.loop = asyncio.new_event_loop()
        self.ports: dict[str, int] = {}
        ready = threading.Event()

        async def start() -> None:
            self.runners = []
            for mode in self.MODES:
                app = web.Application()
                app[MODE] = mode
                app.router.add_get("/api/contributions", _hostile)
                runner = web.AppRunner(app, shutdown_timeout=0.2)
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                self.ports[mode] = site._server.sockets[0].getsockname()[1]
                self.runners.append(runner)

        def run() -> None:
            self.loop.run_until_complete(start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(30)
        return self.ports

    def __exit__(self, *exc) -> None:
        async def cleanup() -> None:
            for r in self.runners:
                await r.cleanup()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:  # the slow handler, still asleep
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.mark.slow
def test_miner_status_shows_every_validators_verdicts_and_survives_bad_ones(tmp_path, capsys):
    state = make_state(tmp_path)
    modes = Hostile.MODES
    chain = chain_at(tmp_path / "c.db", 2 + len(modes))
    with Leaderboard(state, "127.0.0.1", 0) as board, Hostile() as ports:
        chain.serve_axon("v0", 1, "127.0.0.1", board.port)  # v1 announces nothing
        for i, mode in enumerate(modes):
            chain.serve_axon(f"v{i + 2}", 1, "127.0.0.1", ports[mode])
        st = miner_status(chain, 1, MINER, fetch=False, verdict_timeout_s=1.5)
        by = {v.hotkey: v for v in st.verdicts}
        assert (
            cli_main(
                [
                    "miner",
                    "status",
                    "--local-chain",
                    str(tmp_path / "c.db"),
                    "--hotkey",
                    MINER,
                    "--no-fetch",
                    "--verdict-timeout",
                    "1.5",
                    "--state-dir",
                    str(tmp_path / "m"),
                ]
            )
            == 0
        )
        text = capsys.readouterr().out
    good = by["v0"]
    assert good.error is None and [c["id"] for c in good.contributions] == [cid("good")]
    [e] = good.contributions[0]["evidence"]
    assert (e["verdict"], e["outcome"], e["target"]) == ("PASS", "crowned", "norm.rmsnorm")
    assert "no leaderboard endpoint" in by["v1"].error
    errors = {mode: by[f"v{i + 2}"].error for i, mode in enumerate(modes)}
    assert "timed out" in errors["slow"] and "byte limit" in errors["huge"]
    assert "cacheon.leaderboard/99" in errors["schema"] and "HTTP 302" in errors["redirect"]
    assert "content type" in errors["html"] and "'WIN'" in errors["badverdict"] and errors["ansi"] is None
    ansi = by[f"v{modes.index('ansi') + 2}"]
    assert len(ansi.contributions) == 1 and ansi.ignored == 1  # the other hotkey's row is dropped
    assert "\x1b" not in text and "\x07" not in text and "x\\x1b[2J\\x07 cleared" in text
    assert "norm.rmsnorm crowned ×1.0520 vs stock [gpu-arena]" in text and " PASS " not in text
    assert json.loads(json.dumps(st.to_json(), default=str))["verdicts"][0]["hotkey"] == "v0"


def test_full_reasons_are_wrapped_never_cut(tmp_path):
    from cacheon_subnet.miner.verdicts import ValidatorVerdicts, render

    row = {"id": "i", "commit_block": 1, "state": "failed", "reason": XSS_REASON, "evidence": []}
    lines = render([ValidatorVerdicts(1, "v", "http://x", None, (row,), 1)])
    assert max(len(x) for x in lines) <= 100 and "".join(x.strip() for x in lines).endswith("END-OF-REASON")
    assert "".join(lines).replace(" ", "").count("RuntimeError") == XSS_REASON.count("RuntimeError")
    assert safe("a\x1bb\nc") == "a\\x1bb\nc"
