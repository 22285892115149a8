"""One commitment the SDK cannot decode must cost only its own row (chain/sdk_hooks.py).

The SDK decodes a subnet's commitments in one call; its decoders raise on payloads a miner
chooses, so without the hook one 12-byte commitment fails `subnets.commitments` for the whole
subnet on every validator (red team 2026-12-01: found offline against the installed SDK)."""

from __future__ import annotations

import pytest

bt = pytest.importorskip("bittensor")

from cacheon_subnet.chain import sdk_hooks  # noqa: E402
from cacheon_subnet.chain.bittensor_backend import install_sdk_hooks  # noqa: E402
from cacheon_subnet.chain.compat import check_sdk  # noqa: E402

# the revealed SCALE bytes b"0" (compact length 12) + b"x" + 11 non-hex bytes are valid utf-8, so
# the transport hands them over as this text, which the SDK then reads as hex
HOSTILE = "0x" + "Z" * 11


def _scale_text(text: str) -> str:
    raw = text.encode()
    assert len(raw) < 32
    return (bytes([len(raw) << 2]) + raw).decode()


@pytest.fixture
def pristine(monkeypatch):
    """The SDK's own decoders (a backend made earlier in this process may have wrapped them)."""
    mg = bt.metagraph
    for name in ("_revealed_entry", "_decode_fields"):
        fn = getattr(mg, name)
        monkeypatch.setattr(mg, name, getattr(fn, sdk_hooks._MARK, None) or fn)
    return mg


def test_one_hostile_commitment_costs_only_its_own_row(pristine):
    good = "cacheon/1 a sha256:ab"  # short: its SCALE prefix byte is ascii, so it travels as text
    revealed = [("hk-good", [(_scale_text(good), 10)]), ("hk-bad", [(HOSTILE, 11)])]
    with pytest.raises(ValueError):  # the control: the SDK alone fails the whole subnet's read
        pristine._commitments(1, [], revealed, 20)
    install_sdk_hooks(bt)
    install_sdk_hooks(bt)  # idempotent: never wrapped twice
    out = pristine._commitments(1, [], revealed, 20)
    assert out["hk-good"].revealed == [(10, good)]
    assert out["hk-bad"].revealed == [(11, sdk_hooks.UNDECODABLE)]
    assert not hasattr(getattr(pristine._revealed_entry, sdk_hooks._MARK), sdk_hooks._MARK)


def test_raw_fields_that_are_not_hex_cost_only_their_row(pristine):
    with pytest.raises(ValueError):
        pristine._decode_fields([{"Raw8": "not hex!"}])
    install_sdk_hooks(bt)
    assert pristine._decode_fields([{"Raw8": "not hex!"}]) == sdk_hooks.UNDECODABLE
    assert pristine._decode_fields([{"Raw2": "0x6869"}]) == "hi"  # good data decodes as before


def test_the_hooked_names_are_checked_by_chain_compat():
    rows = {r.name: r for r in check_sdk().rows}
    for key in ("metagraph._revealed_entry", "metagraph._decode_fields"):
        assert rows[key].status == "OK", rows[key]
