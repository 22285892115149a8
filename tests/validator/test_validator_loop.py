"""loop.py + publish.py on a LocalChain: flaky chain, version key, rate limit, read-back,
crash-resolution of pending weights, retries and give-up paths."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from validator_fakes import (
    EXAMPLES,
    NETUID,
    VALIDATOR,
    FakeQualifier,
    FileServer,
    commit,
    fake_screener,
    make_archive,
    make_chain,
)

from cacheon_subnet import __spec_version__
from cacheon_subnet.chain import ChainUnavailable, RateLimited, WeightsReceipt
from cacheon_subnet.netpolicy import LOCAL
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.fetch import FetchError
from cacheon_subnet.validator.loop import Validator, ValidatorConfig
from cacheon_subnet.validator.publish import PublishPolicy
from cacheon_subnet.validator.state import TARGETS_KEY

TARGETS = ("norm.rmsnorm", "activation.silu_and_mul", "rope.neox")


class Recording:
    """Delegates to a backend, records calls; subclasses bend individual calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def call(*args: Any, **kw: Any) -> Any:
            self.calls.append((name, args))
            return self.before(name) or fn(*args, **kw)

        return call

    def before(self, name: str) -> Any:
        return None

    def sent(self) -> list[tuple]:
        return [a for n, a in self.calls if n == "set_weights"]


class Flaky(Recording):
    def __init__(self, inner: Any, p: float, seed: int) -> None:
        super().__init__(inner)
        self.p, self.rng, self.raised = p, random.Random(seed), 0

    def before(self, name: str) -> Any:
        if self.rng.random() < self.p:
            self.raised += 1
            raise ChainUnavailable(f"flaky: {name} dropped")
        return None


class DropsWeights(Recording):
    """Accepts set_weights and returns a receipt, but the chain never stores them."""

    def __getattr__(self, name: str) -> Any:
        if name == "set_weights":

            def fake(hotkey, netuid, uids, weights, version_key):
                self.calls.append(("set_weights", (hotkey, netuid, uids, weights, version_key)))
                return WeightsReceipt(self.inner.current_block(), version_key, tuple(uids), tuple(weights))

            return fake
        return super().__getattr__(name)


@pytest.fixture(scope="module")
def srv():
    with FileServer() as s:
        yield s


@pytest.fixture
def world(tmp_path, srv):
    """A frozen chain (WeightsVersionKey 29, rate limit 5) with two miners' commitments."""
    chain = make_chain(tmp_path / "chain.db", version_key=29, rate_limit=5, miners=4)
    a, da = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, "a", {"speed.txt": "1.2"})
    s, ds = make_archive(EXAMPLES / "activation.silu_and_mul", tmp_path, "s", {"speed.txt": "1.1"})
    commit(chain, "m0", da, srv.add(f"{tmp_path.name}-a.tar.gz", a))
    commit(chain, "m1", ds, srv.add(f"{tmp_path.name}-s.tar.gz", s))
    chain.advance(2)
    return {"chain": chain, "tmp": tmp_path, "digests": (da, ds)}


def make(world, backend=None, qualifier=None, fetcher=None, **cfg) -> Validator:
    opts = {
        "interval_s": 0,
        "targets": TARGETS,
        "retry_base_s": 0.0,
        "retry_max_s": 0.0,
        "chain_backoff_base_s": 0.01,
        "chain_call_retry_s": 0.0,
        "url_policy": LOCAL,
        **cfg,
    }
    config = ValidatorConfig(netuid=NETUID, hotkey=VALIDATOR, state_dir=world["tmp"] / "state", **opts)
    return Validator(
        config, backend or world["chain"], qualifier or FakeQualifier(), screener=fake_screener(), fetcher=fetcher
    )


def test_full_pass_crowns_and_publishes_with_the_code_spec_version(world):
    rec = Recording(world["chain"])
    v = make(world, rec)
    s = v.run_once()
    assert s.idle and s.weights == "verified" and set(s.crowns_changed) == {"norm.rmsnorm", "activation.silu_and_mul"}
    ((hotkey, netuid, uids, vals, version_key),) = rec.sent()
    assert version_key == __spec_version__ > 29  # this code's spec version, above the chain's floor (29)
    row = ledger.last_weights(v.db)
    assert row.state == "verified" and row.version_key == __spec_version__ and row.block is not None
    assert uids == [0, 2, 3]  # owner burn + the two crown holders (uids 2 and 3)
    assert world["chain"].get_weights(NETUID, VALIDATOR)
    assert v.db.get(TARGETS_KEY) == json.dumps(list(TARGETS))  # the leaderboard lists every one


