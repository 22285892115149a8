"""Specific error types: each names the file / field / rule that failed."""

from __future__ import annotations


class CacheonError(Exception):
    """Base class for every error this package raises on purpose."""


class UsageError(CacheonError):
    """Bad command-line input (exit code 2)."""


class SlotError(CacheonError):
    """Unknown slot, bad slot version or invalid shape case."""


class BundleError(CacheonError):
    """A bundle violates a rule. `path` is the member inside the bundle, `rule` a stable id."""

    def __init__(self, path: str, rule: str, detail: str) -> None:
        self.path = path
        self.rule = rule
        self.detail = detail
        super().__init__(f"{path}: [{rule}] {detail}")


class ManifestError(BundleError):
    """manifest.toml is missing, unparsable or has a bad field."""

    def __init__(self, field: str, detail: str, path: str = "manifest.toml") -> None:
        self.field = field
        super().__init__(path, f"manifest.{field}" if field else "manifest", detail)


class SandboxError(CacheonError):
    """The sandbox could not be set up (never raised for what the child does)."""
