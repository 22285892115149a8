"""Exact runtime pins. The pin is part of evaluation identity, not a loose minimum."""

SGLANG_PIN = "0.5.13.post1"
SGLANG_KERNEL_PIN = "0.4.3"
TORCH_PIN = "2.11.0"  # what SGLang 0.5.13.post1 requires on the GPU box
BITTENSOR_PIN = "11.3.0"
