"""The host's digest cache for large inputs it sent (verify/judge.sent_digest): a pair's second
call costs no second SHA-256 of a 1.4 GB pool, and the cache never answers for another tensor or
for the same tensor after an in-place write."""

from __future__ import annotations

import torch

from cacheon_subnet.tensor_views import tensor_digest
from cacheon_subnet.verify import judge
from cacheon_subnet.verify import protocol as P


def test_a_tensor_is_hashed_once_per_version(monkeypatch):
    calls = []
    monkeypatch.setattr(judge, "tensor_digest", lambda t: calls.append(1) or tensor_digest(t))
    cache: judge.DigestCache = {}
    t = torch.arange(64, dtype=torch.float32)
    first = judge.sent_digest(t, cache)
    assert judge.sent_digest(t, cache) == first and len(calls) == 1
    t.add_(1)  # an in-place write moves the version: hashed again, to the new value
    assert judge.sent_digest(t, cache) == tensor_digest(t) != first and len(calls) == 2


def test_a_freed_tensors_entry_never_answers_for_a_new_one():
    cache: judge.DigestCache = {}
    ids = []
    for i in range(50):  # ids of freed tensors are reused; each new tensor must get its own digest
        t = torch.full((16,), float(i))
        ids.append(id(t))
        assert judge.sent_digest(t, cache) == tensor_digest(t)
        del t  # freed at once (reference counting): its id is free for the next tensor
    assert len(set(ids)) < len(ids)  # the reuse this test is about did happen


def _reply(digests: dict[str, str]) -> judge.Reply:
    return judge.Reply(P.Result(True, "ab" * 16, digests=digests))


def test_merge_digests_with_the_cache_still_flags_a_mutated_input():
    cache: judge.DigestCache = {}
    sent = {"k": torch.ones(8)}
    got: dict = {}
    ok = judge.merge_digests(_reply({"k": tensor_digest(sent["k"])}), got, sent, cache)
    assert got["k"] is sent["k"] and ok.mutated == () and judge.check_reply(ok) is None
    bad = judge.merge_digests(_reply({"k": tensor_digest(torch.zeros(8))}), {}, sent, cache)  # the worker's copy changed
    assert bad.mutated == ("k",)
    f = judge.check_reply(bad)
    assert f is not None and f.reason == "input_mutated" and f.detail.startswith("['k'] changed (digest differs)")


def test_the_digest_reads_the_buffer_without_changing_its_value():
    t = torch.randn(1000).bfloat16()
    import hashlib

    assert tensor_digest(t) == hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()
    assert tensor_digest(t[::2]) == tensor_digest(t[::2].contiguous())  # layout-independent, as before
