"""Golden vectors for the canonical content digest (other implementations must match)."""

import hashlib

import pytest

from cacheon_subnet.bundle import content_digest, hotkey_bound_digest, is_digest

GOLDEN = [
    ({}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    (
        {"manifest.toml": b'schema = "cacheon.bundle/1"\n'},
        "00938fa7ae402a900a18a8461ba2ed84001b8b2091b15ca3aded077f8283f4a5",
    ),
    (
        {"b.py": b"x = 1\n", "a/c.py": b"", "manifest.toml": b"m"},
        "5cd32cae521c32e9f709a91d94524c9926f9ba4024d31ab9a1a34d4301c9d5c2",
    ),
    ({"ab": b"c"}, "601d5476e2ccfe2c87a2bba7a322659734a05749d5b5aa781f513e4912db0d5f"),
    ({"a": b"bc"}, "3fafa1cf2f19a7c1129beb20cf0983f73a489a221fc0dd2f16d1be292d089205"),
]


@pytest.mark.parametrize("files,expected", GOLDEN)
def test_golden_vectors(files, expected):
    assert content_digest(files) == expected


def test_format_is_length_prefixed_sorted_paths():
    # Spelled out byte by byte: u64be(len(path)) path u64be(len(data)) data, sorted by path bytes.
    raw = b"".join(
        len(p).to_bytes(8, "big") + p + len(d).to_bytes(8, "big") + d
        for p, d in sorted([(b"a/c.py", b""), (b"b.py", b"x = 1\n"), (b"manifest.toml", b"m")])
    )
    assert hashlib.sha256(raw).hexdigest() == GOLDEN[2][1]


def test_length_prefix_prevents_boundary_collisions():
    assert content_digest({"ab": b"c"}) != content_digest({"a": b"bc"})


def test_order_independent():
    items = [("z.py", b"1"), ("a.py", b"2"), ("m/n.py", b"3")]
    assert content_digest(dict(items)) == content_digest(dict(reversed(items)))


def test_hotkey_bound_digest_golden_and_binding():
    d = GOLDEN[2][1]
    hk = "5F3sa2TJAWMqDhXG6jhV4N8ko9SxwGy8TpaNS1repo5EYjQX"
    assert hotkey_bound_digest(d, hk) == "5fd368047cd6c23bcb71ddfdbbb651a45c7cf97d02dd330bb9395c2cb946f0bc"
    assert hotkey_bound_digest(d, hk) == hashlib.sha256((d + hk).encode()).hexdigest()
    assert hotkey_bound_digest(d, hk) != hotkey_bound_digest(d, hk + "x")


def test_hotkey_bound_digest_rejects_bad_input():
    with pytest.raises(ValueError):
        hotkey_bound_digest("XYZ", "hk")
    with pytest.raises(ValueError):
        hotkey_bound_digest(GOLDEN[0][1], "")
    assert is_digest(GOLDEN[0][1]) and not is_digest(GOLDEN[0][1].upper())


def test_a_digest_with_a_trailing_newline_is_not_a_digest():
    """`re.match` with `...$` accepts "hex\\n": a committed digest is taken whole or refused."""
    assert not is_digest(GOLDEN[0][1] + "\n") and not is_digest(" " + GOLDEN[0][1])
    with pytest.raises(ValueError):
        hotkey_bound_digest(GOLDEN[0][1] + "\n", "hk")
