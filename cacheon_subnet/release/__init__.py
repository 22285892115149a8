"""Engine releases: crowned kernels shipped as one signed wheel that a stock SGLang loads.

Kept empty on purpose: the serving runtime (`release.runtime`) is imported inside SGLang's
processes through this package, and must not pull in the build side (validator state, signing).
"""
