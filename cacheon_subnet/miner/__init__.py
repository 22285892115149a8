"""Miner-side tools: scaffold, local checks, submit (see cli.py)."""
