"""The validator settles a renamed / reformatted copy of a judged contribution from the earlier
verdict without re-timing it (stages/screen.ScreenStage + validator/copies.py); a genuinely changed
kernel is timed; an earlier commit screened late takes the claim over (earliest commit first)."""

from __future__ import annotations

import shutil

from validator_fakes import EXAMPLES, NETUID, VALIDATOR, FakeQualifier, FileServer, commit, fake_screener, make_chain

from cacheon_subnet.bundle import pack
from cacheon_subnet.validator.loop import Validator, ValidatorConfig
from cacheon_subnet.validator.state import SCHEMA_VERSION, StateDB

SRC = (EXAMPLES / "norm.rmsnorm" / "rmsnorm.py").read_text()


class Counting(FakeQualifier):
    def __init__(self) -> None:
        object.__setattr__(self, "seen", [])

    def qualify(self, bundle, op, incumbent):
        self.seen.append(bundle.digest)
        return super().qualify(bundle, op, incumbent)


def archive(tmp, name: str, src: str, module: str = "rmsnorm"):
    work = tmp / f"src-{name}"
    shutil.copytree(EXAMPLES / "norm.rmsnorm", work)
    (work / "rmsnorm.py").unlink()
    (work / f"{module}.py").write_text(src)
    man = (work / "manifest.toml").read_text().replace('entry = "rmsnorm:rmsnorm"', f'entry = "{module}:rmsnorm"')
    (work / "manifest.toml").write_text(man.replace('name = "triton-rmsnorm"', f'name = "{name}"'))
    (work / "speed.txt").write_text("1.2")
    out = tmp / f"{name}.tar.gz"
    return out, pack(work, out).digest


RENAMED = (
    SRC.replace("_rmsnorm_kernel", "_my_kernel")
    .replace("rstd", "inv_rms")
    .replace("cols", "offs")
    .replace('"""Faithful Triton RMSNorm', '# mine\n"""Original work: RMSNorm')
)
CHANGED = SRC.replace("rstd = 1.0 / tl.sqrt(var + eps)", "rstd = 1.0 / tl.sqrt(var + 2 * eps)")


def run(tmp, commits):
    chain = make_chain(tmp / "chain.db", miners=4)
    with FileServer() as srv:
        for hk, (path, digest) in commits:
            commit(chain, hk, digest, srv.add(f"{tmp.name}-{path.name}", path))
            chain.advance(1)
        chain.advance(2)
        q = Counting()
        cfg = ValidatorConfig(
            netuid=NETUID,
            hotkey=VALIDATOR,
            state_dir=tmp / "state",
            interval_s=0,
            targets=("norm.rmsnorm",),
            retry_base_s=0.0,
            retry_max_s=0.0,
        )
        v = Validator(cfg, chain, q, screener=fake_screener())
        v.run_once()
        rows = {r["hotkey"]: dict(r) for r in v.db.con.execute("SELECT * FROM contributions")}
        v.close()
    return q, rows


def test_renamed_copy_is_settled_without_timing_and_a_changed_kernel_is_timed(tmp_path):
    orig, copy, changed = (
        archive(tmp_path, "orig", SRC),
        archive(tmp_path, "copy", RENAMED, "fast"),
        archive(tmp_path, "changed", CHANGED),
    )
    assert len({orig[1], copy[1], changed[1]}) == 3  # three different byte digests
    q, rows = run(tmp_path, [("m0", orig), ("m1", copy), ("m2", changed)])
    assert rows["m0"]["state"] == "qualified" and rows["m2"]["state"] == "qualified"
    assert rows["m1"]["state"] == "failed" and rows["m1"]["rule"] == "duplicate"
    assert rows["m1"]["duplicate_of"] == rows["m0"]["id"] and "not re-timed" in rows["m1"]["reason"]
    assert rows["m1"]["norm_id"] == rows["m0"]["norm_id"] != rows["m2"]["norm_id"]
    assert sorted(q.seen) == sorted([orig[1], changed[1]])  # the copy never reached the arena


def test_migration_adds_the_column_to_a_schema_1_db(tmp_path):
    import sqlite3

    from cacheon_subnet.validator import state

    d = tmp_path / "s"
    d.mkdir()
    con = sqlite3.connect(d / state.DB_NAME)
    con.execute("CREATE TABLE schema_version(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    for stmt in state.MIGRATIONS[0]:
        con.execute(stmt)
    con.execute("INSERT INTO schema_version VALUES (1, 0)")
    con.execute(
        "INSERT INTO contributions(id, hotkey, commit_block, state, created_at, updated_at)"
        " VALUES ('x', 'h', 1, 'queued', 0, 0)"
    )
    con.commit()
    con.close()
    db = StateDB(d)
    assert db.schema_version() == SCHEMA_VERSION == 3
    assert db.contribution("x").norm_id is None  # old rows: no identity until screened


def test_an_earlier_commit_screened_late_takes_the_claim_over(tmp_path):
    """Out of order: the later commit was screened (and crowned) first; the earlier one's
    screening makes the later one the copy, voids its unsettled evidence, moves its crown."""
    from cacheon_subnet.bundle import bundle_from_files
    from cacheon_subnet.validator.copies import settle_copy

    man = (EXAMPLES / "norm.rmsnorm" / "manifest.toml").read_text()
    early = bundle_from_files({"rmsnorm.py": SRC.encode(), "manifest.toml": man.encode()})
    late = bundle_from_files(
        {"fast.py": RENAMED.encode(), "manifest.toml": man.replace("rmsnorm:rmsnorm", "fast:rmsnorm").encode()}
    )
    db = StateDB(tmp_path / "s")
    with db.tx() as con:
        for cid, hk, block, d in (("late", "h2", 20, late.digest), ("early", "h1", 10, early.digest)):
            db.insert(
                con, cid=cid, hotkey=hk, uid=None, commit_block=block, reveal_block=block, url="u", digest=d, state="fetched"
            )
        con.execute("INSERT INTO crowns VALUES ('norm.rmsnorm', 'h2', 'late', 20, 25, 1.2, 1.2, 'a', NULL, 0)")
    with db.tx() as con:
        assert settle_copy(db, con, db.contribution("late", con), late) is None  # nothing earlier yet
    with db.tx() as con:
        ev = settle_copy(db, con, db.contribution("early", con), early)
    assert ev is not None and ev.contribution_id == "late" and ev.outcome == "swapped"
    assert db.contribution("late").rule == "duplicate" and db.contribution("late").duplicate_of == "early"
    assert db.con.execute("SELECT contribution_id FROM crowns").fetchone()[0] == "early"
    assert db.contribution("early").state == "fetched"  # the loop moves it on to screened
