"""The install's half of the plugin contract: SGLang loads the seam only through an entry point.

`load_plugins()` (sglang/srt/plugins/__init__.py) keeps one plugin per entry-point name (the
last one `importlib.metadata` lists wins) and logs and swallows a plugin that fails to import or
raises. So the seam is installed only when exactly one entry point named `cacheon` exists in
`sglang.srt.plugins` and it resolves to `seams.plugin:load`: a source checkout run without
`pip install` has none, a second distribution declaring `cacheon` shadows it. Either way every
engine would run stock while `cacheon compat` checked only SGLang's side (red team 2026-12-01).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from seams.table import PLUGIN_GROUP

PLUGIN_NAME = "cacheon"
PLUGIN_VALUE = "seams.plugin:load"
ROW = "cacheon entry point"


MISSING_NOTE = "none installed: every arena engine gets it from arena.engine.host.plugin_site (a source checkout)"


def entry_point_problem(missing_ok: bool = True) -> str | None:
    """None when SGLang will load exactly our plugin, else why it will not. With none installed
    (a source checkout, as on the lent GPU box) the arena's engines still get exactly one:
    arena.engine.host.plugin_site writes it onto their PYTHONPATH, so that is a problem only where no
    arena engine is involved (missing_ok=False)."""
    eps = [ep for ep in entry_points(group=PLUGIN_GROUP) if ep.name == PLUGIN_NAME]
    if not eps:
        return (
            None
            if missing_ok
            else (
                f"no entry point {PLUGIN_NAME!r} in group {PLUGIN_GROUP!r}: SGLang never loads the seam "
                f"(install this project: pip install -e .)"
            )
        )
    if len(eps) > 1:
        return (
            f"{len(eps)} entry points named {PLUGIN_NAME!r} in {PLUGIN_GROUP!r} "
            f"({', '.join(sorted(ep.value for ep in eps))}): SGLang keeps only one of them"
        )
    ep = eps[0]
    if ep.value != PLUGIN_VALUE:
        return f"entry point {PLUGIN_NAME} = {ep.value}, expected {PLUGIN_VALUE}"
    try:
        fn = ep.load()
    except Exception as e:  # noqa: BLE001 - SGLang swallows this; here it is the finding
        return f"entry point {PLUGIN_NAME} = {ep.value} does not load: {type(e).__name__}: {str(e)[:160]}"
    from seams import plugin

    if fn is not plugin.load:
        return f"entry point {PLUGIN_NAME} = {ep.value} resolves to {fn!r}, not this checkout's seams.plugin.load"
    return None
