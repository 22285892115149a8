"""The engine driver's unpickle guard (arena/engine/unpickle_guard.py): the driver holds the host's nonces
and the record pipe and reads pickles from the engine's processes (SGLang's ZMQ recv_pyobj, the
fake engine's Pipe), which run contribution code. Data loads; code is refused (red team
2026-12-04; the whole attack through the arena: test_arena_corpus.py, `arena/driver_pickle`).
Run in a child: install() patches this process's pickle module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import collections, multiprocessing.reduction as r, os, pickle
dumps = pickle.dumps
from arena.engine import unpickle_guard as g
g.install()
for o in [("ok", None), {"a": [1, 2.5, None, (3, "x")]}, collections.OrderedDict(a=1), b"xy", {1, 2}, range(3)]:
    assert pickle.loads(dumps(o)) == o and r.ForkingPickler.loads(dumps(o)) == o, o
import numpy as np
try:  # no numpy: SGLang's scheduler sends lists (.tolist()), and numpy's reconstructors are gadgets
    pickle.loads(dumps(np.arange(6.0).reshape(2, 3)))
    raise SystemExit("numpy NOT REFUSED")
except pickle.UnpicklingError:
    pass
class Shell:
    def __reduce__(self):
        return (os.system, ("echo PWNED",))
class Eval:
    def __reduce__(self):
        return (eval, ("print('PWNED')",))
for bad in (Shell(), Eval()):
    for loads in (pickle.loads, r.ForkingPickler.loads, lambda b: pickle.Unpickler(__import__("io").BytesIO(b)).load()):
        try:
            loads(dumps(bad))
        except pickle.UnpicklingError:
            continue
        raise SystemExit("NOT REFUSED")
print("FORGED", sorted(set(g.forged)))
"""


def test_the_driver_unpickles_data_and_refuses_code():
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PWNED" not in out.stdout and "FORGED ['builtins.eval', 'posix.system']" in out.stdout, out.stdout


# What SGLang 0.5.13.post1's scheduler really sends the driver under skip_tokenizer_init (read in its
# io_struct.py, schedule_batch.py, observability/req_time_stats.py): stand-ins under the same module
# and class names, so the allowlist is checked against the message's real globals without SGLang.
STUBS = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/managers/__init__.py": "",
    "sglang/srt/observability/__init__.py": "",
    "sglang/srt/managers/schedule_batch.py": (
        "class BaseFinishReason:\n    def __init__(self, is_error=False):\n        self.is_error = is_error\n"
        "class FINISH_LENGTH(BaseFinishReason):\n    def __init__(self, length):\n"
        "        super().__init__()\n        self.length = length\n"
        "class FINISH_ABORT(BaseFinishReason):\n    def __init__(self, message=None, status_code=None):\n"
        "        super().__init__(is_error=True)\n        self.message, self.status_code = message, status_code\n"
        "class ScheduleBatch:\n    pass\n"
    ),
    "sglang/srt/observability/req_time_stats.py": (
        "from dataclasses import dataclass\n@dataclass\nclass SchedulerReqTimeStats:\n"
        "    wait_queue_entry_time: float = 0.0\n    forward_entry_time: float = 0.0\n"
        "    def __getstate__(self):\n        return {'wait_queue_entry_time': self.wait_queue_entry_time}\n"
        "    def __setstate__(self, state):\n        self.__dict__.update(state)\n"
    ),
    "sglang/srt/managers/io_struct.py": (
        "from dataclasses import dataclass, field\nfrom typing import Any, List, Optional\n"
        "from sglang.srt.managers.schedule_batch import BaseFinishReason\n"
        "from sglang.srt.observability.req_time_stats import SchedulerReqTimeStats\n"
        "@dataclass\nclass MemoryMetrics:\n    weight_gb: float = 0.0\n"
        "@dataclass\nclass GetLoadsReqOutput:\n    dp_rank: int = 0\n    memory: Optional[MemoryMetrics] = None\n"
        "@dataclass\nclass BatchTokenIDOutput:\n    rids: List[str]\n    finished_reasons: List[Any]\n"
        "    decode_ids: List[Any]\n    output_ids: Optional[List[Any]]\n    output_token_logprobs_val: List[float]\n"
        "    output_top_logprobs_idx: List[List]\n    routed_experts: List[Any]\n"
        "    load: Any = None\n    customized_info: Any = None\n    time_stats: Any = None\n"
        "@dataclass\nclass RpcReqOutput:\n    success: bool\n    message: str\n"
    ),
}

