"""What bundle Python may name: the tables of the allowlist policy (policy.py applies them).

Everything not listed here is refused. Module attributes are listed as full dotted chains with
the one position each may take; attributes of computed values (tensors, dtypes, devices, ints,
Triton values) come from one short method/attribute list that is safe on every object a
conforming bundle can hold (its arguments, the results of the calls below, its own functions).
Missing from VALUE_ATTRS on purpose: storage / untyped_storage / data_ptr (raw memory, memo
keys), item / tolist / numpy / cpu (host syncs; numpy arrays carry `.ctypes`), format /
format_map (str.format walks attributes), grad_fn / register_hook / apply_ (callbacks), and
every Triton internal (fn, src, run, cache, handle).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

RULES: Mapping[str, str] = {
    "P001": "process spawning",
    "P002": "network access",
    "P003": "native code loading",
    "P004": "timers or monkey-patching",
    "P005": "dynamic code or reflection",
    "P006": "GC / frame introspection",
    "P007": "host sync inside the op (graph-unsafe)",
    "P008": "files, threads, signals or environment",
    "P009": "import outside the allowed set",
    "P010": "syntax error",
    "P011": "name not allowed",
    "P012": "attribute not allowed",
    "P013": "dunder or private name",
    "P014": "statement not allowed at module level",
    "P015": "statement or expression not allowed",
    "P016": "module object or type used outside its allowed position",
    "P017": "assignment target not allowed",
    "P018": "decorator or Triton-source rule",
    "P019": "call form not allowed",
    "P020": "source encoding",
    "P021": "relative import of something that is not a bundle definition",
    "P022": "static scan budget: the scan (or the normalized identity) ran out of CPU, wall time or memory, or crashed",
}

# import statement -> (name it binds, canonical module); nothing else may be imported (relative
# imports of bundle definitions aside).
IMPORTS: Mapping[tuple[str, str | None], tuple[str, str]] = {
    ("torch", None): ("torch", "torch"),
    ("torch.distributed", None): ("torch", "torch"),
    ("torch.distributed", "dist"): ("dist", "torch.distributed"),
    ("triton", None): ("triton", "triton"),
    ("triton.language", None): ("triton", "triton"),
    ("triton.language", "tl"): ("tl", "triton.language"),
    ("math", None): ("math", "math"),
    ("native", None): ("native", "native"),  # only in a CUDA op's entry module (scan.py, NATIVE_CALLS)
}
# The validator-owned launcher (native/launcher.py): the one way a CUDA op's wrapper runs its
# kernels. `import native` is allowed only in the entry module of an op with [ops.cuda]; every
# other module (a Triton op's, a helper) is refused the import and may not import from that module.
NATIVE_MODULE = "native"
NATIVE_CALLS = frozenset({"native.launch", "native.scratch"})
TYPING_NAMES = frozenset({"Any", "Optional", "Union", "Tuple", "List", "Dict", "Sequence", "Mapping", "Callable"})

# Kinds: "call" (only as the function of a call), "value" (an immutable constant), "annotation"
# (a type, only inside annotations), "namespace" (only as the middle of a longer chain),
# "decorator" (only as a decorator or inside one).
_TORCH_CALLS = """empty empty_like empty_strided zeros zeros_like ones ones_like full full_like arange rand_like
    randn_like rsqrt sqrt exp log sin cos tanh sigmoid abs maximum minimum where matmul mm bmm cat stack sum mean
    amax amin softmax topk clamp gather finfo iinfo linalg.vector_norm cuda.is_available cuda.is_current_stream_capturing
    nn.functional.silu nn.functional.gelu nn.functional.relu nn.functional.softmax nn.functional.rms_norm
    nn.functional.layer_norm nn.functional.linear nn.functional.pad
    distributed.all_reduce distributed.all_gather_into_tensor distributed.reduce_scatter_tensor distributed.broadcast
    distributed.get_rank distributed.get_world_size"""
# Where each distributed call takes its group (positionally); policy.py requires one (group=).
GROUP_POSITION: Mapping[str, int] = {
    "torch.distributed.all_reduce": 2,
    "torch.distributed.all_gather_into_tensor": 2,
    "torch.distributed.reduce_scatter_tensor": 3,
    "torch.distributed.broadcast": 2,
    "torch.distributed.get_rank": 0,
    "torch.distributed.get_world_size": 0,
}
_TORCH_VALUES = """float32 float16 bfloat16 float64 int8 int16 int32 int64 uint8 bool
    distributed.ReduceOp.SUM distributed.ReduceOp.MAX distributed.ReduceOp.MIN distributed.ReduceOp.PRODUCT
    distributed.ReduceOp.AVG"""
_TORCH_TYPES = "Tensor dtype device Size distributed.ProcessGroup"
_TORCH_NAMESPACES = "cuda linalg nn nn.functional distributed distributed.ReduceOp"

# Public triton.language functions a kernel body uses; no core/semantic/extra/runtime internals,
# no inline_asm_elementwise (raw PTX), no pointer_type (int -> pointer casts), no prints.
_TL_CALLS = """program_id num_programs arange zeros zeros_like full load store where sum max min maximum minimum
    argmax argmin exp exp2 log log2 sqrt sqrt_rn rsqrt abs cos sin erf floor ceil fma sigmoid softmax dot trans
    permute reshape view broadcast_to expand_dims ravel join split interleave cdiv cumsum cumprod reduce
    associative_scan sort flip xor_sum umulhi clamp fdiv div_rn cast static_range range multiple_of max_contiguous
    max_constancy static_assert device_assert debug_barrier atomic_add atomic_max atomic_min atomic_cas atomic_xchg
    rand randn randint make_block_ptr advance histogram"""
_TL_VALUES = """float32 float16 bfloat16 float64 float8e4nv float8e5 int1 int8 int16 int32 int64 uint8 uint16 uint32
    uint64"""
_TL_TYPES = "constexpr tensor dtype"


def _table() -> dict[str, str]:
    out: dict[str, str] = {}
    for prefix, groups in (
        (
            "torch.",
            (
                (_TORCH_CALLS, "call"),
                (_TORCH_VALUES, "value"),
                (_TORCH_TYPES, "annotation"),
                (_TORCH_NAMESPACES, "namespace"),
            ),
        ),
        ("triton.language.", ((_TL_CALLS, "call"), (_TL_VALUES, "value"), (_TL_TYPES, "annotation"))),
    ):
        for text, kind in groups:
            out.update({prefix + name: kind for name in text.split()})
    out.update(
        {
            "triton.cdiv": "call",
            "triton.next_power_of_2": "call",
            "triton.language": "namespace",
            "triton.jit": "decorator",
            "triton.autotune": "decorator",
            "triton.heuristics": "decorator",
            "triton.Config": "decorator",
        }
    )
    out.update({f"math.{n}": "call" for n in ("sqrt", "exp", "log", "log2", "ceil", "floor", "isqrt")})
    out.update({"math.pi": "value", "math.e": "value", "math.inf": "value"})
    out.update(dict.fromkeys(NATIVE_CALLS, "call"))
    return out


MODULE_ATTRS: Mapping[str, str] = _table()

# Methods and attributes allowed on any computed value (never on a module: those use MODULE_ATTRS).
_VALUE_WORDS = """
    shape dtype device ndim is_cuda is_contiguous stride size numel dim element_size itemsize is_floating_point
    contiguous view view_as reshape flatten unsqueeze squeeze transpose permute expand expand_as narrow select chunk
    split t T mT clone new_empty new_zeros new_full masked_fill index_select
    copy_ fill_ zero_ add_ sub_ mul_ div_ clamp_ pow_ sqrt_ rsqrt_ square_ exp_ neg_ abs_
    add sub mul div pow square sqrt rsqrt exp log neg abs amax amin max min sum mean cumsum argmax argmin topk sort
    flip clamp relu sigmoid tanh sin cos softmax matmul float half bfloat16 to type index eps tiny
    element_ty primitive_bitwidth scalar
    get items keys values append