def test_owner_retires_old_validators_by_raising_the_version_key(world):
    """The owner's lever: weights_version_key above this code's spec version -> nothing is sent
    ("outdated", no chain call); at our version -> sent again with it."""
    rec = Recording(world["chain"])
    v = make(world, rec)
    v.run_once()
    from cacheon_subnet.validator.publish import Publisher

    v.stages.publish.publisher = Publisher(
        v.db, v.chain, NETUID, VALIDATOR, TARGETS, v.cfg.weights, PublishPolicy(interval_blocks=1)
    )
    world["chain"].set_hyperparams(NETUID, weights_version_key=__spec_version__ + 1)
    world["chain"].advance(5)
    before = len(rec.sent())
    s = v.run_once()
    assert s.weights == "outdated" and len(rec.sent()) == before
    world["chain"].set_hyperparams(NETUID, weights_version_key=__spec_version__)
    world["chain"].advance(5)
    assert v.run_once().weights == "verified" and len(rec.sent()) == before + 1
    assert ledger.last_weights(v.db).version_key == __spec_version__


def test_dry_run_does_everything_but_set_weights(world):
    from dataclasses import replace

    rec = Recording(world["chain"])
    v = make(world, rec)
    v.stages.publish.publisher = type(v.stages.publish.publisher)(
        v.db, v.chain, NETUID, VALIDATOR, TARGETS, v.cfg.weights, replace(v.cfg.publish, dry_run=True)
    )
    s = v.run_once()
    assert s.weights == "dry_run" and set(s.crowns_changed) == {"norm.rmsnorm", "activation.silu_and_mul"}
    assert rec.sent() == [] and ledger.last_weights(v.db) is None and not world["chain"].get_weights(NETUID, VALIDATOR)


def test_flaky_chain_never_crashes_and_eventually_publishes(world):
    flaky = Flaky(world["chain"], p=0.35, seed=7)
    v = make(world, flaky)
    errors = 0
    for _ in range(60):
        s = v.run_once()  # must never raise
        errors += s.chain_error is not None
        assert s.next_delay_s > 0 or s.chain_error is None
        if s.idle and ledger.last_weights(v.db) and ledger.last_weights(v.db).state == "verified":
            break
        world["chain"].advance(1)
    assert errors > 0 and flaky.raised > 0
    assert ledger.last_weights(v.db).state == "verified"
    n = v.db.con.execute("SELECT COUNT(*) FROM chain_errors WHERE error_type='ChainUnavailable'").fetchone()[0]
    assert n == flaky.raised  # every failure is in the log
    assert {c.state for c in v.db.contributions()} == {"qualified"}


def test_backoff_grows_with_consecutive_chain_failures(world):
    class Down(Recording):
        def before(self, name):
            raise ChainUnavailable("down")

    v = make(world, Down(world["chain"]), chain_backoff_base_s=1.0, chain_backoff_max_s=8.0)
    delays = [v.run_once().next_delay_s for _ in range(6)]
    assert all(0.5 <= d <= 8.0 for d in delays)
    assert delays[-1] >= 4.0 and delays[0] <= 1.0  # 1, 2, 4, 8, 8, 8 with jitter in [0.5, 1]
    assert {c.state for c in v.db.contributions()} == set()  # no sync, nothing fetched


def test_rate_limit_is_waited_for_not_an_error(world, srv):
    rec = Recording(world["chain"])
    world["chain"].set_hyperparams(NETUID, weights_rate_limit=50)
    v = make(world, rec)
    assert v.run_once().weights == "verified"
    r, dr = make_archive(EXAMPLES / "rope.neox", world["tmp"], "r", {"speed.txt": "1.3"})
    commit(world["chain"], "m2", dr, srv.add(f"{world['tmp'].name}-r.tar.gz", r))
    world["chain"].advance(2)
    s = v.run_once()
    assert s.crowns_changed == ("rope.neox",) and s.weights == "rate_limited" and s.chain_error is None
    assert len(rec.sent()) == 1  # nothing was sent into the chain's rate limit
    world["chain"].advance(50)
    assert v.run_once().weights == "verified" and len(rec.sent()) == 2