REAL_MESSAGES = r"""
import array, http, pickle, sys
sys.path.insert(0, sys.argv[1])
from sglang.srt.managers import io_struct as io, schedule_batch as sb
from sglang.srt.observability.req_time_stats import SchedulerReqTimeStats
msg = io.BatchTokenIDOutput(
    rids=["r0", "r1"], finished_reasons=[sb.FINISH_LENGTH(8), sb.FINISH_ABORT("x", http.HTTPStatus.BAD_REQUEST)],
    decode_ids=[array.array("l", [1, 2, 3]), array.array("q", [4])], output_ids=[array.array("i", [5])],
    output_token_logprobs_val=[-0.5, -1.25], output_top_logprobs_idx=[[1, 2], [3, 4]], routed_experts=[None, None],
    load=io.GetLoadsReqOutput(0, io.MemoryMetrics(1.5)), customized_info={}, time_stats=[SchedulerReqTimeStats(1.0)])
rpc = io.RpcReqOutput(True, "ok")
blobs = [(pickle.dumps(m, protocol=p), p) for m in (msg, rpc) for p in (4, 5)]
bad = pickle.dumps(sb.ScheduleBatch())  # an engine class that is no message: a gap, named, not forging
from arena.engine import unpickle_guard as g
g.install()
for b, p in blobs:
    got = pickle.loads(b)
    assert pickle.dumps(got, protocol=p) == b, got  # loaded whole: it pickles back to the same bytes
got = pickle.loads(blobs[0][0])
assert got.decode_ids[0].tolist() == [1, 2, 3] and got.finished_reasons[1].status_code == http.HTTPStatus.BAD_REQUEST
assert pickle.loads(pickle.dumps(getattr)) is g._enum_member  # the real one never reaches the load
for sneaky in (b"cbuiltins\ngetattr\n(cbuiltins\nobject\nV__subclasses__\ntR.",):
    try:
        pickle.loads(sneaky)
        raise SystemExit("getattr NOT REFUSED")
    except pickle.UnpicklingError:
        pass
try:
    pickle.loads(bad)
    raise SystemExit("ScheduleBatch NOT REFUSED")
except pickle.UnpicklingError:
    pass
print("REFUSED", g.refused[-1:], "FORGED", g.forged)
"""


def test_the_schedulers_real_message_globals_load_and_a_non_message_class_is_a_named_gap(tmp_path):
    """The allowlist must pass every global of a real scheduler→driver message (else every GPU verdict
    ends NO_DECISION), and an engine class outside the message modules is refused as a gap, not forging."""
    for rel, text in STUBS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = subprocess.run(
        [sys.executable, "-c", REAL_MESSAGES, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "REFUSED ['sglang.srt.managers.schedule_batch.ScheduleBatch'] FORGED [\"getattr(object, '__subclasses__')\"]"
        in out.stdout
    ), out.stdout


# Red team 2026-12-04 #4: gadgets past find_class's names. (a) protocol 4 walks a dotted name, and
# numpy.dtypes "_add_dtype_helper.__class__" is FunctionType (".__code__.__class__" CodeType): a function
# built of data, then called. (b) BUILD is dtype.__setstate__, which rewrites a non-built-in dtype's flags:
# an object dtype without REFCHK made scalar() read 8 raw bytes as a PyObject* that REDUCE called.
# (c) numpy.ndarray((1,), "O", buffer=raw) takes raw bytes as object pointers.
GADGETS = r"""
import io, os, pickle, sys
import numpy as np
from arena.engine import unpickle_guard as g
g.install()
P = pickle
def payload():
    print("PWNED")
c = payload.__code__
code_args = (c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_nlocals, c.co_stacksize, c.co_flags,
             c.co_code, c.co_consts, c.co_names, c.co_varnames, c.co_filename, c.co_name, c.co_qualname,
             c.co_firstlineno, c.co_linetable, c.co_exceptiontable, c.co_freevars, c.co_cellvars)
def stream(proto, build):
    out = io.BytesIO(); p = pickle._Pickler(out, protocol=proto); p.write(P.PROTO + bytes([proto])); build(p)
    p.write(P.STOP); return out.getvalue()
def dotted(p):
    for n in ("_add_dtype_helper.__class__", "_add_dtype_helper.__code__.__class__"):
        p.save("numpy.dtypes"); p.save(n); p.write(P.STACK_GLOBAL)
    p.save(code_args); p.write(P.REDUCE + P.EMPTY_DICT + P.TUPLE2 + P.REDUCE + P.EMPTY_TUPLE + P.REDUCE)
def dtype_flags(p):
    p.write(P.GLOBAL + b"numpy._core.multiarray\nscalar\n" + P.GLOBAL + b"numpy\ndtype\n")
    p.save(("O8", False, True)); p.write(P.REDUCE); p.save((3, "|", None, None, None, -1, -1, 0)); p.write(P.BUILD)
    p.save(id(print).to_bytes(8, "little")); p.write(P.TUPLE2 + P.REDUCE); p.save(("PWNED",)); p.write(P.REDUCE)
def ndarray_buffer(p):
    p.write(P.GLOBAL + b"numpy\nndarray\n"); p.save(((1,), "O", id(print).to_bytes(8, "little"))); p.write(P.REDUCE)
for name, build, proto in (("dotted", dotted, 4), ("dtype_flags", dtype_flags, 3), ("ndarray_buffer", ndarray_buffer, 3)):
    try:
        got = pickle.loads(stream(proto, build))
    except (pickle.UnpicklingError, TypeError, ValueError) as e:
        print("REFUSED", name, type(e).__name__)
        continue
    if isinstance(got, np.ndarray) and got.dtype == object:
        got[0]("PWNED")  # what the driver's use of the message would touch
    print("LOADED", name)
print("FORGED", sorted(set(g.forged)))
"""


def test_numpy_and_dotted_name_gadgets_run_nothing_in_the_driver():
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", GADGETS], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PWNED" not in out.stdout and "LOADED" not in out.stdout, out.stdout
    assert all(f"REFUSED {n} UnpicklingError" in out.stdout for n in ("dotted", "dtype_flags", "ndarray_buffer")), out.stdout
    assert "numpy.dtypes._add_dtype_helper.__class__" in out.stdout, out.stdout  # a dotted name is forging
