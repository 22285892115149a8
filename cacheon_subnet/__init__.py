"""Cacheon Subnet: faster, faithful GPU kernels for a version-pinned SGLang engine."""

__version__ = "0.1.0"


def spec_version(version: str) -> int:
    """MAJOR.MINOR.PATCH -> MAJOR*10000 + MINOR*100 + PATCH (0.1.0 -> 100; minor/patch < 100).

    The weights version key a validator sends (validator/publish.py). The subnet owner retires
    validators older than release X by setting the hyperparameter weights_version_key to
    spec_version(X): the chain then drops their weights (docs/operators.md, Upgrades)."""
    parts = version.split("+")[0].split("-")[0].split(".")
    if len(parts) < 3 or not all(p.isdigit() for p in parts[:3]):
        raise ValueError(f"version {version!r}: expected MAJOR.MINOR.PATCH")
    major, minor, patch = (int(p) for p in parts[:3])
    if minor >= 100 or patch >= 100:
        raise ValueError(f"version {version!r}: minor and patch must stay below 100 for the spec version")
    return major * 10000 + minor * 100 + patch


__spec_version__ = spec_version(__version__)
