"""`cacheon release build|sign|verify` and `cacheon pin check` (registered via cli.EXTENSIONS).

  cacheon release build (--state-dir DIR | --bundle B [--bundle B ...]) --out DIR [--serial N] [--sign KEY FLAGS]
  cacheon release sign WHEEL (--key-file PATH | --wallet.name N --wallet.hotkey H [--wallet.path P])
  cacheon release verify WHEEL [--owner SS58] [--min-serial N] [--allow-rollback] [--trust-file PATH]
  cacheon pin check --wheel PATH_OR_URL

Exit codes (cliout.Exit): 0 ok; 1 FAIL (a bundle refused by the policy scan, a release refused by
verify (a rollback included), a pin check that found breaks); 2 usage (no such path, no crown, no key,
an unreadable trust file); 3 `verify` only:
the wheel verified but no --owner was given (its signer is anyone's key) or SGLang is not installed
here, so the runtime was not checked.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cacheon_subnet import env
from cacheon_subnet.cliout import Exit, emit
from cacheon_subnet.errors import UsageError


def _keypair(args: argparse.Namespace) -> Any:
    from cacheon_subnet.release.sign import keypair_from_file, keypair_from_wallet

    if args.key_file:
        return keypair_from_file(Path(args.key_file))
    if args.wallet_name:
        return keypair_from_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path or "~/.bittensor/wallets")
    return None


def cmd_build(args: argparse.Namespace) -> int:
    from cacheon_subnet.release.build import build_release, from_bundles, from_state
    from cacheon_subnet.release.descriptor import Stamp
    from cacheon_subnet.release.sign import sign_wheel

    if bool(args.state_dir) == bool(args.bundle):
        raise UsageError("release build: give either --state-dir DIR or --bundle B (not both)")
    key = _keypair(args) if args.sign else None
    if args.sign and key is None:
        raise UsageError("release build --sign: name the key (--key-file PATH or --wallet.name/--wallet.hotkey)")
    selected = from_state(Path(args.state_dir)) if args.state_dir else from_bundles(args.bundle)
    wheel, desc = build_release(selected, Path(args.out), Stamp.now(args.serial))
    signer = sign_wheel(wheel, key).signer if key is not None else None
    slots = [c.slot for c in desc.crowns]
    payload = {
        "wheel": str(wheel),
        "serial": desc.serial,
        "slots": slots,
        "tree_digest": desc.tree_digest,
        "signed_by": signer,
    }
    note = ""
    if desc.serial < desc.issued:  # an explicit serial below the clock's default
        note = (
            f"\n  note: serial {desc.serial} is below the default a plain build takes now ({desc.issued}): hosts that "
            "verified one of your default-serial releases will refuse this one as a rollback; keep one scheme"
        )
    payload["note"] = note.strip() or None
    text = f"built {wheel}\n  serial {desc.serial}{note}\n  routes {', '.join(slots)}\n  " + (
        f"signed by {signer}" if signer else "unsigned: cacheon release sign WHEEL --key-file ... before shipping"
    )
    emit(args, payload, text)
    return Exit.OK


def cmd_sign(args: argparse.Namespace) -> int:
    from cacheon_subnet.release.sign import sign_wheel

    wheel = Path(args.wheel)
    if not wheel.is_file():
        raise UsageError(f"{wheel}: no such wheel")
    key = _keypair(args)
    if key is None:
        raise UsageError("release sign: name the key (--key-file PATH or --wallet.name/--wallet.hotkey)")
    sig = sign_wheel(wheel, key)
    emit(args, {"wheel": str(wheel), "signed_by": sig.signer}, f"signed {wheel} as {sig.signer}")
    return Exit.OK


def cmd_verify(args: argparse.Namespace) -> int:
    from cacheon_subnet.release.verify import Guard, verify_wheel

    guard = Guard(Path(args.trust_file or env.RELEASE_TRUST.get()), args.min_serial, args.allow_rollback)
    report = verify_wheel(Path(args.wheel), args.owner, guard)
    emit(args, report.to_json(), report.render)
    return report.outcome.exit


def cmd_pin_check(args: argparse.Namespace) -> int:
    from seams.pincheck import pin_check

    report = pin_check(args.wheel)
    emit(args, {"wheel": report.wheel, "breaks": report.breaks, "report": report.render()}, report.render)
    return Exit.FAIL if report.breaks else Exit.OK


def _serial(raw: str) -> int:
    from cacheon_subnet.release.descriptor import MAX_SERIAL

    if not raw.isdigit() or not 0 <= int(raw) <= MAX_SERIAL:
        raise argparse.ArgumentTypeError(f"{raw!r}: a whole number from 0 to {MAX_SERIAL}")
    return int(raw)


def _key_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key-file", metavar="PATH", help="an unencrypted bittensor key file (sr25519)")
    p.add_argument("--wallet.name", dest="wallet_name", help="bittensor wallet name (sign with its hotkey)")
    p.add_argument("--wallet.hotkey", dest="wallet_hotkey", default="default", help="the wallet's hotkey name")
    p.add_argument("--wallet.path", dest="wallet_path", help="wallets directory (default: ~/.bittensor/wallets)")


def register(sub: Any, groups: dict[str, Any]) -> None:
    r = sub.add_parser("release", help="build, sign and verify an engine release (a wheel SGLang loads as a plugin)")
    rs = r.add_subparsers(dest="release_cmd", required=True)
    b = rs.add_parser("build", help="a release wheel from a validator's settled crowns or from named bundles")
    b.add_argument("--state-dir", metavar="DIR", help="the validator's state dir: release its settled crowns")
    b.add_argument("--bundle", action="append", metavar="B", help="a bundle (dir or .tar.gz), unmeasured; repeatable")
    b.add_argument("--out", required=True, metavar="DIR", help="where the wheel is written")
    b.add_argument(
        "--serial",
        type=_serial,
        metavar="N",
        help="the release's number in your sequence; must grow with each release, and one owner keeps one "
        "scheme: a small N after default-serial releases reads as a rollback everywhere "
        "(default: the build time in UTC seconds, SOURCE_DATE_EPOCH when set)",
    )
    b.add_argument("--sign", action="store_true", help="sign it too (with the key flags below)")
    _key_flags(b)
    b.add_argument("--json", action="store_true")
    b.set_defaults(handler=cmd_build)
    s = rs.add_parser("sign", help="sign a release's descriptor (sr25519) inside the wheel")
    s.add_argument("wheel", metavar="WHEEL", help="the release wheel to sign (rewritten in place)")
    _key_flags(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=cmd_sign)
    v = rs.add_parser(
        "verify",
        help="check signature, every file, RECORD and the installed runtime "
        "(exit 0 verified, 1 refused, 2 usage, 3 wheel verified but no --owner or no SGLang here)",
    )
    v.add_argument("wheel", metavar="WHEEL", help="the release wheel to check")
    v.add_argument(
        "--owner", metavar="SS58", help="the subnet owner's address the signature must be by (without it: exit 3 at best)"
    )
    v.add_argument(
        "--min-serial",
        type=_serial,
        default=0,
        metavar="N",
        help="refuse a release numbered below N (the serial the owner announces; default: 0)",
    )
    v.add_argument(
        "--allow-rollback",
        action="store_true",
        help="accept a release older than one this host verified from the same owner (a deliberate downgrade)",
    )
    v.add_argument(
        "--trust-file",
        metavar="PATH",
        help=f"the newest serial verified per owner (default: ${env.RELEASE_TRUST.name} or {env.RELEASE_TRUST.default})",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(handler=cmd_verify)
    p = sub.add_parser("pin", help="SGLang pin tools")
    ps = p.add_subparsers(dest="pin_cmd", required=True)
    c = ps.add_parser("check", help="what a newer SGLang wheel breaks in the seams (read, not installed; exit 1: breaks)")
    c.add_argument("--wheel", required=True, metavar="PATH_OR_URL", help="an SGLang wheel file, or an https:// URL to one")
    c.add_argument("--json", action="store_true")
    c.set_defaults(handler=cmd_pin_check)
