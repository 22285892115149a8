import torch.distributed as dist


def reduce_into(t, g):
    dist.all_reduce(t, group=g)


REDUCE = (reduce_into,)  # expect: P016
