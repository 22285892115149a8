"""The leaderboard's JSON API and page through aiohttp's test client: content, escaping of hostile
strings, read-only access, strict JSON, rate limiting and method/headers hygiene."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from board_fixtures import GPU_ARENA, XSS_HOTKEY, XSS_REASON, arena_detail, cid, make_state

from cacheon_subnet.validator.state import DB_NAME, StateDB
from cacheon_subnet.validator.web.ratelimit import TokenBuckets
from cacheon_subnet.validator.web.server import make_app
from cacheon_subnet.webapi import SCHEMA, check_contributions


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return make_state(tmp_path_factory.mktemp("board"))


def fetch(state_dir: Path, *paths: str, method: str = "GET", buckets: TokenBuckets | None = None) -> list:
    """(status, headers, body text) for each path, in order, through one test server."""

    async def go() -> list:
        async with TestClient(TestServer(make_app(state_dir, buckets))) as client:
            out = []
            for p in paths:
                r = await client.request(method, p)
                out.append((r.status, r.headers, await r.text()))
            return out

    return asyncio.run(go())


def strict(text: str):
    def no_constant(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=no_constant)


def test_crowns_per_slot_with_speedup_arena_and_age(state):
    [(status, headers, body)] = fetch(state, "/api/crowns")
    doc = strict(body)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert doc["schema"] == SCHEMA and doc["last_sync_block"] == 40
    [crown] = doc["crowns"]  # rope.neox's only verdict FAILed: no crown there
    assert (crown["target"], crown["hotkey"], crown["contribution_id"]) == ("norm.rmsnorm", "miner-good", cid("good"))
    assert crown["speedup_vs_stock"] == pytest.approx(1.052) and crown["arena_id"] == GPU_ARENA
    assert crown["label"] == "gpu-arena" and crown["age_blocks"] == 10 and crown["age_s"] >= 0


def test_contributions_carry_every_verdict_with_the_full_reason(state):
    [(s1, _, all_), (s2, _, evil), (s3, _, page)] = fetch(
        state,
        "/api/contributions",
        "/api/contributions?hotkey=" + XSS_HOTKEY.replace("'", "%27"),
        "/api/contributions?limit=2&offset=1",
    )
    assert s1 == s2 == s3 == 200
    doc = strict(all_)
    rows = check_contributions(doc)  # the miner-side schema check accepts what the server sends
    assert doc["total"] == 3 and [c["commit_block"] for c in rows] == [12, 11, 10]  # newest first
    [bad] = strict(evil)["contributions"]
    assert bad["hotkey"] == XSS_HOTKEY and bad["reason"] == XSS_REASON  # JSON carries it verbatim, whole
    [e] = bad["evidence"]
    assert (e["verdict"], e["label"], e["reason"]) == ("FAIL", "cpu-timing", XSS_REASON) and e["settled"]
    paged = strict(page)
    assert [c["commit_block"] for c in paged["contributions"]] == [11, 10] and paged["next_offset"] is None


def test_contribution_detail_has_the_window_figures_the_plots_need(state):
    [(status, _, body), (missing, _, _), (bad_id, _, _)] = fetch(
        state, f"/api/contributions/{cid('good')}", f"/api/contributions/{cid('nobody')}", "/api/contributions/..%2f"
    )
    assert (status, missing, bad_id) == (200, 404, 404)
    c = strict(body)["contribution"]
    [e] = c["evidence"]
    stages = {s["name"]: s for s in e["stages"]}
    assert set(stages) == {"resident", "confirm"}
    res = stages["resident"]
    assert res["metric"] == "decode_gpu_tokens_per_s" and (res["bar"], res["noise"]) == (1.008, 0.004)
    assert [w["role"] for w in res["windows"][:5]] == ["warmup", "B", "C", "C", "B'"] and len(res["windows"]) == 13
    assert res["baseline_median"] == pytest.approx(1003.0)  # median of B {1000,1001,1002} ∪ B′ {1004,1005,1006}
    assert c["history"][0]["to_state"] == "qualified"


def test_bad_query_is_a_400_naming_the_field(state):
    [(s1, _, b1), (s2, _, b2)] = fetch(state, "/api/contributions?limit=100000", "/api/contributions?state=nope")
    assert s1 == s2 == 400
    assert "limit" in strict(b1)["error"] and strict(b1)["schema"] == SCHEMA and "state" in strict(b2)["error"]


def test_page_escapes_hostile_hotkeys_and_reasons(state):
    [(s1, h1, index), (s2, _, detail)] = fetch(state, "/", f"/contributions/{cid('evil')}")
    assert s1 == s2 == 200 and h1["Content-Type"].startswith("text/html")
    for html in (index, detail):
        assert "<script" not in html and "<img" not in html  # no miner string became markup
        assert "&lt;script&gt;alert(&#39;hk&#39;)&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=alert(1)&gt; &#34;quoted&#34; &amp; ampersand END-OF-REASON" in html
    assert index.count('class="crown"') == 1 and 'data-slot="norm.rmsnorm"' in index
    assert "×0.0010 vs the fp32 reference (1000.0× slower)" in index  # never reads like a pass (cpu-timing)


def test_detail_page_plots_every_window_with_band_and_bar(state):
    [(status, _, html)] = fetch(state, f"/contributions/{cid('good')}")
    assert status == 200 and html.count("<svg") == 2  # resident and confirm engines
    assert html.count('class="window"') == 13 + 9 and html.count('class="band"') == 2
    assert "bar ×1.0080" in html and "noise band ±0.40%" in html


def test_headers_and_read_only_methods(state):
    [(status, headers, _)] = fetch(state, "/")
    csp = headers["Content-Security-Policy"]
    assert "script-src" not in csp and "default-src 'none'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    [(post, h, _)] = fetch(state, "/api/crowns", method="POST")
    assert post == 405 and "GET" in h["Allow"]
    [(missing, _, _)] = fetch(state, "/etc/passwd")
    assert missing == 404


def test_rate_limit_answers_429_with_retry_after(state):
    got = fetch(state, *["/api/health"] * 4, buckets=TokenBuckets(rate=0.01, burst=3))
    assert [s for s, _, _ in got] == [200, 200, 200, 429]
    assert int(got[3][1]["Retry-After"]) >= 1 and "too many" in strict(got[3][2])["error"]


def test_token_buckets_refill_per_client_and_stay_bounded():
    now = [0.0]
    tb = TokenBuckets(rate=1.0, burst=2, max_clients=3, clock=lambda: now[0])
    assert [tb.take("a"), tb.take("a")] == [0.0, 0.0] and tb.take("a") == pytest.approx(1.0)
    assert tb.take("b") == 0.0  # another address has its own bucket
    now[0] = 1.0
    assert tb.take("a") == 0.0 and tb.take("a") > 0
    for ip in ("c", "d", "e"):
        tb.take(ip)
    assert len(tb) == 3  # least recently seen dropped first
    with pytest.raises(ValueError):
        TokenBuckets(rate=0)


def test_reads_are_read_only_and_a_missing_state_is_503(state, tmp_path):
    db = StateDB(state, readonly=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.con.execute("INSERT INTO kv VALUES ('x', 'y')")
    db.close()
    [(status, _, body)] = fetch(tmp_path / "none", "/api/health")
    assert status == 503 and "no validator state" in strict(body)["error"]


def test_nan_figures_come_out_as_null_not_invalid_json(tmp_path):
    state = make_state(tmp_path)
    con = sqlite3.connect(state / DB_NAME)
    con.execute("UPDATE evidence SET speedup=? WHERE contribution_id=?", (float("inf"), cid("good")))  # NaN: NULL
    detail = arena_detail()
    detail["speed"]["bar"] = float("nan")
    con.execute("UPDATE evidence SET detail=? WHERE contribution_id=?", (json.dumps(detail), cid("good")))
    con.commit()
    con.close()
    [(s1, _, b1), (s2, _, b2), (s3, _, _)] = fetch(
        state, "/api/contributions", f"/api/contributions/{cid('good')}", f"/contributions/{cid('good')}"
    )
    assert s1 == s2 == s3 == 200
    assert strict(b1)["contributions"][-1]["evidence"][0]["speedup"] is None
    res = strict(b2)["contribution"]["evidence"][0]["stages"][0]
    assert res["name"] == "resident" and res["bar"] is None and len(res["windows"]) == 13
