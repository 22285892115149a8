"""Local and validator-side checking of a bundle (see runner.py).

`VerifyOptions` and `verify_bundle` load runner.py (and torch with it) on first use, so the
static scan (`from cacheon_subnet.verify import policy`: `cacheon pack`, the validator's static
screen) runs without importing torch."""

from typing import TYPE_CHECKING

from cacheon_subnet.verify.report import REASONS, Failure, OpResult, VerifyReport

if TYPE_CHECKING:  # the checker sees the runner's names; at run time __getattr__ imports them when asked
    from cacheon_subnet.verify.runner import VerifyOptions, verify_bundle

__all__ = ["REASONS", "Failure", "OpResult", "VerifyOptions", "VerifyReport", "verify_bundle"]
_FROM_RUNNER = ("VerifyOptions", "verify_bundle")


def __getattr__(name: str) -> object:  # PEP 562: the runner's names, imported when first asked for
    if name in _FROM_RUNNER:
        from cacheon_subnet.verify import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
