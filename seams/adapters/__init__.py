"""One module per SEAM_ADAPTERS row family. Each exposes `hooks()` -> {patch point: around fn}.

An around fn receives SGLang's original callable first and must return exactly what the
original returns. It routes to the candidate through `seams.dispatch.run` and falls back to the
original only when the call is ineligible (before selection)."""