"""
VALUE_ATTRS = frozenset(_VALUE_WORDS.split())
# Never `gather` here: on the `group` argument it is ProcessGroup.gather, a raw collective outside
# the dist.* rules that returns an un-waitable Work (static/ops_process_group_raw_method); tensors
# use torch.gather(x, dim, index). `size` is the only name left that a ProcessGroup also has.
# Tensor methods that change what a tensor *is* (its storage, shape, strides, sharing or autograd
# state) rather than the values in it. On an argument the change outlives the call: in an engine
# `weight.set_(t)` re-points a weight every later user reads (the stock baseline route too), and
# verify's re-point check saw it only on the call that did it. None of them may enter VALUE_ATTRS
# (tests/policy/test_policy.py); `out=` on a torch function resizes its target the same way and is a
# P019 call form (policy.py, `static/state_out_kwarg_resize`).
METADATA_MUTATORS = frozenset(
    """set_ resize_ resize_as_ as_strided_ squeeze_ unsqueeze_ t_ transpose_ swapdims_
    swapaxes_ share_memory_ requires_grad_ retain_grad detach_ pin_memory record_stream untyped_storage storage
    data grad""".split()
)
# The only VALUE_ATTRS that may be read without being called (immutable facts: geometry, dtype,
# device, finfo numbers, Triton type fields). Every other one is a method and may only be the
# function of a call: as a bare value, a method name also reads a same-named DATA attribute of a
# module-lifetime object, e.g. `kernel.keys` (an Autotuner's key list) or `kernel.values` (a
# Heuristics dict), mutable state that outlives the call (`static/state_autotuner_keys_counter`).
VALUE_DATA = frozenset(
    """shape dtype device ndim is_cuda T mT itemsize eps tiny max min element_ty primitive_bitwidth
    scalar index type""".split()
)

# Builtins a bundle may call or name. None of them reaches an object it is not handed.
_BUILTIN_WORDS = """
    range len min max abs int float bool tuple list dict set enumerate zip sorted reversed sum any all round divmod
    pow slice map filter str
    ValueError RuntimeError NotImplementedError AssertionError TypeError ImportError IndexError KeyError
