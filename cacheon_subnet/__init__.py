"""Cacheon Subnet: faster, faithful GPU kernels for a version-pinned SGLang engine."""

__version__ = "0.1.0"
