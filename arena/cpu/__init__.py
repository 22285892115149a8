"""The CPU arena: slot-level timing on the host's clock, for CPU-only validators and the demo."""
