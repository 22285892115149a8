"""The decode-attention launch-configuration sweep behind scripts/sweep_attention_decode.py.

One responsibility a module, so each piece can be read (and tested on CPU) on its own:
  grid        what is swept: launch configs, shapes, the per-row record
  inputs      the slot generator's K/V pool paged as the arena pages it, SGLang's split hint
  sides       the two kernels timed: the example under a forced config, stock SGLang
  check       one eager call of a side against stock and the fp32 reference
  timing      CUDA-graph capture and interleaved, L2-flushed replays
  precompile  the Triton cache filled by worker processes before anything is timed
  sweep       the run itself: shapes in order, the budget, the JSON document
  render      the text summary of a document (also of a saved one: --render-json)
Nothing here imports torch or Triton at import time: the CPU path sets TRITON_INTERPRET first.
"""
