"""A contribution: files + manifest, its canonical digest, limits and safe extraction."""

from cacheon_subnet.bundle.archive import Bundle, Scratch, bundle_from_files, load_bundle, pack, sweep_scratch
from cacheon_subnet.bundle.digest import content_digest, hotkey_bound_digest, is_digest
from cacheon_subnet.bundle.limits import DEFAULT_LIMITS, Limits
from cacheon_subnet.bundle.manifest import Manifest, OpEntry, parse_manifest

__all__ = [
    "DEFAULT_LIMITS",
    "Bundle",
    "Limits",
    "Manifest",
    "OpEntry",
    "Scratch",
    "bundle_from_files",
    "content_digest",
    "hotkey_bound_digest",
    "is_digest",
    "load_bundle",
    "pack",
    "parse_manifest",
    "sweep_scratch",
]
