"""The host's digest cache for large inputs it sent (verify/judge.sent_digest): a pair's second
call costs no second SHA-256 of a 1.4 GB pool, and the cache never answers for another tensor or
for the same tensor after an in-place write."""

from __future__ import annotations

import gc

import pytest
import torch

from cacheon_subnet.tensor_views import tensor_digest
from cacheon_subnet.verify import judge


def test_a_tensor_is_hashed_once_per_version(monkeypatch):
    calls = []
    monkeypatch.setattr(judge, "tensor_digest", lambda t: calls.append(1) or tensor_digest(t))
    cache: judge.DigestCache = {}
    t = torch.arange(64, dtype=torch.float32)
    first = judge.sent_digest(t, cache)
    assert judge.sent_digest(t, cache) == first and len(calls) == 1
    t.add_(1)  # an in-place write moves the version: hashed again, to the new value
    assert judge.sent_digest(t, cache) == tensor_digest(t) != first and len(calls) == 2


@pytest.mark.slow
def test_a_freed_tensors_entry_never_answers_for_a_new_one():
    cache: judge.DigestCache = {}
    for i in range(50):  # ids of freed tensors are reused; each new tensor must get its own digest
        t = torch.full((16,), float(i))
        assert judge.sent_digest(t, cache) == tensor_digest(t)
        del t
        gc.collect()


def test_merge_digests_with_the_cache_still_flags_a_mutated_input():
    cache: judge.DigestCache = {}
    sent = {"k": torch.ones(8)}
    ok = {"digests": {"k": tensor_digest(sent["k"])}}
    got: dict = {}
    judge.merge_digests(ok, got, sent, cache)
    assert got["k"] is sent["k"] and "mutated_inputs" not in ok
    bad = {"digests": {"k": tensor_digest(torch.zeros(8))}}  # the worker's copy changed
    judge.merge_digests(bad, {}, sent, cache)
    assert bad["mutated_inputs"] == ["k"]


def test_the_digest_reads_the_buffer_without_changing_its_value():
    t = torch.randn(1000).bfloat16()
    import hashlib

    assert tensor_digest(t) == hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()
    assert tensor_digest(t[::2]) == tensor_digest(t[::2].contiguous())  # layout-independent, as before
