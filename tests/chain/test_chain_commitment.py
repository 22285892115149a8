"""Commitment payload: golden bytes, round trip, and every rejection reason."""

from __future__ import annotations

import hashlib
import json

import pytest

from cacheon_subnet.chain.commitment import (
    MAX_PAYLOAD_BYTES,
    MAX_URL_LENGTH,
    REASONS,
    CommitmentError,
    Payload,
    check_url,
    encode,
    parse,
)
from cacheon_subnet.netpolicy import LOCAL

HOTKEY = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"
DIGEST = hashlib.sha256(b"cacheon golden bundle").hexdigest()
URL = "https://bundles.example.org/cacheon/golden.tar.gz"
GOLDEN = (
    '{"v":1,"d":"176659bf8a8f55aea4d2e37c274f77ba7d8e31e50f32de3ca04d07c4697b3c2b",'
    '"b":"d1c25bdc6df19559448fe4181f5fc4d235c2b274c2be79aeda436be5e261b442",'
    '"u":"https://bundles.example.org/cacheon/golden.tar.gz"}'
)
BOUND = hashlib.sha256((DIGEST + HOTKEY).encode()).hexdigest()


def _raw(**overrides) -> str:
    obj = {"v": 1, "d": DIGEST, "b": BOUND, "u": URL}
    obj.update(overrides)
    obj = {k: v for k, v in obj.items() if v is not _DROP}
    return json.dumps(obj, separators=(",", ":"))


_DROP = object()


def test_golden_example() -> None:
    assert encode(DIGEST, HOTKEY, URL) == GOLDEN
    assert BOUND == "d1c25bdc6df19559448fe4181f5fc4d235c2b274c2be79aeda436be5e261b442"
    assert parse(GOLDEN, HOTKEY) == Payload(digest=DIGEST, bound=BOUND, url=URL, version=1)


@pytest.mark.parametrize(
    "url, local",
    [
        (URL, False),
        ("https://host.example:8443/a?b=c", False),
        ("https://8.8.8.8/x", False),
        ("http://127.0.0.1:8765/bundle.tar.gz", True),
        ("http://localhost/x", True),
        ("http://[::1]:9000/x", True),
    ],
)
def test_round_trip(url: str, local: bool) -> None:
    urls = (LOCAL,) if local else ()
    data = encode(DIGEST, HOTKEY, url, *urls)
    assert " " not in data
    p = parse(data, HOTKEY, *urls)
    assert (p.digest, p.url, p.version) == (DIGEST, url, 1)
    if local:  # the same loopback commitment on a non-local chain is refused
        with pytest.raises(CommitmentError):
            parse(data, HOTKEY)


def _reason(data, hotkey: str = HOTKEY) -> str:
    with pytest.raises(CommitmentError) as err:
        parse(data, hotkey)
    assert err.value.reason in REASONS
    assert err.value.reason in str(err.value)
    return err.value.reason


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"bytes", "type"),
        ("x" * (MAX_PAYLOAD_BYTES + 1), "too_large"),
        ("{not json", "not_json"),
        ("", "not_json"),
        ("[1,2]", "not_object"),
        ('{"v":1,"v":1,"d":"","b":"","u":""}', "duplicate_key"),
        (_raw(x="extra"), "unknown_key"),
        (_raw(u=_DROP), "missing_key"),
        (_raw(v=2), "version"),
        (_raw(v="1"), "version"),
        (_raw(v=True), "version"),
        (_raw(d="ab" * 31), "digest"),
        (_raw(d=DIGEST.upper()), "digest"),
        (_raw(d="g" * 64), "digest"),
        (_raw(b="z" * 64), "bound_digest"),
        (_raw(u=5), "url_type"),
        (_raw(u="https://h/" + "a" * MAX_URL_LENGTH), "url_too_long"),
        (_raw(u="https://h/a b"), "url_chars"),
        (_raw(u="https://bücher.de/x"), "url_chars"),
        (_raw(u="ftp://host/x"), "url_scheme"),
        (_raw(u="file:///etc/passwd"), "url_scheme"),
        (_raw(u="http://example.com/x"), "url_http_not_loopback"),
        (_raw(u="http://127.0.0.2/x"), "url_http_not_loopback"),
        (_raw(u="https://user:pw@host/x"), "url_credentials"),
        (_raw(u="https://token@host/x"), "url_credentials"),
        (_raw(u="https:///path-only"), "url_host"),
        (_raw(u="https://host:99999/x"), "url_port"),
        (_raw(u="https://host:0/x"), "url_port"),
        (_raw(u="https://169.254.169.254/latest/meta-data"), "url_address"),
        (_raw(u="https://10.0.0.1/x"), "url_address"),
        (_raw(u="https://127.0.0.1/x"), "url_address"),
        (_raw(u="https://localhost/x"), "url_address"),
        (_raw(u="https://2130706433/x"), "url_host"),
        (_raw(u="https://intranet/x"), "url_host"),
        ('{"v":1,"d":"\udcff"}', "encoding"),
        (f'{{"v":1, "d":"{DIGEST}","b":"{BOUND}","u":"{URL}"}}', "not_canonical"),
        (f'{{"d":"{DIGEST}","v":1,"b":"{BOUND}","u":"{URL}"}}', "not_canonical"),
    ],
)
def test_rejections(data, reason: str) -> None:
    assert _reason(data) == reason


def test_copied_commitment_fails_for_another_hotkey() -> None:
    assert _reason(GOLDEN, "5FHneW46xGXgs5mUiveU4sbTyGBzmstUspZC92UhjJM694ty") == "bound_mismatch"
    assert _reason(GOLDEN, "") == "bound_mismatch"
    # The copier re-binding the digest to itself is a *different* commitment (and a later one).
    other = "5FHneW46xGXgs5mUiveU4sbTyGBzmstUspZC92UhjJM694ty"
    assert parse(encode(DIGEST, other, URL), other).bound != BOUND


def test_every_reason_is_exercised() -> None:
    exercised = {
        "type",
        "too_large",
        "not_json",
        "not_object",
        "duplicate_key",
        "unknown_key",
        "missing_key",
        "version",
        "digest",
        "bound_digest",
        "url_type",
        "url_too_long",
        "url_chars",
        "url_scheme",
        "url_http_not_loopback",
        "url_credentials",
        "url_host",
        "url_port",
        "not_canonical",
        "bound_mismatch",
        "encoding",
        "url_address",
    }
    assert exercised == set(REASONS)


def test_encode_refuses_what_parse_would_reject() -> None:
    with pytest.raises(CommitmentError) as err:
        encode("nothex", HOTKEY, URL)
    assert err.value.reason == "digest"
    with pytest.raises(CommitmentError) as err:
        encode(DIGEST, HOTKEY, "http://example.com/x")
    assert err.value.reason == "url_http_not_loopback"
    assert check_url(URL) == URL