def test_rate_limited_answer_from_chain_defers(world):
    class Racy(Recording):
        def before(self, name):
            if name == "set_weights":
                raise RateLimited("SettingWeightsTooFast", retry_in_blocks=3)

    v = make(world, Racy(world["chain"]))
    s = v.run_once()
    assert s.weights == "deferred" and s.chain_error is None
    assert ledger.last_weights(v.db).state == "deferred"


def test_readback_catches_silently_dropped_weights(world):
    v = make(world, DropsWeights(world["chain"]))
    s = v.run_once()
    row = ledger.last_weights(v.db)
    assert s.weights == "failed" and row.state == "failed" and "read-back mismatch" in row.reason
    assert row.readback["chain"] == {}


def test_pending_weights_that_landed_before_a_crash_are_not_sent_again(world):
    v = make(world)
    v.run_once()
    world["chain"].advance(10)
    uids, vals = v.stages.publish.publisher.desired(world["chain"].current_block())
    # crash window: the pending row is written and the extrinsic lands, the process dies before recording it
    row = ledger.open_weights(v.db, world["chain"].current_block(), 29, uids, vals)
    world["chain"].set_weights(VALIDATOR, NETUID, list(uids), [float(x) for x in vals], 29)
    v.close()  # the process died
    rec = Recording(world["chain"])
    v2 = make(world, rec)
    assert v2.run_once().weights == "verified"
    assert rec.sent() == [] and ledger.last_weights(v2.db).id == row.id


def test_pending_weights_that_never_landed_are_resent_on_the_same_row(world):
    v = make(world)
    v.run_once()
    world["chain"].advance(10)
    uids, vals = v.stages.publish.publisher.desired(world["chain"].current_block())
    # crash window: the pending row is written, the process dies before set_weights goes out
    row = ledger.open_weights(v.db, world["chain"].current_block(), 29, uids, vals)
    v.close()
    rec = Recording(world["chain"])
    v2 = make(world, rec)
    assert v2.run_once().weights == "verified" and len(rec.sent()) == 1
    rows = ledger.weights_rows(v2.db)
    assert [(w.id, w.state, w.attempts) for w in rows][-1] == (row.id, "verified", 2)
    assert len(rows) == 2  # the first publication and this one; no extra row for the re-send


def test_transient_fetch_failures_retry_then_fail(world):
    calls = []

    async def down(url, digest, cache, policy, session):
        calls.append(url)
        raise FetchError("connect", "refused", transient=True)

    v = make(world, fetcher=down, max_attempts=3)
    for _ in range(3):
        v.run_once()
    cs = v.db.contributions()
    assert len(calls) == 6 and all(c.state == "failed" and "gave up after 3 attempts" in c.reason for c in cs)


def test_qualifier_crash_is_no_decision_not_failed(world):
    class Broken:
        arena_id, label = "broken", "broken"

        def qualify(self, bundle, op, incumbent):
            raise RuntimeError("GPU fell off the bus")

    v = make(world, qualifier=Broken(), max_attempts=2)
    v.run_once()
    v.run_once()
    assert {(c.state, c.reason.split(":")[0]) for c in v.db.contributions()} == {("no_decision", "qualify")}
    assert ledger.crowns(v.db) == []


def test_malformed_and_unknown_content_never_crash_the_loop(world):
    chain = world["chain"]
    chain.register("junk", "cj")
    chain.commit("junk", NETUID, '{"v":1,"d":"zz"}', 1)
    chain.advance(2)
    v = make(world)
    s = v.run_once()
    assert s.chain_error is None
    junk = [c for c in v.db.contributions() if c.hotkey == "junk"]
    assert junk[0].state == "failed" and junk[0].rule == "malformed"


