"""issue 32's Done-when on CPU: a CUDA bundle goes init -> verify -> pack -> submit -> a validator
pass on the local chain. The validator's screen compiles it behind the wall and records
`no_decision` with "CUDA trials need a GPU validator" (never a crash, never a pass), visible in
`cacheon status`; a CUDA bundle that does not compile fails with its file:line instead."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from native_bundles import SCALE, cuda_bundle, needs_nvcc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validator"))
from validator_fakes import NETUID, VALIDATOR, FakeQualifier, FileServer, commit, make_chain  # noqa: E402

from cacheon_subnet.bundle import pack  # noqa: E402
from cacheon_subnet.cli import main  # noqa: E402
from cacheon_subnet.miner.submit import SubmitError, archive_name, submit  # noqa: E402
from cacheon_subnet.verify.native_gate import TRIALS_NOT_RUN  # noqa: E402

pytestmark = [pytest.mark.slow, needs_nvcc]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CACHEON_HOME", str(tmp_path / "home"))
    return tmp_path


def test_a_cuda_bundle_from_init_to_a_validator_pass_ends_no_decision_with_its_reason(home, capsys):
    from cacheon_subnet.validator.loop import Validator, ValidatorConfig

    chain = make_chain(home / "chain.db", miners=2)
    dest = home / "mine"
    assert main(["miner", "init", "--slot", "norm.rmsnorm", "--lang", "cuda", str(dest)]) == 0
    assert main(["verify", str(dest)]) == 3  # compiled + static checks; the trials need a GPU validator
    assert "NOT RUN" in capsys.readouterr().out
    with FileServer() as srv:
        res = submit(
            dest,
            backend=chain,
            netuid=NETUID,
            hotkey="m0",
            serve_dir=home / "serve",
            base_url=srv.url("f"),
            reveal_after_blocks=1,
            state_dir=home / "miner",
        )
        srv.add(archive_name(res.digest), home / "serve" / archive_name(res.digest))
        # the broken control: a CUDA bundle that does not compile (submit refuses it; committed by hand)
        broken = cuda_bundle(SCALE.replace("o[threadIdx.x]", "oops[threadIdx.x]"))
        with pytest.raises(SubmitError, match="FAILS verify"):
            broken.write_to(home / "broken", read_only=False)
            submit(home / "broken", backend=chain, netuid=NETUID, hotkey="m1", serve_dir=home / "s2", base_url=srv.url("f"))
        b = pack(home / "broken", home / "broken.tar.gz")
        commit(chain, "m1", b.digest, srv.add("broken.tar.gz", home / "broken.tar.gz"))
        chain.advance(2)
        config = ValidatorConfig(
            netuid=NETUID, hotkey=VALIDATOR, state_dir=home / "v", interval_s=0, targets=("norm.rmsnorm",)
        )
        v = Validator(config, chain, FakeQualifier())
        v.run_once()
    by = {c.hotkey: c for c in v.db.contributions()}
    assert by["m0"].state == "no_decision", (by["m0"].state, by["m0"].reason)
    assert TRIALS_NOT_RUN in by["m0"].reason
    assert by["m1"].state == "failed" and 'k.cu:1: error: identifier "oops" is undefined' in by["m1"].reason
    assert main(["status", "--state-dir", str(home / "v"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "CUDA trials need a GPU validator" in json.dumps(doc)
