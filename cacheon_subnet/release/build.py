"""`cacheon release build`: a validator's settled crowns (or named bundles) -> one release wheel.

Why from settled crowns: a crown is the only thing the subnet measured; the release carries exactly
the crowned slot's ops of the crowned bundle, sealed the way the arena seals them (the same engine
tree, the same static policy scan), and the descriptor records where each number came from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet import __version__
from cacheon_subnet.bundle import Bundle, OpEntry, load_bundle
from cacheon_subnet.bundle.archive import Scratch
from cacheon_subnet.bundle.engine_tree import build_tree
from cacheon_subnet.errors import UsageError
from cacheon_subnet.release.descriptor import (
    DESCRIPTOR_FILE,
    MAX_ISSUED,
    MAX_SERIAL,
    RELEASE_VERSION,
    SCHEMA,
    STOCK,
    TREE_DIR,
    Descriptor,
    DimRule,
    ReleaseCrown,
    Route,
    SealedFile,
    ServingPolicy,
    Stamp,
    canonical,
    engine_settings,
    package_name,
    pinned_runtime,
    requirements,
    seam_table_digest,
    summary,
)
from cacheon_subnet.release.wheel import WheelName, entry_points, metadata, wheel_file, write_wheel
from seams.table import PLUGIN_GROUP, adapters_for_slot

VERSION = RELEASE_VERSION
# The release package's own module: name-free, so it can be sealed before the name is known.
INIT = b'''"""A Cacheon engine release (built by `cacheon release build`; verify with `cacheon release verify`)."""

from pathlib import Path


def load() -> None:
    """SGLang plugin entry point: route the crowned slots, or log one warning and leave stock."""
    try:
        from cacheon_subnet.release.runtime import load_release
    except Exception as e:  # noqa: BLE001 - never break the engine on the release's account
        import logging

        logging.getLogger("cacheon.release").warning(
            "cacheon release %s not activated (cacheon-subnet not importable: %s); SGLang's stock kernels serve",
            __name__,
            e,
        )
        return
    load_release(Path(__file__).resolve().parent)
'''


@dataclass(frozen=True)
class Selected:
    """One crowned slot: the bundle, the ops of it that serve the slot, and the crown's record."""

    bundle: Bundle
    ops: tuple[OpEntry, ...]
    crown: ReleaseCrown


def from_state(state_dir: Path) -> list[Selected]:
    """Every settled crown of the validator whose state lives in `state_dir`."""
    from cacheon_subnet.validator.fetch import load_cached
    from cacheon_subnet.validator.ledger import crown_of, crowns
    from cacheon_subnet.validator.state import StateDB

    db = StateDB(state_dir, readonly=True)
    try:
        out = []
        for c in crowns(db):
            if crown_of(db, c.target) != c:  # its holder is being re-measured after an arena change
                raise UsageError(
                    f"{state_dir}: crown {c.target} is being re-measured after an arena change (a pin bump; "
                    f"measured in {c.arena_id}): build the release after its verdict (cacheon status)"
                )
            row = db.find(c.contribution_id)
            if row is None or not row.digest:
                raise UsageError(
                    f"{state_dir}: crown {c.target} names contribution {c.contribution_id}, which has no digest"
                )
            bundle = load_cached(state_dir / "bundles", row.digest)
            if bundle is None:
                raise UsageError(
                    f"{state_dir}/bundles/{row.digest}.tar.gz: the bundle crowned on {c.target} is not cached here"
                )
            ops = tuple(op for op in bundle.manifest.ops if op.slot == c.target)
            if not ops:
                raise UsageError(f"crown {c.target}: bundle {row.digest[:12]} has no op for that slot")
            crown = ReleaseCrown(
                c.target, bundle.digest, c.contribution_id, c.arena_id, c.measured_speedup, c.speedup_vs_stock
            )
            out.append(Selected(bundle, ops, crown))
    finally:
        db.close()
    if not out:
        raise UsageError(f"{state_dir}: no settled crown to release")
    return out


