"""Local and validator-side checking of a bundle (see runner.py)."""

from cacheon_subnet.verify.report import REASONS, Failure, OpResult, VerifyReport
from cacheon_subnet.verify.runner import VerifyOptions, verify_bundle

__all__ = ["REASONS", "Failure", "OpResult", "VerifyOptions", "VerifyReport", "verify_bundle"]
