"""Stand-in SGLang modules for the collective seam rows (used by seam_harness.runtime_sources).

Collectives: the stand-in engine is one process, so every group has world_size 1 and the stock
paths return what SGLang returns then (all_reduce bypass; fusion (None, None)). The adapters
only have to install and stay out of the way here; tests/seams/test_seam_collective.py drives
them over a real two-rank gloo group.
"""

from __future__ import annotations

PARALLEL_STATE = """import weakref

_groups = {}


class GroupCoordinator:
    def __init__(self, group_name, world_size=1):
        self.unique_name = f"{group_name}:0"
        self.world_size = world_size
        self.device_group = None
        _groups[self.unique_name] = weakref.ref(self)

    def all_reduce(self, input_):
        if self.world_size == 1:
            return input_
        raise NotImplementedError("stand-in runtime has no multi-rank groups")


_TP = GroupCoordinator("tp")


def get_tp_group():
    return _TP


def get_attn_tp_group():
    return _TP


def get_moe_ep_group():
    return _TP


def get_moe_tp_group():
    return _TP


def get_moe_expert_parallel_world_size():
    return 1
"""

FLASHINFER_COMM_FUSION = """def flashinfer_allreduce_residual_rmsnorm(input_tensor, residual, weight, eps=1e-6, max_token_num=2048,
                                          use_oneshot=None, trigger_completion_at_end=False, fp32_acc=False,
                                          use_attn_tp_group=True):
    return None, None  # what 0.5.13.post1 returns without flashinfer or with a world of one
"""
