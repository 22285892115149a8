"""A validator that runs passes with every file descriptor of its process taken (the state a
connection flood left it in before the leaderboard moved out: issue 30), then with them freed.
Prints one JSON line per pass; tests/validator/test_overlap.py reads them. Not a test itself."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validator_fakes import NETUID, VALIDATOR, FakeQualifier, fake_screener  # noqa: E402

from cacheon_subnet.chain import LocalChain  # noqa: E402
from cacheon_subnet.netpolicy import LOCAL  # noqa: E402
from cacheon_subnet.validator.loop import Validator, ValidatorConfig  # noqa: E402


def main() -> None:
    state, chain_path, starved = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = ValidatorConfig(
        netuid=NETUID,
        hotkey=VALIDATOR,
        state_dir=Path(state),
        interval_s=0,
        targets=("norm.rmsnorm",),
        retry_base_s=0.0,
        retry_max_s=0.0,
        url_policy=LOCAL,
        max_attempts=1000,
    )
    v = Validator(cfg, LocalChain.open(chain_path), FakeQualifier(), screener=fake_screener())
    every = v.order
    v.order = (v.stages.sync, v.stages.fetch)  # prime: intake + fetch only
    v.run_once()
    v.order = every
    print(json.dumps({"primed": v.db.counts()}), flush=True)
    hog: list[int] = []
    try:
        while True:
            hog.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    for i in range(starved):
        try:
            s = v.run_once()
            row = {"pass": i, "starved": True, "ok": s.ok, "problems": list(s.problems), "failed": s.failed}
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            row = {"pass": i, "starved": True, "crashed": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(row), flush=True)
    for fd in hog:
        os.close(fd)
    attempts = v.db.contributions()[0].attempts
    s = v.run_once()
    c = v.db.contributions()[0]
    print(
        json.dumps(
            {
                "pass": starved,
                "starved": False,
                "ok": s.ok,
                "problems": list(s.problems),
                "counts": v.db.counts(),
                "attempts_seen": attempts,
                "transitions": _moves(v, c.id),
            }
        ),
        flush=True,
    )
    v.close()


def _moves(v: Validator, cid: str) -> list[str]:
    rows = v.db.con.execute("SELECT to_state FROM transitions WHERE contribution_id=? ORDER BY id", (cid,))
    return [r[0] for r in rows]


if __name__ == "__main__":
    main()
