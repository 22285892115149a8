"""Inputs drawn like the engine's (issue 34 item 1): a recorded tokens-per-expert load and recorded
KV lengths reach the slots' input makers through a case's constants, the same for every process
that draws from the seed; without them the synthetic draw is unchanged."""

from __future__ import annotations

import dataclasses

import pytest

from cacheon_subnet.slots import fixture_draw, get_slot
from cacheon_subnet.slots.gen import seed_generator

torch = pytest.importorskip("torch")

SKEWED = [400] + [40] * 15  # one expert takes 40 % of a call's 1000 picks (T 250, K 4)


def _experts_case(consts):
    spec = get_slot("moe.fused_experts")
    c = next(c for c in spec.cases("verify") if c.dims["E"] == 16)
    c = dataclasses.replace(c, dims={**c.dims, "T": 250}, constants={**c.constants, **consts})
    return spec, c


def _load(ids: torch.Tensor, E: int) -> torch.Tensor:
    return torch.bincount(ids.flatten().long(), minlength=E).float() / ids.numel()


def test_moe_routing_follows_the_recorded_load():
    spec, c = _experts_case(fixture_draw.routing_constants(SKEWED))
    got = spec.make_inputs(c, torch.bfloat16, seed_generator(3))
    ids, w = got["topk_ids"], got["topk_weights"]
    assert ids.shape == (250, 4) and ids.dtype == torch.int32 and w.dtype == torch.float32
    assert all(len(set(r)) == 4 for r in ids.tolist())  # K distinct experts a token, as top-k gives
    assert torch.allclose(w.sum(-1), torch.ones(250))
    load = _load(ids, 16).sort(descending=True).values
    assert load[0] > 0.2 and load[1] < 0.1  # the hot expert is hot (<= 25 %: one pick a token at most)
    spec.reference({k: v for k, v in got.items() if spec.arg(k).role == "in"}, c.params)  # a valid call
    again = spec.make_inputs(c, torch.bfloat16, seed_generator(3))
    assert torch.equal(again["topk_ids"], ids)  # the seed fixes it: the re-check draws the same


def test_without_a_fixture_the_synthetic_draw_is_unchanged():
    spec, c = _experts_case({})
    a = spec.make_inputs(c, torch.bfloat16, seed_generator(3))
    uniform = fixture_draw.routing_constants([1000 // 16] * 16)
    b = spec.make_inputs(dataclasses.replace(c, constants=uniform), torch.bfloat16, seed_generator(3))
    assert not fixture_draw.from_fixture(c.constants) and fixture_draw.from_fixture(uniform)
    assert not torch.equal(a["topk_ids"], b["topk_ids"])
    assert _load(b["topk_ids"], 16).max() < 0.1  # a flat recorded load stays flat


def test_the_profile_fits_the_protocols_64_constants():
    consts = fixture_draw.routing_constants(list(range(1, 129)))  # qwen3-30b-a3b: 128 experts
    assert len(consts) == fixture_draw.PROFILE_POINTS and abs(sum(consts.values()) * 4 - 1) < 0.5
    assert len(fixture_draw.kv_constants(list(range(1, 5000)))) == fixture_draw.KV_QUANTILES


def test_attention_decode_draws_the_recorded_kv_lengths():
    spec = get_slot("attention.decode")
    c = next(c for c in spec.cases("verify") if c.dims["B"] >= 4)
    ctx = c.dims["N"] // c.dims["B"]
    recorded = [max(1, ctx // 2)] * 50 + [ctx] * 50
    got = spec.make_inputs(
        dataclasses.replace(c, constants=fixture_draw.kv_constants(recorded)), torch.bfloat16, seed_generator(1)
    )
    lens = (got["kv_indptr"][1:] - got["kv_indptr"][:-1]).tolist()
    assert all(ctx // 2 <= n <= ctx for n in lens), (lens, ctx)  # never the synthetic 1-token request
