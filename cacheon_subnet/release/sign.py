"""Signing a release: an sr25519 signature over the descriptor's canonical bytes, in the wheel.

Why the descriptor and not the wheel: the descriptor seals every file's SHA-256, the tree digest,
the runtime pins and the serving policy, and the wheel's package name is its digest; so one
signature over those bytes covers the wheel's contents, and `verify` checks the rest against it.
The key comes through the pinned bittensor SDK (11.3.0: `bittensor.sp_core.Keypair`, `Wallet`).

Why a prefix before the descriptor (signature schema /2): the owner's key signs other things too
(extrinsics, polkadot.js `signRaw`); the prefix makes a release signature mean only "this release",
so no signature made elsewhere over the same bytes verifies here. Why the wrapped form is refused:
the SDK's verify also accepts a signature over `<Bytes>message</Bytes>` (what signRaw signs), a
second message per signature that `cacheon release sign` never makes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet.errors import UsageError
from cacheon_subnet.records.codec import RecordError, from_json, to_json
from cacheon_subnet.release.descriptor import DESCRIPTOR_FILE, SIGNATURE_FILE
from cacheon_subnet.release.wheel import WheelError, WheelName, read_wheel, write_wheel

SIG_SCHEMA = "cacheon.release-signature/2"  # /2: over SIGNED_PREFIX + the descriptor, never the wrapped form
SIGNED_PREFIX = SIG_SCHEMA.encode() + b"\n"
WRAP = (b"<Bytes>", b"</Bytes>")  # the SDK's verify fallback (btwallet's signRaw wrapping)
MAX_SIGNATURE_BYTES = 4096  # an SS58 address and 64 bytes of hex, in JSON
SS58_FORMAT = 42  # bittensor's: the one spelling of an owner that verify compares and remembers


@dataclass(frozen=True)
class Signature:
    schema: str
    signer: str  # SS58 address of the key that signed
    signature: str  # 64 bytes, hex


def keypair_from_file(path: Path) -> Any:
    """A bittensor keyfile (what `btcli` writes under wallets/<name>/hotkeys/<hotkey>), unencrypted."""
    from bittensor.sp_core import deserialize_keypair_from_keyfile_data, keyfile_data_is_encrypted

    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read the key file ({e.strerror})") from None
    if keyfile_data_is_encrypted(data):
        raise UsageError(f"{path}: the key file is encrypted; sign with an unencrypted hotkey file")
    try:
        return deserialize_keypair_from_keyfile_data(data)
    except Exception as e:  # noqa: BLE001 - the SDK's own error types vary by build
        raise UsageError(f"{path}: not a bittensor key file ({e})") from None


def keypair_from_wallet(name: str, hotkey: str, path: str) -> Any:
    import bittensor

    try:
        return bittensor.Wallet(name=name, hotkey=hotkey, path=path).hotkey
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"wallet {name}/{hotkey} under {path}: cannot load the hotkey ({e})") from None


def _layout(members: dict[str, bytes], where: str) -> tuple[str, WheelName]:
    """The release package's name and the wheel name, from its members."""
    pkgs = sorted({p.split("/")[0] for p in members if p.endswith("/" + DESCRIPTOR_FILE) and p.count("/") == 1})
    infos = sorted({p.split("/")[0] for p in members if p.split("/")[0].endswith(".dist-info")})
    if len(pkgs) != 1 or len(infos) != 1:
        raise WheelError(
            f"{where}: expected one release package and one .dist-info, found {pkgs or 'none'} and {infos or 'none'}"
        )
    dist, _, version = infos[0][: -len(".dist-info")].partition("-")
    return pkgs[0], WheelName(dist, version)


def signed_message(descriptor: bytes) -> bytes:
    """What the owner's key signs for a release: the domain prefix, then the descriptor's bytes."""
    return SIGNED_PREFIX + descriptor


def sign_bytes(keypair: Any, data: bytes) -> Signature:
    return Signature(SIG_SCHEMA, str(keypair.ss58_address), bytes(keypair.sign(signed_message(data))).hex())


def sign_wheel(wheel: Path, keypair: Any) -> Signature:
    """Add (or replace) the release's signature in `wheel`, in place; RECORD is rewritten."""
    members = read_wheel(wheel)
    pkg, wn = _layout(members, str(wheel))
    if wheel.name != wn.filename:
        raise WheelError(f"{wheel}: file name differs from its dist-info ({wn.filename})")
    sig = sign_bytes(keypair, members[f"{pkg}/{DESCRIPTOR_FILE}"])
    members.pop(f"{wn.dist_info}/RECORD", None)
    members[f"{pkg}/{SIGNATURE_FILE}"] = json.dumps(to_json(sig), sort_keys=True).encode()
    write_wheel(wheel.parent, wn, members)
    return sig


def read_signature(data: bytes) -> Signature:
    if len(data) > MAX_SIGNATURE_BYTES:
        raise RecordError(f"{SIGNATURE_FILE}: {len(data)} bytes, more than {MAX_SIGNATURE_BYTES}")
    try:
        sig = from_json(Signature, json.loads(data))
    except RecordError as e:
        raise RecordError(f"{SIGNATURE_FILE}: {e}") from None
    except (ValueError, RecursionError) as e:  # json's own; '[' * 10**5 recurses
        raise RecordError(f"{SIGNATURE_FILE}: not JSON ({type(e).__name__}: {str(e)[:160]})") from None
    if sig.schema != SIG_SCHEMA:
        raise RecordError(f"{SIGNATURE_FILE}: schema {sig.schema!r}, expected {SIG_SCHEMA!r}")
    return sig


def owner_key(address: str) -> str:
    """`address` in bittensor's SS58 format (42). Why: SS58 spells one public key once per network
    prefix (Polkadot 0, Kusama 2, ...) and the SDK verifies any of them; compared or stored as typed,
    one owner had one rollback history per spelling (red team s21). ValueError: not an address."""
    from bittensor.sp_core import ss58_decode, ss58_encode

    return str(ss58_encode(ss58_decode(address), SS58_FORMAT))


def signature_problem(sig: Signature, data: bytes, owner: str | None) -> str | None:
    """None when `sig` is a valid signature of `data` (by `owner`'s key, when given); else what is wrong."""
    from bittensor.sp_core import Keypair

    message = signed_message(data)
    try:
        if owner is not None and owner_key(sig.signer) != owner_key(owner):
            return f"signed by {sig.signer}, not by the owner {owner}"
        raw = bytes.fromhex(sig.signature)
        key = Keypair(ss58_address=sig.signer)
        ok = key.verify(message, raw)
        # A signature over the wrapped message verifies both; one over the message itself only the first.
        wrapped = ok and key.verify(WRAP[0] + message + WRAP[1], raw)
    except ValueError as e:
        return f"signature unreadable ({e})"
    if not ok:
        return f"the signature by {sig.signer} does not match the release's signed bytes ({SIG_SCHEMA})"
    if wrapped:
        return (
            f"the signature by {sig.signer} is over the <Bytes>-wrapped message (a signRaw signature), "
            "not the release's bytes: sign with `cacheon release sign`"
        )
    return None
