"""The sealed engine tree: what a scheduler rank is allowed to import, and nothing else.

The host materialises the selected ops of one or more verified bundles under
`<root>/cacheon_c_<digest>/` (read-only) plus `tree.json` listing them. The tree's identity is
the SHA-256 of the canonical tree.json; a scheduler reopens the tree, recomputes every
package's content digest and refuses to load anything if one differs from its name, or if the
tree digest differs from the one the host put in the launch environment.

The static allowlist policy (cacheon_subnet/policy/scan.py) is enforced here too, on both
sides: the host never seals, and a scheduler never opens, a package whose sources fail it. This
is the one road from a bundle into an engine, so no caller (validator, `cacheon arena run`,
scripts) can put unscanned contribution code into a scheduler process.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet.bundle.archive import Bundle
from cacheon_subnet.bundle.digest import content_digest
from cacheon_subnet.bundle.manifest import OpEntry, parse_manifest
from cacheon_subnet.errors import BundleError, CacheonError
from cacheon_subnet.policy.scan import scan_files

TREE_FILE = "tree.json"
TREE_VERSION = 1


def package_for(digest: str) -> str:
    return f"cacheon_c_{digest}"


@dataclass(frozen=True)
class TreeOp:
    package: str
    digest: str
    slot: str
    variant: str
    module: str
    attr: str
    dtypes: tuple[str, ...]
    constraints: tuple[tuple[str, dict[str, Any]], ...]
    role: str = "challenger"  # or "incumbent": the crowned kernel the arena's B windows run
    native: str = ""  # a CUDA op: its sealed artifact's digest, at <root>/native/<digest>/

    @property
    def qualified_module(self) -> str:
        return f"{self.package}.{self.module}"


@dataclass(frozen=True)
class SealedTree:
    root: Path
    digest: str
    ops: tuple[TreeOp, ...]


ROLES = ("challenger", "incumbent")


NATIVE_DIR = "native"


def _seal_native(root: Path, bundle: Bundle, op: OpEntry, artifacts: Mapping[tuple[str, str], Path]) -> str:
    """A CUDA op's artifact (the host compiled it: native/build.py) copied read-only into the
    tree; its digest goes into tree.json, so the tree digest binds the cubin. '' for other ops."""
    if op.cuda is None:
        return ""
    src = artifacts.get((bundle.digest, op.key))
    if src is None:
        raise BundleError(op.key, "native-missing", "a CUDA op enters an engine only with the artifact the host compiled")
    files = _native_files(Path(src))
    digest = content_digest(files)
    if digest != Path(src).name:
        raise BundleError(op.key, "native-content", f"artifact {Path(src).name[:16]}… digests to {digest[:16]}…")
    dst = root / NATIVE_DIR / digest
    if not dst.exists():
        dst.mkdir(parents=True)
        for name, data in files.items():
            (dst / name).write_bytes(data)
            os.chmod(dst / name, 0o444)
        os.chmod(dst, 0o555)
    return digest


def _native_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file() and not p.is_symlink()}


def _op_json(pkg: str, digest: str, op: OpEntry, role: str = "challenger") -> dict[str, Any]:
    cons = {
        c.dim: {
            k: v
            for k, v in (
                ("min", c.min),
                ("max", c.max),
                ("multiple_of", c.multiple_of),
                ("in", list(c.one_of) if c.one_of else None),
            )
            if v is not None
        }
        for c in op.constraints
    }
    return {
        "package": pkg,
        "digest": digest,
        "slot": op.slot,
        "variant": op.variant,
        "module": op.module,
        "attr": op.attr,
        "dtypes": list(op.dtypes),
        "constraints": cons,
        "role": role,
    }


def canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def policy_gate(package: str, files: dict[str, bytes]) -> None:
    """Refuse sources that fail the static allowlist policy (BundleError, every finding named)."""
    # `x.py` beside `x/__init__.py`: the scan keys both as module x and checks only the package
    # (the one CPython imports), so the sibling was sealed unscanned (red team 2026-12-04)
    shadowed = sorted(p for p in files if p.endswith(".py") and p[:-3] + "/__init__.py" in files)
    if shadowed:
        raise BundleError(
            package,
            "policy",
            f"{shadowed[0]}: module shadowed by package {shadowed[0][:-3]}/__init__.py (one source per module name)",
        )
    try:  # the CUDA ops' entry modules, the only ones that may import the launcher
        cuda = parse_manifest(files["manifest.toml"], frozenset(files)).cuda_modules(files)
    except (KeyError, CacheonError):
        cuda = frozenset()
    findings = scan_files(files, cuda_modules=cuda)
    if findings:
        raise BundleError(
            package,
            "policy",
            "; ".join(str(f) for f in findings[:8]) + (f" (+{len(findings) - 8} more)" if len(findings) > 8 else ""),
        )


def build_tree(
    root: Path,
    selections: Sequence[tuple[Bundle, Sequence[OpEntry]]],
    incumbents: Sequence[tuple[Bundle, Sequence[OpEntry]]] = (),
    *,
    scan_policy: bool = True,
    artifacts: Mapping[tuple[str, str], Path] | None = None,
) -> SealedTree:
    """Write the sealed tree for `selections` (bundle, the ops of it to activate) into `root`;
    `incumbents` are the crowned ops the arena's baseline (B) windows run instead of stock.
    scan_policy=False is for the seam tests' instrumented stand-in kernels only (a Python
    argument, never a flag or variable an operator or a bundle can set); the tree records it and
    every scheduler re-scans a tree that says it was scanned. `artifacts`: (bundle digest, op key)
    -> the sealed artifact dir of each CUDA op (a CUDA op without one is refused)."""
    root.mkdir(parents=True, exist_ok=False)
    ops = []
    for role, group in (("challenger", selections), ("incumbent", incumbents)):
        for bundle, chosen in group:
            pkg = package_for(bundle.digest)
            if scan_policy:
                policy_gate(pkg, dict(bundle.files))
            if not (root / pkg).exists():
                bundle.write_to(root / pkg, read_only=True)
            for op in chosen:
                doc_op = _op_json(pkg, bundle.digest, op, role)
                native = _seal_native(root, bundle, op, artifacts or {})
                ops.append({**doc_op, "native": native} if native else doc_op)
    doc = {
        "version": TREE_VERSION,
        "policy_scanned": scan_policy,
        "ops": sorted(ops, key=lambda o: (o["slot"], o["role"], o["variant"], o["package"])),
    }
    data = canonical(doc)
    (root / TREE_FILE).write_bytes(data)
    os.chmod(root / TREE_FILE, 0o444)
    os.chmod(root, 0o555)
    return open_tree(root, hashlib.sha256(data).hexdigest())


def open_tree(root: Path, expected_digest: str) -> SealedTree:
    """Reopen and check a tree (in the scheduler). Raises BundleError on any mismatch."""
    data = (root / TREE_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected_digest:
        raise BundleError(TREE_FILE, "tree-digest", f"engine tree digest {digest[:16]}… != expected {expected_digest[:16]}…")
    doc = json.loads(data)
    if doc.get("version") != TREE_VERSION:
        raise BundleError(TREE_FILE, "tree-version", f"unsupported engine tree version {doc.get('version')!r}")
    checked: set[str] = set()
    ops = []
    for o in doc["ops"]:
        pkg = o["package"]
        if pkg != package_for(o["digest"]):
            raise BundleError(TREE_FILE, "tree-package", f"package {pkg} does not match digest {o['digest'][:16]}…")
        if pkg not in checked:
            files = {
                p.relative_to(root / pkg).as_posix(): p.read_bytes()
                for p in (root / pkg).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
            }
            got = content_digest(files)
            if got != o["digest"]:
                raise BundleError(pkg, "tree-content", f"content digest {got[:16]}… != sealed {o['digest'][:16]}…")
            if doc.get("policy_scanned", True):
                policy_gate(pkg, files)
            checked.add(pkg)
        native = o.get("native", "")
        if native:
            try:
                got = content_digest(_native_files(root / NATIVE_DIR / native)) if len(native) == 64 else "not a digest"
            except OSError as e:
                got = f"unreadable ({e.strerror})"
            if got != native:
                raise BundleError(pkg, "tree-native", f"artifact {native[:16]}… digests to {got[:16]}…")
        role = o.get("role", "challenger")
        if role not in ROLES:
            raise BundleError(TREE_FILE, "tree-role", f"op {o['slot']}: unknown role {role!r}")
        ops.append(
            TreeOp(
                pkg,
                o["digest"],
                o["slot"],
                o["variant"],
                o["module"],
                o["attr"],
                tuple(o["dtypes"]),
                tuple(sorted((k, v) for k, v in o["constraints"].items())),
                role,
                native,
            )
        )
    return SealedTree(root, digest, tuple(ops))