@pytest.mark.slow
def test_real_verify_screener_on_cpu(world, srv):
    """The default screener is verify_bundle in the sandbox on CPU: real kernels pass, the
    broken control fails with verify's own reason."""
    w, dw = make_archive(EXAMPLES / "controls" / "wrong_math", world["tmp"], "w")
    commit(world["chain"], "m3", dw, srv.add(f"{world['tmp'].name}-w.tar.gz", w))
    world["chain"].advance(2)
    config = ValidatorConfig(
        netuid=NETUID, hotkey=VALIDATOR, state_dir=world["tmp"] / "real", interval_s=0, targets=TARGETS, verify_max_cases=1
    )
    v = Validator(config, world["chain"], FakeQualifier())
    s = v.run_once()
    assert s.moved.get("verified") == 2
    by_hotkey = {c.hotkey: c for c in v.db.contributions()}
    assert by_hotkey["m0"].state == by_hotkey["m1"].state == "qualified"
    assert by_hotkey["m3"].state == "failed" and by_hotkey["m3"].reason.startswith("verify:")
    assert "mismatch" in by_hotkey["m3"].reason


def test_chain_refusal_marks_the_publication_failed(world):
    world["chain"].set_stake(VALIDATOR, 1000.0, validator_permit=False)
    v = make(world)
    s = v.run_once()
    # definitive: not a chain outage (no pass backoff), but the pass failed and says why
    assert s.chain_error is None and s.weights == "refused" and not s.ok
    assert any("validator permit" in p for p in s.problems)
    row = ledger.last_weights(v.db)
    assert row.state == "failed" and "validator permit" in row.reason
    err = v.db.con.execute("SELECT op, error_type FROM chain_errors").fetchone()
    assert tuple(err) == ("set_weights", "ChainError")


def test_run_forever_survives_a_buggy_pass_and_stops_on_request(world):
    import threading

    v = make(world)
    boom = {"n": 0}
    real = v.stages.settle

    class FlakySettle:  # a stage like any other (stages/ports.Stage): a bug in its first pass
        name = "settle"

        def run(self, ps):
            boom["n"] += 1
            if boom["n"] == 1:
                raise RuntimeError("bug in settlement")
            real.run(ps)

    v.order = tuple(FlakySettle() if s is real else s for s in v.order)
    v.cfg = ValidatorConfig(**{**v.cfg.__dict__, "interval_s": 0.01, "chain_backoff_base_s": 0.01})
    stop = threading.Event()
    t = threading.Thread(target=v.run_forever, args=(stop,))
    t.start()
    for _ in range(200):
        last = ledger.last_weights(v.db)
        if boom["n"] >= 2 and last is not None and last.state == "verified":
            break
        threading.Event().wait(0.02)
    stop.set()
    t.join(5)
    assert not t.is_alive() and boom["n"] >= 2
    assert ledger.last_weights(v.db).state == "verified"


def test_one_validator_per_state_dir(world):
    from cacheon_subnet.validator.state import StateError

    v = make(world)
    with pytest.raises(StateError, match="another validator process"):
        make(world)
    v.close()
    make(world).close()  # released on close (and by the OS on kill -9)


def test_head_to_head_qualifier_gets_the_incumbents_bundle(world, srv):
    """A GPU arena runs the crowned kernel in its baseline windows: the loop hands it over."""
    seen = []

    class HeadToHead(FakeQualifier):
        head_to_head = True

        def qualify(self, bundle, op, incumbent, incumbent_bundle=None):
            seen.append(
                (
                    op.slot,
                    incumbent.contribution_id if incumbent else None,
                    incumbent_bundle.digest if incumbent_bundle else None,
                )
            )
            return super().qualify(bundle, op, incumbent)

    v = make(world, qualifier=HeadToHead())
    v.run_once()
    da, _ = world["digests"]
    assert ("norm.rmsnorm", None, None) in seen  # the first crown is measured against stock
    b, db = make_archive(EXAMPLES / "norm.rmsnorm", world["tmp"], "b", {"speed.txt": "1.5", "salt.txt": "b"})
    commit(world["chain"], "m2", db, srv.add(f"{world['tmp'].name}-b.tar.gz", b))
    world["chain"].advance(2)
    seen.clear()
    v.run_once()
    crown = next(c for c in ledger.crowns(v.db) if c.target == "norm.rmsnorm")
    inc_rows = [s for s in seen if s[0] == "norm.rmsnorm"]
    assert inc_rows and inc_rows[0][2] == da  # the incumbent's own archive, from the cache
    assert crown.speedup_vs_stock == pytest.approx(1.5)
