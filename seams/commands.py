"""`cacheon compat`: the SGLang seam canary on the command line (registered via cli.EXTENSIONS).

Static (`--source DIR`, nothing imported) or runtime (the installed sglang). Exit code is the
report's: 0 intact, 1 a seam/API row FAILs, 2 version differs from the pin (wins over 1).
"""

from __future__ import annotations

import argparse
from typing import Any

from cacheon_subnet.cliout import PLAIN, emit


def cmd_compat(args: argparse.Namespace) -> int:
    from seams.compat import render, runtime_check, static_check

    report = static_check(args.source) if args.source else runtime_check()
    emit(args, report.to_json(), lambda: render(report), PLAIN)
    return report.exit_code


def register(sub: Any, groups: dict[str, Any]) -> None:
    s = sub.add_parser(
        "compat",
        help="SGLang seam canary: pinned version, every seam row, hook/plugin API "
        "(exit 0 intact, 1 seam broken, 2 version differs)",
    )
    s.add_argument(
        "--source",
        metavar="DIR",
        help="static check of an unpacked SGLang tree (DIR holds sglang/); default: inspect the installed runtime",
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=cmd_compat)