def from_bundles(paths: Sequence[str]) -> list[Selected]:
    """Every op of each named bundle, unmeasured (no contribution, arena or speedup)."""
    out: list[Selected] = []
    seen: dict[str, str] = {}
    for p in paths:
        bundle = load_bundle(p)
        for slot in sorted({op.slot for op in bundle.manifest.ops}):
            if slot in seen:
                raise UsageError(f"{p}: slot {slot} is already served by {seen[slot]} (one bundle per slot)")
            seen[slot] = p
            ops = tuple(op for op in bundle.manifest.ops if op.slot == slot)
            out.append(Selected(bundle, ops, ReleaseCrown(slot, bundle.digest, f"bundle:{bundle.digest}", "", None, None)))
    if not out:
        raise UsageError("no bundle given")
    return out


def _rules(op: OpEntry) -> tuple[DimRule, ...]:
    return tuple(DimRule(c.dim, c.min, c.max, c.multiple_of, tuple(c.one_of or ())) for c in op.constraints)


def _tree_files(selected: Sequence[Selected]) -> tuple[str, dict[str, bytes]]:
    """Seal the engine tree the arena would (policy scan included); its files, keyed under tree/."""
    with Scratch("cacheon-release-") as tmp:
        tree = build_tree(tmp / "tree", [(s.bundle, s.ops) for s in selected])
        files = {
            f"{TREE_DIR}/{p.relative_to(tree.root).as_posix()}": p.read_bytes()
            for p in sorted(tree.root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }
        return tree.digest, files


def _check(selected: Sequence[Selected]) -> None:
    for s in selected:
        for op in s.ops:
            if op.cuda is not None:
                raise UsageError(
                    f"{s.crown.slot}: op {op.key} of bundle {s.bundle.digest[:12]} is a CUDA op; "
                    "releases carry no native artifacts yet"
                )
        if not adapters_for_slot(s.crown.slot):
            raise UsageError(f"{s.crown.slot}: no seam adapter routes this slot in SGLang (seams/table.py)")


def describe(selected: Sequence[Selected], tree_digest: str, files: dict[str, bytes], stamp: Stamp) -> Descriptor:
    routes = tuple(
        Route(op.slot, op.variant, s.bundle.digest, tuple(op.dtypes), _rules(op)) for s in selected for op in s.ops
    )
    bindings = tuple(sorted({a.binding for s in selected for a in adapters_for_slot(s.crown.slot)}))
    sealed = tuple(SealedFile(p, hashlib.sha256(d).hexdigest(), len(d)) for p, d in sorted(files.items()))
    return Descriptor(
        schema=SCHEMA,
        serial=stamp.serial,
        issued=stamp.issued,
        runtime=pinned_runtime(),
        cacheon_subnet=__version__,
        seam_table=seam_table_digest(),
        tree_digest=tree_digest,
        crowns=tuple(sorted((s.crown for s in selected), key=lambda c: c.slot)),
        policy=ServingPolicy(
            tuple(sorted(routes, key=lambda r: (r.slot, r.variant))),
            bindings,
            STOCK,
            engine_settings([s.crown.slot for s in selected]),
        ),
        native=(),
        files=sealed,
    )


def build_release(selected: Sequence[Selected], out_dir: Path, stamp: Stamp | None = None) -> tuple[Path, Descriptor]:
    """Write the (unsigned) release wheel into `out_dir`; returns its path and descriptor.
    `stamp` unset: Stamp.now() (SOURCE_DATE_EPOCH or the clock)."""
    _check(selected)
    stamp = stamp or Stamp.now()
    if not 1 <= stamp.serial <= MAX_SERIAL or not 0 <= stamp.issued <= MAX_ISSUED:
        raise UsageError(
            f"release serial {stamp.serial} / issued {stamp.issued}: outside [1, {MAX_SERIAL}] / [0, {MAX_ISSUED}]"
        )
    tree_digest, files = _tree_files(selected)
    files["__init__.py"] = INIT
    desc = describe(selected, tree_digest, files, stamp)
    data = canonical(desc)
    name = package_name(data)
    wn = WheelName(name, VERSION)
    members = {f"{name}/{p}": d for p, d in files.items()}
    members[f"{name}/{DESCRIPTOR_FILE}"] = data
    members[f"{wn.dist_info}/METADATA"] = metadata(wn, summary(desc), requirements(desc))
    members[f"{wn.dist_info}/WHEEL"] = wheel_file()
    members[f"{wn.dist_info}/entry_points.txt"] = entry_points(PLUGIN_GROUP, name, f"{name}:load")
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_wheel(out_dir, wn, members), desc
