"""The digest a large read-only input comes back as (tensor_views.tensor_digest): every byte
counts, chunk order counts, and the value depends on the bytes alone (not on threads or on the
staging path a device tensor takes)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from cacheon_subnet import tensor_views as tv

CHUNK = 1 << 12  # small chunks, so a test tensor spans many


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(tv, "DIGEST_CHUNK", CHUNK)


def _pool(monkeypatch, n: int) -> None:
    monkeypatch.setattr(tv, "_pool", ThreadPoolExecutor(max_workers=n))


def test_the_same_digest_for_any_thread_count_and_either_path(small_chunks, monkeypatch):
    t = torch.randn(50_000).bfloat16()
    _pool(monkeypatch, 1)
    one = tv.tensor_digest(t)
    _pool(monkeypatch, 4)
    assert tv.tensor_digest(t) == one == tv.tensor_digest(t, staged=True)
    assert tv.tensor_digest(t.view(100, 500).t().contiguous().t()) == one  # layout-independent


@pytest.mark.parametrize("where", [0, 25_000, 49_999], ids=["first-chunk", "middle-chunk", "last-chunk"])
def test_one_changed_element_anywhere_changes_the_digest(small_chunks, where):
    t = torch.randn(50_000).bfloat16()
    before = tv.tensor_digest(t)
    t[where] = -t[where] if t[where] != 0 else 1.0
    assert tv.tensor_digest(t) != before
    assert tv.tensor_digest(t, staged=True) != before


def test_a_sign_of_zero_and_swapped_chunks_change_it(small_chunks):
    t = torch.zeros(50_000)
    before = tv.tensor_digest(t)
    t[7] = -0.0
    assert tv.tensor_digest(t) != before  # bits, not values
    u = torch.randn(4 * CHUNK // 4)  # four chunks of float32
    a, b = u[: CHUNK // 4].clone(), u[CHUNK // 4 : CHUNK // 2].clone()
    swapped = torch.cat([b, a, u[CHUNK // 2 :]])
    assert tv.tensor_digest(swapped) != tv.tensor_digest(u)


def test_one_chunk_or_less_is_plain_sha256():
    import hashlib

    t = torch.randn(1000)
    assert tv.tensor_digest(t) == hashlib.sha256(t.numpy().tobytes()).hexdigest()
