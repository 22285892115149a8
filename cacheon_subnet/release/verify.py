"""`cacheon release verify WHEEL [--owner SS58]`: is this wheel the release its owner signed, not
older than one this host verified from that owner, and does this host run its runtime?

Why every check names what differs: an operator who is refused must be able to tell a tampered
file from a stale SGLang without reading code. Checks, in order: the wheel's layout (zipform.py:
no byte outside the members zipfile lists); the descriptor (strict, canonical); the package name
against the descriptor's digest; the signature (and the owner); the serial against what this host
verified from that owner before (trust.py: the rollback guard); RECORD against every member; every
sealed file against the descriptor (missing, changed, extra); the dist-info byte for byte (WHEEL,
the plugin entry point, METADATA rebuilt from the descriptor: pip acts on all three) and the
version; the tree digest; the policy's
bindings and engine settings (ENGINE_NEEDS: said one line each); this cacheon's seam table; then
the installed runtime, where SGLang is installed.

Exit codes (cliout.Exit): 0 the wheel, its owner and this host's runtime verified; 1 refused (each
difference listed); 2 usage (no such file); 3 no decision: the wheel verified but no --owner was
given (the signer is reported, not trusted), or SGLang is not installed here, so the runtime was
not checked (a build or CI host: install next to SGLang and verify again).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

from cacheon_subnet.cliout import Exit
from cacheon_subnet.errors import UsageError
from cacheon_subnet.records.codec import RecordError
from cacheon_subnet.release import runtime, trust
from cacheon_subnet.release.descriptor import (
    DESCRIPTOR_FILE,
    RELEASE_VERSION,
    SIGNATURE_FILE,
    TREE_DIR,
    Descriptor,
    descriptor_digest,
    engine_settings,
    package_name,
    parse,
    requirements,
    seam_table_digest,
    summary,
)
from cacheon_subnet.release.sign import _layout, owner_key, read_signature, signature_problem
from cacheon_subnet.release.wheel import (
    WheelError,
    WheelName,
    entry_points,
    metadata,
    parse_record,
    read_wheel,
    record_hash,
    wheel_file,
)
from seams.table import PLUGIN_GROUP, adapters_for_slot

NO_SGLANG = "runtime: sglang not installed — checked the wheel only"


class Outcome(Enum):
    VERIFIED = "verified"
    WHEEL_ONLY = "wheel-only"  # the wheel verified; no SGLang here to check the runtime against
    UNBOUND = "unbound"  # the wheel verified, but no --owner: its signer is anyone's key
    REFUSED = "refused"

    @property
    def exit(self) -> Exit:
        return Exit.OK if self is Outcome.VERIFIED else Exit.FAIL if self is Outcome.REFUSED else Exit.NO_DECISION


@dataclass(frozen=True)
class Finding:
    check: str  # layout | descriptor | name | signature | rollback | record | file | dist-info | tree | policy | seams | runtime
    detail: str


@dataclass(frozen=True)
class Guard:
    """The rollback guard's settings: where this host's trust state lives (trust.py), the lowest
    serial the operator accepts (the owner's announcement), and a deliberate downgrade."""

    path: Path
    min_serial: int = 0
    allow_rollback: bool = False


@dataclass(frozen=True)
class Report:
    wheel: str
    name: str | None
    signer: str | None
    findings: tuple[Finding, ...]
    runtime: tuple[str, ...]  # what the runtime check found, line by line
    owner: str | None = None  # the --owner the signer was checked against (None: not checked)
    serial: int | None = None  # the descriptor's place in its owner's sequence (None: unreadable)
    issued: int | None = None  # its build time, UTC seconds

    @property
    def outcome(self) -> Outcome:
        """Never VERIFIED (exit 0) without --owner: anyone can sign a wheel, so a `verify && pip install`
        passed a mirror's self-signed wheel (red team session 20)."""
        if self.findings:
            return Outcome.REFUSED
        if self.owner is None:
            return Outcome.UNBOUND
        return Outcome.WHEEL_ONLY if NO_SGLANG in self.runtime else Outcome.VERIFIED

    def to_json(self) -> dict[str, Any]:
        return {
            "wheel": self.wheel,
            "name": self.name,
            "signer": self.signer,
            "serial": self.serial,
            "issued": self.issued,
            "outcome": self.outcome.value,
            "refused": [{"check": f.check, "detail": f.detail} for f in self.findings],
            "runtime": list(self.runtime),
        }

    def render(self) -> str:
        head = f"{self.wheel}: {self.outcome.value.upper()}"
        lines = [head] + [f"  {f.check}: {f.detail}" for f in self.findings]
        if self.signer:
            lines.append(f"  signed by {self.signer}")
        if self.serial is not None and self.issued is not None:
            when = datetime.fromtimestamp(self.issued, UTC).strftime("%Y-%m-%d %H:%M UTC")
            lines.append(f"  release serial {self.serial}, issued {when}")
        return "\n".join(_shown(line) for line in lines + [f"  {r}" for r in self.runtime])


def _shown(text: str) -> str:
    """`text` with each unprintable character escaped. Why: a mirror writes release.sig's signer and
    a self-signed descriptor's strings, and an ESC sequence in them redrew REFUSED as VERIFIED on
    the operator's terminal (red team s21); --json escapes them already."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def runtime_lines(desc: Descriptor, pkg: str | None = None) -> tuple[list[str], list[Finding]]:
    if runtime.installed_version("sglang") is None:
        return [NO_SGLANG], []
    ok, bad = runtime.pin_problems(desc.runtime)
    lines = [f"runtime: {line}" for line in ok]
    if pkg is not None:  # not refusals: the file is fine, this host needs a step first
        others = runtime.other_releases(pkg)
        lines += [f"runtime: {o} is installed here; pip uninstall {o} first (two releases: both stay stock)" for o in others]
        if runtime.installed_version(pkg) is not None:
            lines.append(
                f"runtime: {pkg} is already installed; verify a wheel before installing it (its files run in every Python process after)"
            )
    return lines, [Finding("runtime", b) for b in bad]


def _record(members: dict[str, bytes], dist_info: str) -> list[Finding]:
    rec_path = f"{dist_info}/RECORD"
    if rec_path not in members:
        return [Finding("record", f"{rec_path} missing")]
    try:
        rows = parse_record(members[rec_path], rec_path)
    except WheelError as e:
        return [Finding("record", str(e))]
    out = [Finding("record", f"{p} is in the wheel but not in RECORD") for p in sorted(set(members) - set(rows))]
    for p, (h, size) in sorted(rows.items()):
        if p == rec_path:
            continue
        if p not in members:
            out.append(Finding("record", f"RECORD lists {p}, which the wheel does not hold"))
        elif h != record_hash(members[p]) or size != str(len(members[p])):
            out.append(Finding("record", f"{p}: content differs from its RECORD hash/size"))
    return out


def _files(members: dict[str, bytes], pkg: str, desc: Descriptor) -> list[Finding]:
    out = []
    sealed = {f.path: f for f in desc.files}
    held = {p[len(pkg) + 1 :]: d for p, d in members.items() if p.startswith(pkg + "/")}
    for rel, f in sorted(sealed.items()):
        if rel not in held:
            out.append(Finding("file", f"{pkg}/{rel}: sealed in the descriptor, missing from the wheel"))
        elif hashlib.sha256(held[rel]).hexdigest() != f.sha256 or len(held[rel]) != f.size:
            out.append(
                Finding(
                    "file", f"{pkg}/{rel}: sha256 {hashlib.sha256(held[rel]).hexdigest()[:16]}… != sealed {f.sha256[:16]}…"
                )
            )
    for rel in sorted(set(held) - set(sealed) - {DESCRIPTOR_FILE, SIGNATURE_FILE}):
        out.append(Finding("file", f"{pkg}/{rel}: in the wheel but not sealed in the descriptor"))
    # Only the release's own dist-info: a path merely containing ".dist-info/" (sglang/x.dist-info/y)
    # would install an unsigned file into another package's dir (red team, session 16).
    strays = sorted(p for p in members if not p.startswith(pkg + "/") and not _own_dist_info(p, pkg))
    out += [Finding("file", f"{p}: outside the release package") for p in strays]
    tree = held.get(f"{TREE_DIR}/tree.json")
    if tree is not None and hashlib.sha256(tree).hexdigest() != desc.tree_digest:
        out.append(Finding("tree", f"tree.json digest differs from the descriptor's {desc.tree_digest[:16]}…"))
    return out


def _own_dist_info(path: str, pkg: str) -> bool:
    """A member of the release's own `{pkg}-{version}.dist-info/` (top level; _layout holds there is one)."""
    top, sep, _ = path.partition("/")
    return bool(sep) and top.startswith(pkg + "-") and top.endswith(".dist-info")


def _dist_info(members: dict[str, bytes], pkg: str, wn: WheelName, desc: Descriptor) -> list[Finding]:
    """The release's own dist-info, byte for byte what `build` writes: METADATA too, since pip acts on
    it (a Requires-Dist `x @ URL` added by a mirror fetched and installed unsigned code, red team s20)."""
    dist_info = wn.dist_info
    want = {
        "WHEEL": wheel_file(),
        "entry_points.txt": entry_points(PLUGIN_GROUP, pkg, f"{pkg}:load"),
        "METADATA": metadata(WheelName(pkg, RELEASE_VERSION), summary(desc), requirements(desc)),
    }
    out = []
    if wn.version != RELEASE_VERSION:
        out.append(
            Finding("dist-info", f"{dist_info}: version {wn.version!r}, a release's wheel is version {RELEASE_VERSION}")
        )
    for name, data in want.items():
        have = members.get(f"{dist_info}/{name}")
        if have != data:
            out.append(
                Finding("dist-info", f"{dist_info}/{name} differs from what a release declares{_first_diff(have, data)}")
            )
    known = set(want) | {"RECORD"}
    out += [
        Finding("dist-info", f"{p}: not part of a release")
        for p in sorted(members)
        if p.startswith(dist_info + "/") and p[len(dist_info) + 1 :] not in known
    ]
    return out


def _first_diff(have: bytes | None, want: bytes) -> str:
    """Where a dist-info file first differs, as the two lines (`have` missing: says so)."""
    if have is None:
        return " (missing)"
    got, exp = have.decode("utf-8", "replace").splitlines(), want.decode().splitlines()
    for n, (a, b) in enumerate(zip(got, exp), 1):
        if a != b:
            return f" (line {n}: {a[:100]!r}, expected {b[:100]!r})"
    if len(got) != len(exp):
        extra = got[len(exp)] if len(got) > len(exp) else "(end of file)"
        return f" (line {min(len(got), len(exp)) + 1}: {extra[:100]!r}, expected {len(exp)} lines)"
    return " (line endings or a byte outside the lines)"


def _policy(desc: Descriptor) -> list[Finding]:
    out = []
    crowned = {c.bundle_digest for c in desc.crowns}
    out += [
        Finding("policy", f"route {r.slot}/{r.variant}: bundle {r.bundle_digest[:12]} is not crowned")
        for r in desc.policy.routes
        if r.bundle_digest not in crowned
    ]
    want = tuple(sorted({a.binding for c in desc.crowns for a in adapters_for_slot(c.slot)}))
    if desc.policy.bindings != want:
        out.append(Finding("policy", f"bindings {list(desc.policy.bindings)} != those of the crowned slots {list(want)}"))
    need = engine_settings([c.slot for c in desc.crowns])
    if desc.policy.engine != need:  # dropped, the operator is never told and the crown serves nothing
        out.append(
            Finding(
                "policy",
                f"engine settings {[e.flag for e in desc.policy.engine]} != those the crowned slots need "
                f"{[e.flag for e in need]}",
            )
        )
    if desc.seam_table != seam_table_digest():
        out.append(Finding("seams", "this cacheon-subnet's seam table differs from the one the release was built with"))
    return out


def _sequence(guard: Guard, owner: str | None, cand: trust.Candidate) -> tuple[list[str], list[Finding]]:
    """The rollback guard: --min-serial always; with --owner, what this host verified from that owner."""
    seen = trust.load(guard.path).get(owner) if owner is not None else None
    problem = trust.problem(seen, cand, guard.min_serial, guard.allow_rollback)
    if problem:
        return [], [Finding("rollback", problem)]
    return ([trust.note(seen, cand)] if owner is not None else []), []


def verify_wheel(path: Path, owner: str | None = None, guard: Guard | None = None) -> Report:
    if not path.is_file():
        raise UsageError(f"{path}: no such wheel")
    if owner is not None:  # one key, one spelling: the signer is compared and remembered by key
        try:
            owner = owner_key(owner)
        except ValueError as e:
            raise UsageError(f"--owner {owner!r}: not an SS58 address ({e})") from None
    try:
        members = read_wheel(path)
        pkg, wn = _layout(members, str(path))
    except WheelError as e:
        return Report(str(path), None, None, (Finding("layout", str(e)),), ())
    found: list[Finding] = []
    if path.name != wn.filename:
        found.append(Finding("layout", f"file name {path.name} differs from its dist-info ({wn.filename})"))
    data = members[f"{pkg}/{DESCRIPTOR_FILE}"]
    try:
        desc = parse(data)
    except RecordError as e:
        return Report(str(path), pkg, None, (*found, Finding("descriptor", str(e))), ())
    if package_name(data) != pkg or wn.dist != pkg:
        found.append(Finding("name", f"package {pkg} / dist {wn.dist}: the descriptor's digest names {package_name(data)}"))
    signer = None
    raw_sig = members.get(f"{pkg}/{SIGNATURE_FILE}")
    if raw_sig is None:
        found.append(Finding("signature", f"{pkg}/{SIGNATURE_FILE} missing: the release is unsigned (cacheon release sign)"))
    else:
        try:
            sig = read_signature(raw_sig)
            signer = sig.signer
            problem = signature_problem(sig, data, owner)
            if problem:
                found.append(Finding("signature", problem))
        except RecordError as e:
            found.append(Finding("signature", str(e)))
    found += _record(members, wn.dist_info) + _files(members, pkg, desc) + _dist_info(members, pkg, wn, desc)
    found += _policy(desc)
    lines, bad = runtime_lines(desc, pkg)
    lines[:0] = [e.line() for e in desc.policy.engine]
    cand = trust.Candidate(owner or "", desc.serial, descriptor_digest(data), pkg)
    said: list[str] = []
    if guard is not None:
        said, refused = _sequence(guard, owner, cand)
        found += refused
    if owner is None and signer is not None:
        lines.insert(0, f"owner: not checked (pass --owner SS58 to bind the signer {signer}); exit 3, not verified")
    report = Report(str(path), pkg, signer, tuple(found + bad), tuple(said + lines), owner, desc.serial, desc.issued)
    # Only a verdict bound to --owner is remembered (VERIFIED and WHEEL_ONLY need the owner's own
    # signature): else anyone's self-signed high serial would lock the owner's releases out.
    if guard is not None and report.outcome in (Outcome.VERIFIED, Outcome.WHEEL_ONLY):
        late = trust.record(guard.path, cand, guard.allow_rollback)  # checked again, under the lock
        if late:
            report = replace(report, findings=(*report.findings, Finding("rollback", late)), runtime=tuple(lines))
    return report
