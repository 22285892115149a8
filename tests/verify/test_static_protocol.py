"""The static check's pipe (cacheon_subnet/verify/static/protocol.py): every frame survives its
round trip, the host's decoder refuses each kind of hostile frame with a FrameError naming frame
and field, and bound.py turns a refused frame into a P022 finding (fail closed), never a crash,
a lenient read or a PASS."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import EXAMPLES

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.verify.static import bound
from cacheon_subnet.verify.static import protocol as S

FRAMES = [
    S.At("starting", "", 0.01),
    S.At("checking", "pkg/kernel.py", 0.2),
    S.Findings(("kernel.py:3: P001 import: os",), 0.3),
    S.Findings((), 0),
    S.Identity("norm-" + "0" * 64, 0.4),
    S.Identity(None, 0.4),
    S.Done(0.5),
    S.Crash("RecursionError: maximum recursion depth exceeded", 0.6),
]


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: type(f).__name__)
def test_every_frame_round_trips(frame):
    line = S.frame_line(frame)
    assert line.startswith(S.FRAME) and "\n" not in line
    assert S.read_frame(line[len(S.FRAME) :].encode()) == frame


def test_the_payload_head_round_trips():
    head = S.Head(("a.py", "manifest.toml"), (S.PyFile("a.py", 12),), 40, True, {"README.md": "ab" * 32})
    assert S.read_head(S.head_line(head)) == head


def at(**kw):
    return {"frame": "at", "step": "checking", "path": "k.py", "cpu": 0.1, **kw}


HOSTILE = [
    # (the line after FRAME, frame named, field named, words of the detail)
    (b"[1]", "?", "frame", "expected an object"),
    (b"not json", "?", "-", "not a JSON object (JSONDecodeError)"),
    (b"[" * 100_000 + b"]" * 100_000, "?", "-", "not a JSON object (RecursionError)"),
    (json.dumps({"frame": "pass", "cpu": 0}).encode(), "pass", "frame", "unknown message kind"),
    (json.dumps({"findings": [], "cpu": 0}).encode(), "None", "frame", "unknown message kind"),
    (json.dumps({"frame": "done"}).encode(), "done", "cpu", "missing key 'cpu'"),
    (json.dumps({"frame": "identity", "cpu": 0}).encode(), "identity", "identity", "missing key 'identity'"),
    (json.dumps(at(extra=1)).encode(), "at", "extra", "unknown key"),
    (json.dumps(at(step=["checking"])).encode(), "at", "step", "expected str"),
    (json.dumps(at(cpu=True)).encode(), "at", "cpu", "expected a number"),
    (json.dumps(at(cpu="1.0")).encode(), "at", "cpu", "expected a number"),
    (json.dumps(at(cpu=float("nan"))).encode(), "at", "cpu", "finite"),
    (json.dumps(at(cpu=float("inf"))).encode(), "at", "cpu", "finite"),
    (json.dumps(at(path="p" * (S.PATH_CHARS + 1))).encode(), "at", "path", "over the 1024 allowed"),
    (json.dumps({"frame": "findings", "findings": "none", "cpu": 0}).encode(), "findings", "findings", "a list"),
    (json.dumps({"frame": "findings", "findings": ["a", 5], "cpu": 0}).encode(), "findings", "findings[1]", "str"),
    (json.dumps({"frame": "done", "cpu": 2**70}).encode(), "done", "cpu", "outside 64 bits"),
    (
        json.dumps({"frame": "identity", "identity": "norm-" + "0" * 200, "cpu": 0}).encode(),
        "identity",
        "identity",
        "over the 128 allowed",
    ),
    (json.dumps({"frame": "crash", "crash": "x" * 5000, "cpu": 0}).encode(), "crash", "crash", "over the 1024"),
]


@pytest.mark.parametrize("line, kind, field, words", HOSTILE, ids=lambda x: str(x)[:30] if isinstance(x, str) else None)
def test_the_hosts_decoder_refuses_each_hostile_frame_naming_frame_and_field(line, kind, field, words):
    with pytest.raises(S.FrameError) as err:
        S.read_frame(line)
    e = err.value
    assert (e.kind, e.field) == (kind, field) and words in e.detail, (e.kind, e.field, e.detail)


HONEST = load_bundle(EXAMPLES / "norm.rmsnorm")


def _child(body: str):
    """A child that reads the payload like the real one, then runs `body` in place of the scan
    (`c`: the child module, `raw(text)`: one frame line as a forger writes it)."""
    code = (
        "import sys\nimport cacheon_subnet.verify.static.child as c\n"
        "from cacheon_subnet.verify.static.protocol import FRAME\n"
        "def raw(text):\n    sys.stdout.write(FRAME + text + '\\n')\n    sys.stdout.flush()\n"
        "def run(head, files, manifest):\n" + "".join(f"    {line}\n" for line in body.splitlines()) + "c.run = run\n"
        "sys.exit(c.main(sys.argv[1:]))\n"
    )
    return lambda fd: [sys.executable, "-c", code, "--fd", str(fd)]


@pytest.mark.parametrize(
    "body, field",
    [
        # a complete, clean answer but for one frame a lenient reader would take as it is
        (
            'c._emit(c.Findings(()))\nraw(\'{"frame": "identity", "identity": "norm-\' + \'0\' * 500 + \'", "cpu": 0}\')',
            "identity",
        ),
        (
            'c._emit(c.Findings(()))\nc._emit(c.Identity(\'norm-0\'))\nraw(\'{"frame": "at", "step": 1, "path": "", "cpu": 0}\')',
            "step",
        ),
        (
            'raw(\'{"frame": "findings", "findings": [], "cpu": 0, "verdict": "pass"}\')\nc._emit(c.Identity(\'norm-0\'))',
            "verdict",
        ),
    ],
    ids=["oversized-identity", "mistyped-step", "unknown-key"],
)
def test_a_refused_frame_fails_the_bundle_with_a_named_p022(monkeypatch, body, field):
    bound.forget()
    monkeypatch.setattr(bound, "_argv", _child(body))
    res = bound.static_check(HONEST, identity=True, walled=False)
    assert not res.passed and res.norm_id is None and res.breach is not None, res
    assert "the static scan sent a frame the host refuses" in res.breach and f"field {field}" in res.breach, res.breach
    assert " P022 " in res.findings[-1], res.findings
    bound.forget()


def test_a_child_whose_only_frame_is_refused_started_and_fails_the_bundle(monkeypatch):
    """Not the host's "never started" (that falls back or raises SandboxError): it wrote a frame."""
    bound.forget()
    code = 'import sys\nsys.stdout.write(\'#cacheon-static {"frame": "at"}\\n\')\n'
    monkeypatch.setattr(bound, "_argv", lambda fd: [sys.executable, "-c", code, "--fd", str(fd)])
    res = bound.static_check(HONEST, identity=True, walled=False)
    assert not res.passed and "frame the host refuses while starting: at frame, field" in (res.breach or ""), res
    bound.forget()


def test_the_real_child_answers_in_frames_the_host_accepts():
    bound.forget()
    res = bound.static_check(HONEST, identity=True, walled=False)
    assert res.passed and res.identity_done and res.norm_id is not None and res.norm_id.startswith("norm-"), res
    bound.forget()
