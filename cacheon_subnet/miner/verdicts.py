"""Every validator's verdicts on your contributions, read from the leaderboards they announce.

A validator's endpoint is its axon on chain (cacheon_subnet.chain.endpoints). Its answer is
untrusted input: each fetch has a total timeout, no redirects, a byte cap enforced while
reading, must be `application/json` and must pass webapi.check_contributions; rows for other
hotkeys are dropped. One down or hostile validator costs its own line in the report, never the
others'. Text is printed with control characters escaped, so a reason cannot drive the terminal.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from cacheon_subnet.chain.endpoints import ValidatorEndpoint
from cacheon_subnet.webapi import MAX_PAGE, PATH_CONTRIBUTIONS, ApiShapeError, check_contributions
from cacheon_subnet.words import state_label, verdict_label

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_BYTES = 4 << 20
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(9), *range(11, 32), *range(127, 160))}


@dataclass(frozen=True)
class ValidatorVerdicts:
    uid: int
    hotkey: str
    url: str | None
    error: str | None  # why nothing could be read from this validator
    contributions: tuple[dict[str, Any], ...] = ()
    total: int | None = None  # how many the validator holds for this hotkey (may exceed one page)
    ignored: int = 0  # rows about other hotkeys, dropped


def safe(text: Any) -> str:
    """Printable text: control characters (ESC, BEL, CR...) spelled out as \\xNN."""
    return str(text).translate(_CONTROL)


async def _fetch(session: aiohttp.ClientSession, ep: ValidatorEndpoint, hotkey: str, max_bytes: int) -> ValidatorVerdicts:
    if ep.url is None:
        return ValidatorVerdicts(ep.uid, ep.hotkey, None, "no leaderboard endpoint announced on chain")
    url = f"{ep.url}{PATH_CONTRIBUTIONS}?{urlencode({'hotkey': hotkey, 'limit': MAX_PAGE})}"
    try:
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status != 200:
                return ValidatorVerdicts(ep.uid, ep.hotkey, ep.url, f"HTTP {resp.status} from {url}")
            if resp.content_type != "application/json":
                return ValidatorVerdicts(
                    ep.uid, ep.hotkey, ep.url, f"content type {resp.content_type!r}, expected application/json"
                )
            if (resp.content_length or 0) > max_bytes:
                return ValidatorVerdicts(
                    ep.uid, ep.hotkey, ep.url, f"response of {resp.content_length} bytes exceeds the {max_bytes}-byte limit"
                )
            body = bytearray()
            async for chunk in resp.content.iter_chunked(64 << 10):
                body += chunk
                if len(body) > max_bytes:
                    return ValidatorVerdicts(ep.uid, ep.hotkey, ep.url, f"response exceeds the {max_bytes}-byte limit")
    except TimeoutError:
        return ValidatorVerdicts(ep.uid, ep.hotkey, ep.url, f"timed out fetching {url}")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return ValidatorVerdicts(ep.uid, ep.hotkey, ep.url, f"cannot fetch {url}: {type(exc).__name__}: {exc}")
    try:
        doc = json.loads(bytes(body))
        rows = check_contributions(doc)
    except (ValueError, ApiShapeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return ValidatorVerdicts(ep.uid, ep.hotkey, ep.url, f"bad response: {exc}")
    mine = tuple(c for c in rows if c["hotkey"] == hotkey)
    total = doc.get("total") if isinstance(doc.get("total"), int) else None
    return ValidatorVerdicts(ep.uid, ep.hotkey, ep.url, None, mine, total, len(rows) - len(mine))


async def afetch_verdicts(
    endpoints: Sequence[ValidatorEndpoint],
    hotkey: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[ValidatorVerdicts, ...]:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers={"Accept": "application/json"}) as session:
        return tuple(await asyncio.gather(*(_fetch(session, ep, hotkey, max_bytes) for ep in endpoints)))


def fetch_verdicts(endpoints: Sequence[ValidatorEndpoint], hotkey: str, **kw: Any) -> tuple[ValidatorVerdicts, ...]:
    """Blocking afetch_verdicts (from a thread of its own when an event loop already runs here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(afetch_verdicts(endpoints, hotkey, **kw))
    out: list[tuple[ValidatorVerdicts, ...]] = []
    t = threading.Thread(target=lambda: out.append(asyncio.run(afetch_verdicts(endpoints, hotkey, **kw))))
    t.start()
    t.join()
    return out[0] if out else ()


def _wrap(text: str, indent: str) -> list[str]:
    """Every character of a reason, wrapped (never cut)."""
    return textwrap.wrap(
        safe(text), 100, initial_indent=indent, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False
    ) or [indent]


def render(report: Sequence[ValidatorVerdicts]) -> list[str]:
    if not report:
        return ["  verdicts no validator-permit hotkeys on this subnet"]
    lines = []
    for v in report:
        head = f"  verdicts uid {v.uid:<4} {safe(v.hotkey)}"
        if v.error:
            lines += [head + (f"  {safe(v.url)}" if v.url else ""), *_wrap(f"unavailable: {v.error}", " " * 12)]
            continue
        more = f" (showing {len(v.contributions)} of {v.total})" if v.total and v.total > len(v.contributions) else ""
        lines.append(f"{head}  {safe(v.url)}: {len(v.contributions)} contribution(s){more}")
        for c in v.contributions:
            # labels made here from the stored strings (the validator's own label fields are not trusted)
            outcomes = [e.get("outcome") if isinstance(e.get("outcome"), str) else None for e in c["evidence"]]
            shown = state_label(c["state"], outcomes)
            lines.append(f"            {safe(c['id'])}  commit block {c['commit_block']}  {safe(shown)}")
            if c["reason"]:
                lines += _wrap(c["reason"], " " * 14)
            for e in c["evidence"]:
                vs = e.get("speedup_vs_stock")
                base = "vs the fp32 reference" if str(e["label"]).startswith("cpu") else "vs stock"  # cpu-timing rows
                speed = f"×{vs:.4f} {base}" if isinstance(vs, (int, float)) else f"× ? {base}"
                outcome = e.get("outcome") if e.get("settled") and isinstance(e.get("outcome"), str) else None
                said = verdict_label(e["verdict"], outcome)
                lines.append(f"              {safe(e['target'])} {safe(said)} {speed} [{safe(e['label'])}]")
                lines += _wrap(e["reason"], " " * 16)
                if e.get("outcome_reason"):
                    lines += _wrap(f"settlement: {e['outcome_reason']}", " " * 16)
    return lines