"""
BUILTINS = frozenset(_BUILTIN_WORDS.split())
ANNOTATION_BUILTINS = frozenset({"int", "float", "bool", "str", "bytes", "tuple", "list", "dict", "set"})

# Keyword arguments of a kernel launch `k[grid](...)` besides the kernels' own parameters
# (never extern_libs, debug, arch, ...: compile options that load files or change codegen).
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"})
JIT_OPTIONS = frozenset({"do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline"})
AUTOTUNE_OPTIONS = frozenset({"configs", "key", "reset_to_zero", "restore_value", "warmup", "rep"})
CONFIG_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})
# Triton 3.6 hands every keyword of a launch (and every key of a triton.Config dict or a
# triton.heuristics dict, which become launch keywords) to backend.parse_options: a name below
# is a compile option, not a kernel argument, even when some kernel of the bundle has a
# parameter of that name (`def _decoy(ir_override, extern_libs)` let `_k[g](..., extern_libs=...)`
# through the launch rule: static/triton_option_param_smuggle). Fields of CUDAOptions and
# HIPOptions (tests/policy/test_policy.py checks the installed Triton has no others); no kernel
# parameter, launch keyword or Config / heuristics key may be one, LAUNCH_OPTIONS aside.
TRITON_OPTIONS = frozenset(
    """allowed_dot_input_precisions arch backend_name debug default_dot_input_precision
    deprecated_fp8_dot_operand_dtypes enable_fp_fusion enable_reflect_ftz extern_libs instrumentation_mode ir_override
    launch_cooperative_grid launch_pdl max_num_imprecise_acc_default maxnreg num_ctas num_stages num_warps ptx_options
    ptx_version sanitize_overflow supported_fp8_dtypes warp_size allow_flush_denorm kpack matrix_instr_nonkdim
    schedule_hint waves_per_eu num_buffers_warp_spec num_consumer_groups reg_dec_producer reg_inc_consumer grid warmup
    device stream device_type""".split()
)
# Kernel parameters may not be spelled like a name Triton's launcher itself binds (the compile
# options above, or a name of the binder `dynamic_func(<params>, **options)` that Triton 3.6
# execs: a parameter `specialize_impl` made the binder call the argument, a bundle function,
# with Triton's backend object; bundle/identity_rules.py keeps the same names verbatim).
TRITON_RESERVED_PARAMS = TRITON_OPTIONS | frozenset(
    """instrumentation_mode options params specialization
    specialize_impl backend JITCallable dynamic_func self args kwargs nargs""".split()
)

# Refusals of well-known escape routes keep their historical rule codes (P001-P008) so reports
# stay readable; anything else not allowlisted gets the generic allowlist code.
MODULE_CODES: Mapping[str, str] = {
    "subprocess": "P001",
    "multiprocessing": "P001",
    "os": "P001",
    "pty": "P001",
    "shutil": "P001",
    "socket": "P002",
    "ssl": "P002",
    "http": "P002",
    "urllib": "P002",
    "requests": "P002",
    "aiohttp": "P002",
    "ftplib": "P002",
    "smtplib": "P002",
    "asyncio": "P002",
    "torch.distributed.rpc": "P002",
    "ctypes": "P003",
    "cffi": "P003",
    "torch.utils.cpp_extension": "P003",
    "torch._C": "P003",
    "triton.runtime": "P003",
    "triton.compiler": "P003",
    "triton.backends": "P003",
    "torch.library": "P003",
    "torch.ops": "P003",
    "time": "P004",
    "timeit": "P004",
    "builtins": "P004",
    "sys": "P004",
    "torch._dynamo": "P004",
    "torch.cuda.Event": "P004",
    "functools": "P004",
    "operator": "P005",
    "importlib": "P005",
    "marshal": "P005",
    "pickle": "P005",
    "inspect": "P006",
    "gc": "P006",
    "types": "P006",
    "threading": "P008",
    "signal": "P008",
    "_thread": "P008",
    "concurrent": "P008",
    "torch.distributed.elastic": "P001",
    "torch.distributed.run": "P001",
    "torch.distributed.launcher": "P001",
}
NAME_CODES: Mapping[str, str] = {
    "eval": "P005",
    "exec": "P005",
    "compile": "P005",
    "__import__": "P005",
    "getattr": "P005",
    "hasattr": "P005",
    "type": "P005",
    "object": "P005",
    "super": "P005",
    "memoryview": "P005",
    "setattr": "P004",
    "delattr": "P004",
    "globals": "P006",
    "vars": "P006",
    "locals": "P006",
    "dir": "P006",
    "breakpoint": "P006",
    "id": "P006",
    "open": "P008",
    "input": "P008",
    "print": "P008",
    "__builtins__": "P004",
}
ATTR_CODES: Mapping[str, str] = {
    "item": "P007",
    "tolist": "P007",
    "numpy": "P007",
    "cpu": "P007",
    "synchronize": "P007",
    "elapsed_time": "P004",
    "record_function": "P004",
    "perf_counter": "P004",
    "Event": "P004",
    "time": "P004",
    "load_library": "P003",
    "load_inline": "P003",
    "cpp_extension": "P003",
    "ops": "P003",
    "library": "P003",
    "f_back": "P006",
    "f_locals": "P006",
    "f_globals": "P006",
    "gi_frame": "P006",
    "tb_frame": "P006",
    "cr_frame": "P006",
    "_getframe": "P006",
    "__globals__": "P006",
    "__code__": "P006",
    "__dict__": "P006",
    "__class__": "P006",
    "__subclasses__": "P006",
    "__traceback__": "P006",
    "modules": "P006",
    "__builtins__": "P004",
    "__setattr__": "P004",
    "environ": "P008",
    "putenv": "P008",
    "getenv": "P008",
    "system": "P001",
    "sys": "P004",
    "os": "P001",
    "builtins": "P004",
    "init_process_group": "P002",
    "new_group": "P002",
    "new_subgroups": "P002",
    "destroy_process_group": "P002",
    "TCPStore": "P002",
    "FileStore": "P002",
    "HashStore": "P002",
    "PrefixStore": "P002",
    "init_device_mesh": "P002",
}


def never_statement(st: ast.stmt) -> bool:
    return (
        isinstance(
            st,
            (
                ast.ClassDef,
                ast.Try,
                ast.With,
                ast.AsyncWith,
                ast.AsyncFor,
                ast.AsyncFunctionDef,
                ast.Global,
                ast.Nonlocal,
                ast.Delete,
                ast.Match,
            ),
        )
        or type(st).__name__ == "TryStar"
    )


def module_code(name: str) -> str:
    for prefix in sorted(MODULE_CODES, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return MODULE_CODES[prefix]
    return "P009"


def chain_code(full: str) -> str:
    code = module_code(full)
    if code != "P009":
        return code
    return next((ATTR_CODES[p] for p in full.split(".") if p in ATTR_CODES), "P012")
