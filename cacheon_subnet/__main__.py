"""`python -m cacheon_subnet ...` runs the `cacheon` CLI where the console script is not installed
(e.g. the GPU box, where the package travels as a source tree on PYTHONPATH)."""

from cacheon_subnet.cli import run

run()
