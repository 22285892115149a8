"""The leaderboard page in a real browser (headless Chromium, Debian's `chromium`): the DOM it
builds has the crown rows, and its screenshot is the requested size and not blank. Controls: a
state without crowns yields no crown rows, and a blank page fails the screenshot check.

Skipped only where chromium is absent and CACHEON_REQUIRE_CHROMIUM is unset; .ci/run installs
chromium and sets it, so in CI a missing browser is a failure, not a skip."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pytest
from board_fixtures import make_state

from cacheon_subnet.validator.state import StateDB
from cacheon_subnet.validator.web.server import Leaderboard

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SIZE = (1024, 768)
if CHROMIUM is None and os.environ.get("CACHEON_REQUIRE_CHROMIUM"):
    raise RuntimeError("CACHEON_REQUIRE_CHROMIUM is set but no chromium is on PATH (apt-get install -y chromium)")
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed here (apt-get install -y chromium); .ci/run installs it so this runs in CI",
    ),
    pytest.mark.slow,
]
CROWN_ROW = re.compile(r'<tr class="crown" data-slot="([^"]+)">')


def chromium(tmp: Path, name: str, *args: str) -> subprocess.Popen:
    profile = tmp / f"profile-{name}"  # one per process: two chromiums on one profile exit 21
    return subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def png_size_and_pixels(path: Path) -> tuple[tuple[int, int], bytes]:
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, size = 8, b"", (0, 0)
    while pos < len(raw):
        n, kind = struct.unpack(">I4s", raw[pos : pos + 8])
        body = raw[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    return size, zlib.decompress(idat)


def looks_rendered(pixels: bytes) -> bool:
    """Not one flat colour: a blank page's scanlines are a handful of byte values."""
    counts = Counter(pixels)
    return len(counts) > 32 and 1 - counts.most_common(1)[0][1] / len(pixels) > 0.01


def shoot(tmp: Path, dom_url: str, shot_url: str) -> tuple[str, Path]:
    """DOM dump of one page and a screenshot of another, in parallel (each chromium takes ~2 s)."""
    shot = tmp / "page.png"
    dom = chromium(tmp, "dom", "--dump-dom", dom_url)
    pic = chromium(tmp, "shot", f"--window-size={SIZE[0]},{SIZE[1]}", f"--screenshot={shot}", shot_url)
    out, _ = dom.communicate(timeout=90)
    pic.wait(timeout=90)
    assert dom.returncode == 0 and pic.returncode == 0, (dom.returncode, pic.returncode)
    return out, shot


def test_page_renders_the_crowns_in_chromium(tmp_path):
    state = make_state(tmp_path)
    with Leaderboard(state, "127.0.0.1", 0) as board:
        dom, shot = shoot(tmp_path, board.url + "/", board.url + "/")
    assert CROWN_ROW.findall(dom) == ["norm.rmsnorm"]
    assert dom.count('<tr class="contribution">') == 3 and "×1.0520 vs stock" in dom
    assert "<script" not in dom  # the hostile hotkey stayed text in the browser's DOM too
    size, pixels = png_size_and_pixels(shot)
    assert size == SIZE and looks_rendered(pixels)


def test_controls_no_crowns_and_a_blank_page_are_caught(tmp_path):
    empty = tmp_path / "empty"
    StateDB(empty).close()
    with Leaderboard(empty, "127.0.0.1", 0) as board:
        dom, shot = shoot(tmp_path, board.url + "/", "about:blank")
    assert CROWN_ROW.findall(dom) == [] and 'id="no-crowns"' in dom
    size, pixels = png_size_and_pixels(shot)
    assert size == SIZE and not looks_rendered(pixels)


SS58 = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"
MEASURE = """<script>
window.onload = () => {
  const cells = [];
  for (const td of document.querySelectorAll('td.mono')) {
    const tops = new Set();
    const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    while (walk.nextNode()) {
      if (!walk.currentNode.textContent.trim()) continue;
      const r = document.createRange(); r.selectNodeContents(walk.currentNode);
      for (const x of r.getClientRects()) tops.add(Math.round(x.top));
    }
    cells.push([td.textContent.trim(), tops.size]);
  }
  const pre = document.createElement('pre'); pre.id = 'measured';
  pre.textContent = JSON.stringify({overflow: document.documentElement.scrollWidth - window.innerWidth, cells});
  document.body.appendChild(pre);
};
</script></body>"""


def measure(tmp: Path, html: str) -> dict:
    """Lines each mono cell's text takes and how far the page overflows the window, as laid out
    by Chromium at SIZE (a measuring script added to the page for this test only)."""
    import html as html_mod
    import json

    f = tmp / "measure.html"
    f.write_text(html.replace("</body>", MEASURE))
    p = chromium(
        tmp, "measure", f"--window-size={SIZE[0]},{SIZE[1]}", "--virtual-time-budget=3000", "--dump-dom", f.as_uri()
    )
    out, _ = p.communicate(timeout=90)
    got = re.search(r'<pre id="measured">(.*?)</pre>', out, re.S)
    assert got, out[-2000:]
    return json.loads(html_mod.unescape(got.group(1)))


def test_hotkeys_keep_whole_and_a_hostile_one_wraps_inside_the_window(tmp_path):
    """An SS58 hotkey broke into 6 lines of a squeezed column (`overflow-wrap: anywhere` let the
    table shrink it to nothing); now it stays on one line, and a 300-character name (a local chain
    takes any) wraps within its column without pushing the page past the window."""
    from cacheon_subnet.validator.web import data, page
    from cacheon_subnet.webapi import SCHEMA

    state = make_state(tmp_path)
    db = StateDB(state)
    with db.tx() as con:
        for n, hk in enumerate((SS58, "z" * 300)):
            db.insert(
                con, cid=f"{n}" * 64, hotkey=hk, uid=9 + n, commit_block=50 + n, reveal_block=51 + n,
                url="https://example.com/x.tar.gz", digest="cd" * 32, state="queued", reason="queued " * 60,
            )  # fmt: skip
    db.close()
    got = measure(tmp_path, page.index(data.crowns(state), data.contributions(state), SCHEMA))
    lines = dict(got["cells"])
    assert lines[SS58] == 1 and lines["z" * 300] > 1, got
    assert got["overflow"] <= 0, got
    assert all(lines[s] == 1 for s in ("collective.ar_residual_rmsnorm", "norm.rmsnorm")), got  # slot names too
