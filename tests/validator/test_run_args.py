"""`validator run` reads its flags once (validator/run_args.py): every flag add_run_args defines
lands in one typed field of ValidatorArgs, with the parser's default, and the loop's config is
built from that record alone."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

import pytest

from cacheon_subnet.validator.commands import add_run_args
from cacheon_subnet.validator.run_args import ChainKind, ValidatorArgs

RENAMED = {"interval": "interval_s"}  # the flag's dest -> the field that holds it (seconds)


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_run_args(p)
    return p.parse_args(["--netuid", "7", *argv])


def test_every_flag_is_one_field_with_the_parsers_default() -> None:
    ns = _parse()
    a = ValidatorArgs.from_namespace(ns)
    dests = {RENAMED.get(k, k) for k in vars(ns)}
    assert dests == {f.name for f in fields(ValidatorArgs)}
    for f in fields(ValidatorArgs):
        if f.name != "netuid":  # required: no default of its own
            dest = next(k for k in vars(ns) if RENAMED.get(k, k) == f.name)
            if dest != "local_chain":  # its default comes from the environment
                assert getattr(a, f.name) == f.default == getattr(ns, dest), f.name


def test_the_flags_become_the_loops_config(tmp_path: Path) -> None:
    a = ValidatorArgs.from_namespace(
        _parse(
            "--chain", "local", "--interval", "5", "--no-overlap", "--screen-workers", "2",
            "--screen-cpu-share", "0.5", "--verify-max-cases", "3", "--dry-run", "--state-dir", str(tmp_path),
        )
    )  # fmt: skip
    assert a.chain is ChainKind.LOCAL and a.chain == "local" and a.state_dir == tmp_path
    c = a.config("hk", tmp_path / "s")
    assert (c.netuid, c.hotkey, c.state_dir, c.interval_s) == (7, "hk", tmp_path / "s", 5.0)
    assert (c.overlap, c.screen_workers, c.screen_cpu_share, c.verify_max_cases) == (False, 2, 0.5, 3)
    assert c.publish.dry_run
    assert not ValidatorArgs.from_namespace(_parse()).config("hk", tmp_path).publish.dry_run


def test_a_namespace_the_parser_did_not_make_is_refused() -> None:
    """The broken control: no per-flag fallback default (the getattr(args, name, default) the
    run used to carry could disagree with the parser's); a missing flag is an error."""
    ns = _parse()
    del ns.screen_workers
    with pytest.raises(AttributeError, match="screen_workers"):
        ValidatorArgs.from_namespace(ns)


def test_an_out_of_range_value_is_the_configs_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="screen_workers"):
        ValidatorArgs.from_namespace(_parse("--screen-workers", "0")).config("hk", tmp_path)


def test_screen_workers_default_to_auto_and_take_a_number_or_auto(tmp_path: Path) -> None:
    assert ValidatorArgs.from_namespace(_parse()).config("hk", tmp_path).screen_workers is None  # auto
    assert ValidatorArgs.from_namespace(_parse("--screen-workers", "AUTO")).screen_workers is None
    assert ValidatorArgs.from_namespace(_parse("--screen-workers", "3")).screen_workers == 3
    with pytest.raises(SystemExit):
        _parse("--screen-workers", "many")
