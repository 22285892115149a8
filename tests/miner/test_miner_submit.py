"""submit + status on a LocalChain with a frozen clock: a faithful bundle is verified, packed,
served and committed sealed; a broken one is refused and commits nothing; status shows what
validators see (pending, revealed, URL health, weights)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from conftest import CONTROLS, EXAMPLES

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.chain import LocalChain, commitment
from cacheon_subnet.miner.serve import archive_name, start_in_thread
from cacheon_subnet.miner.status import miner_status
from cacheon_subnet.miner.submit import (
    MinerStateError,
    SubmitError,
    load_records,
    submit,
)
from cacheon_subnet.netpolicy import LOCAL
from cacheon_subnet.verify import VerifyOptions

NET = 5
FAST = VerifyOptions(device="cpu", max_cases=1, call_timeout_s=60)


@pytest.fixture
def world(tmp_path: Path):
    """Frozen local chain (owner uid 0, validator v1 uid 1, miners m1 uid 2, m2 uid 3),
    a serve dir with a running server, a state dir and a copy of the faithful example."""
    chain = LocalChain.create(tmp_path / "chain.db", netuid=NET, seconds_per_block=0, weights_rate_limit=0)
    chain.register("v1", "cold-v", stake=1000.0, validator_permit=True)
    chain.register("m1", "cold-m1")
    chain.register("m2", "cold-m2")
    serve_dir = tmp_path / "serve"
    serve_dir.mkdir()
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLES / "norm.rmsnorm", bundle)
    srv = start_in_thread(serve_dir)
    yield {"chain": chain, "serve": serve_dir, "srv": srv, "bundle": bundle, "state": tmp_path / "state", "tmp": tmp_path}
    srv.stop()
    chain.close()


def kw(w: dict, **extra) -> dict:
    base = dict(
        backend=w["chain"],
        netuid=NET,
        hotkey="m1",
        serve_dir=w["serve"],
        base_url=w["srv"].base_url,
        reveal_after_blocks=5,
        verify_options=FAST,
        state_dir=w["state"],
    )
    base.update(extra)
    return base


def revealed_of(chain: LocalChain, hotkey: str):
    return [c for c in chain.revealed_commitments(NET) if c.hotkey == hotkey]


@pytest.mark.slow
def test_faithful_bundle_committed_sealed_then_revealed_with_status(world) -> None:
    chain, srv = world["chain"], world["srv"]
    res = submit(world["bundle"], check_url=True, **kw(world))
    digest = res.digest
    assert res.status == "committed" and res.uid == 2
    archive = world["serve"] / archive_name(digest)
    assert Path(res.archive) == archive and archive.is_file()
    assert res.url == srv.url_for(digest)
    assert (res.commit_block, res.reveal_block) == (0, 5)
    assert commitment.parse(res.payload, "m1", LOCAL).digest == digest
    with pytest.raises(commitment.CommitmentError) as err:  # bound to m1, useless to a copier
        commitment.parse(res.payload, "m2", LOCAL)
    assert err.value.reason == "bound_mismatch"
    [rec] = load_records(world["state"])
    assert (rec.digest, rec.url, rec.reveal_block, rec.hotkey) == (digest, res.url, 5, "m1")

    # Sealed: validators see nothing; status knows it from the local record.
    assert revealed_of(chain, "m1") == []
    st = miner_status(chain, NET, "m1", state_dir=world["state"])
    assert st.state == "pending" and st.pending.reveal_block == 5 and st.pending.blocks_left == 5
    assert st.revealed is None
    assert [(p.ok, p.digest) for p in st.probes] == [(True, digest)]
    assert [(w.uid, w.has_row) for w in st.weights] == [(1, False)]

    chain.advance(4)
    assert revealed_of(chain, "m1") == []
    chain.advance(1)
    [c] = revealed_of(chain, "m1")
    assert c.commit_block == 0 and c.reveal_block == 5
    assert commitment.parse(c.data, "m1", LOCAL) == commitment.parse(res.payload, "m1", LOCAL)

    chain.set_weights("v1", NET, [2, 3], [3.0, 1.0], version_key=0)
    st = miner_status(chain, NET, "m1", state_dir=world["state"])
    assert st.state == "revealed" and st.pending is None
    assert (st.revealed.digest, st.revealed.url, st.revealed.reveal_block) == (digest, res.url, 5)
    assert st.probes[0].ok and st.probes[0].digest == digest
    [w] = st.weights
    assert w.hotkey == "v1" and w.has_row and w.weight == pytest.approx(0.75, abs=1e-4)
    text = st.render()
    assert "revealed at block 5" in text and "serves" in text and "0.75" in text
    assert st.to_json()["state"] == "revealed"

    # Same digest + URL again: nothing sent, no verify, the commit block (priority) is kept.
    t0 = time.monotonic()
    again = submit(world["bundle"], **kw(world, verify_options=None, verify_device="cuda"))
    assert time.monotonic() - t0 < 5
    assert again.status == "already_committed" and again.commit_block == 0
    assert "revealed at block 5" in again.note
    assert len(load_records(world["state"])) == 1
    assert revealed_of(chain, "m1")[0].commit_block == 0

    # The archive disappears: status names the failure as validators would hit it.
    archive.unlink()
    st = miner_status(chain, NET, "m1", state_dir=world["state"])
    assert not st.probes[0].ok and st.probes[0].reason == "http_status"


@pytest.mark.slow
def test_broken_bundle_is_refused_and_commits_nothing(world) -> None:
    chain = world["chain"]
    with pytest.raises(SubmitError) as err:
        submit(CONTROLS / "wrong_math", **kw(world))
    e = err.value
    assert e.reason == "verify" and e.codes == ("mismatch",)
    assert any("mismatch" in r for r in e.reasons) and "nothing was committed" in str(e)
    chain.advance(100)
    assert chain.revealed_commitments(NET) == []
    assert list(world["serve"].iterdir()) == []  # never offered for download
    assert load_records(world["state"]) == []
    st = miner_status(chain, NET, "m1", state_dir=world["state"])
    assert st.state == "none" and st.probes == ()


def test_refusals_before_verify_are_specific(world, make_bundle) -> None:
    chain = world["chain"]
    with pytest.raises(SubmitError) as err:
        submit(world["bundle"], **kw(world, url="https://example.com/x.tar.gz"))
    assert err.value.reason == "usage"
    with pytest.raises(SubmitError) as err:
        submit(world["bundle"], **kw(world, serve_dir=None, url="http://example.com/b.tar.gz"))
    assert err.value.reason == "url" and "url_http_not_loopback" in str(err.value)
    with pytest.raises(SubmitError) as err:
        submit(world["bundle"], **kw(world, hotkey="stranger"))
    assert err.value.reason == "not_registered" and "stranger" in str(err.value)
    bad = make_bundle({"manifest.toml": 'schema = "cacheon.bundle/2"\n'}, name="bad")
    with pytest.raises(SubmitError) as err:
        submit(bad, **kw(world))
    assert err.value.reason == "manifest" and "ops" in str(err.value)
    with pytest.raises(SubmitError) as err:
        submit(world["bundle"], **kw(world, reveal_after_blocks=0))
    assert err.value.reason == "usage"
    # A user URL that does not serve the bundle: refused by --check-url before any verify.
    t0 = time.monotonic()
    with pytest.raises(SubmitError) as err:
        submit(world["bundle"], check_url=True, **kw(world, serve_dir=None, url=world["srv"].url_for("ab" * 32)))
    assert time.monotonic() - t0 < 5
    assert err.value.reason == "url_mismatch" and "http_status" in str(err.value)
    chain.advance(50)
    assert chain.revealed_commitments(NET) == []


def test_policy_violation_is_refused_without_running_it(world) -> None:
    with pytest.raises(SubmitError) as err:
        submit(CONTROLS / "policy_violation", **kw(world))
    assert err.value.reason == "verify" and err.value.codes == ("policy",)
    assert any("P001" in r for r in err.value.reasons)


@pytest.mark.slow
def test_user_hosted_url_checked_then_committed(world) -> None:
    """url= mode: the archive to upload is packed under the state dir; --check-url fetches it."""
    archives = world["state"] / "archives"
    archives.mkdir(parents=True)
    digest = load_bundle(world["bundle"]).digest
    with start_in_thread(archives) as host:  # stands in for the miner's own https host
        res = submit(world["bundle"], check_url=True, **kw(world, serve_dir=None, url=host.url_for(digest)))
    assert res.status == "committed" and res.url == host.url_for(digest)
    assert Path(res.archive) == archives / archive_name(digest)
    assert list(world["serve"].iterdir()) == []
    world["chain"].advance(5)
    [c] = revealed_of(world["chain"], "m1")
    assert commitment.parse(c.data, "m1", LOCAL).url == res.url


def test_status_of_unregistered_and_invalid_commitments(world) -> None:
    chain = world["chain"]
    st = miner_status(chain, NET, "nobody", state_dir=world["state"])
    assert not st.registered and st.weights == () and "NOT REGISTERED" in st.render()
    # A payload copied from m1 and committed by m2 fails parse for m2: validators skip it.
    copied = commitment.encode("cd" * 32, "m1", "https://example.com/a.tar.gz")
    chain.commit("m2", NET, copied, 1)
    chain.advance(1)
    st = miner_status(chain, NET, "m2", state_dir=world["state"], fetch=False)
    assert st.state == "invalid" and "bound_mismatch" in st.revealed.error
    assert "INVALID" in st.render()


def test_corrupt_state_file_is_named(world) -> None:
    world["state"].mkdir()
    (world["state"] / "submissions.json").write_text("{not json")
    with pytest.raises(MinerStateError, match="submissions.json"):
        miner_status(world["chain"], NET, "m1", state_dir=world["state"])


@pytest.mark.slow
def test_a_commit_that_landed_then_raised_is_not_sent_again(world, monkeypatch) -> None:
    """neurons/miner.py retries an unreachable chain, but never a commit that went out: it may
    have landed (here it did), and a second one would reset the commit block (priority)."""
    import argparse
    import importlib.util

    from cacheon_subnet.chain import ChainUnavailable
    from cacheon_subnet.miner.commands import ChainContext

    spec = importlib.util.spec_from_file_location(
        "miner_neuron", Path(__file__).resolve().parents[2] / "neurons" / "miner.py"
    )
    neuron = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(neuron)
    monkeypatch.setattr("time.sleep", lambda s: None)  # a retry (the bug) would not wait here
    chain, commits = world["chain"], []

    class LandsThenRaises:
        def __getattr__(self, name):
            return getattr(chain, name)

        def commit(self, *a, **k):
            commits.append(a)
            chain.commit(*a, **k)
            raise ChainUnavailable("connection reset after submit")

    args = argparse.Namespace(
        bundle=world["bundle"],
        url=None,
        serve_dir=world["serve"],
        base_url=world["srv"].base_url,
        host="127.0.0.1",
        port=0,
        reveal_blocks=5,
        verify_device="cpu",
        max_cases=1,
        state_dir=world["state"],
    )
    with pytest.raises(SubmitError) as e:
        neuron._submit_with_retries(
            args, ChainContext(LandsThenRaises(), NET, "m1", "local"), neuron.cacheon_log.get_logger("t")
        )
    assert e.value.sent and "may still have landed" in str(e.value) and "miner status" in str(e.value)
    assert len(commits) == 1
