"""The suite's own process runs Triton as the CPU interpreter, whichever test imports it first
(tests/conftest.py): a kernel interpreted against a compiled-mode triton.language fails on its
first library call, as tests/slots/test_attention.py did under -n 3 (2026-12-05)."""

import triton.language  # what any earlier test may have imported first  # noqa: F401


def test_triton_language_in_this_process_is_interpreted() -> None:
    import triton.language.standard as standard

    assert type(standard.zeros).__name__ == "InterpretedFunction"
