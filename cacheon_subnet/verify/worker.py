"""The sandboxed side of verify/bench: imports the bundle and runs its kernels on request.

It decides nothing. The host generates inputs, computes references and judges; this process
only executes calls and ships every argument back, so faking a verdict through the result
channel is impossible: the host checks the numbers itself.

    python -m cacheon_subnet.verify.worker --fd N --bundle-root DIR --package NAME --device D
        [--rank R --world-size W --init-file PATH]   # one rank of a collective (rank_launch.py)
        [--native-root DIR --native OPKEY=DIGEST ...]  # CUDA ops: sealed artifacts the host built

A CUDA op's artifact is opened (re-digested) and its modules loaded before the guard is armed;
its entry then runs each call inside the launcher's call scope (native/runtime.py), so every
path below (eager, compiled, graph capture, bench, host-clocked timing) launches the same way.

A rank joins its process group (gloo on CPU, NCCL on CUDA, file:// rendezvous in the scratch
dir) before the audit guard is armed and before any bundle import; collective kernels then get
that group as `group=`.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from cacheon_subnet.bundle.jitkeys import salt_kernel_keys
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.spec import GROUP_ARG, SlotSpec, dtype_of
from cacheon_subnet.tensor_views import rebase, tensor_digest
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify import wire
from cacheon_subnet.verify import worker_boot as boot
from cacheon_subnet.verify.judge import BIG_INPUT
from native import runtime as native_runtime
from native.artifact import Artifact
from native.launcher import Launches

_SYNC_METHODS = frozenset(
    {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "nonzero", "synchronize"}
)


def _to_host(name: str, args: tuple, kwargs: dict) -> bool:
    """A copy to host memory: `.to("cpu")`, `.to(device="cpu")`, `.type("torch.FloatTensor")`."""
    values = (*args, *kwargs.values())
    if name == "to":
        return any(str(a) == "cpu" or str(a).startswith("cpu:") for a in values)
    return name == "type" and any(isinstance(a, str) and not a.startswith("torch.cuda.") for a in values)


class HostSyncWatch(TorchFunctionMode):
    """Flags device->host reads made directly by bundle code (graph-unsafe on CUDA)."""

    def __init__(self, bundle_root: str) -> None:
        super().__init__()
        self.root = bundle_root
        self.hits: list[str] = []

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in _SYNC_METHODS or _to_host(name, args[1:], kwargs or {}):
            caller = sys._getframe(1)
            if caller.f_code.co_filename.startswith(self.root):
                self.hits.append(f"{name}() at {os.path.relpath(caller.f_code.co_filename, self.root)}:{caller.f_lineno}")
        return func(*args, **(kwargs or {}))


class Worker:
    def __init__(
        self,
        fd: int,
        bundle_root: str,
        package: str,
        device: str,
        group: Any = None,
        natives: Mapping[str, Artifact] | None = None,
        driver: Launches | None = None,
    ) -> None:
        self.fd = fd
        self.root = os.path.realpath(bundle_root) + os.sep
        self.package = package
        self.device = torch.device(device)
        self.group = group  # this rank's ProcessGroup (collective runs only)
        self.natives = dict(natives or {})  # op key -> its sealed artifact (CUDA ops)
        self.driver = driver if driver is not None else native_runtime.driver_for(self.device)
        self.kernels: dict[str, tuple[SlotSpec, Callable[..., Any]]] = {}
        self.compiled: dict[str, Callable[..., Any]] = {}
        # host-clocked timing targets by op key (the op, and "@reference" on either worker)
        self.timed: dict[str, tuple[Callable[..., Any], list[dict[str, torch.Tensor]], dict[str, Any]]] = {}

    def _params(self, spec: SlotSpec, given: Mapping[str, Any], by_name: bool = False) -> dict[str, Any]:
        """Scalar params, plus `group=` for collective slots (its name when it crosses a custom op)."""
        params = dict(given)
        if spec.collective:
            if self.group is None:
                raise RuntimeError(f"{spec.id} is collective but this worker is not part of a process group")
            params[GROUP_ARG] = self.group.group_name if by_name else self.group
        return params

    # -- protocol (verify/protocol.py) ------------------------------------------------------
    def serve(self) -> None:
        handlers: dict[type, Callable[[Any, dict[str, torch.Tensor]], None]] = {
            P.Load: self.on_load,
            P.Call: self.on_call,
            P.Graph: self.on_graph,
            P.Bench: self.on_bench,
            P.TimedSetup: self.on_timed_setup,
            P.TimedRun: self.on_timed_run,
        }
        while True:
            try:
                msg, tensors = wire.recv(self.fd, allow_shm=True)  # the host's sealed frames (verify/shm.py)
            except EOFError:
                return
            try:
                req: P.HostMessage = P.HOST.decode(msg)
            except P.ProtocolError as e:
                wire.send(self.fd, P.reply(P.Error(f"unreadable request: {e}"[: P.ERROR_CHARS])))
                continue
            if isinstance(req, P.Exit):
                return
            handlers[type(req)](req, tensors)

    def on_load(self, req: P.Load, _: dict) -> None:
        results = {}
        for op in req.ops:
            try:
                module = importlib.import_module(f"{self.package}.{op.module}")
                fn = getattr(module, op.attr, None)
                if fn is None or not callable(fn):
                    why = f"{op.module} has no attribute {op.attr!r}" if fn is None else f"{op.attr} is not callable"
                    results[op.key] = P.LoadResult(False, P.Reason.ENTRY_MISSING, why)
                    continue
                salt_kernel_keys(self.package)  # as in the engine: no Triton cache key shared with another kernel
                art = self.natives.get(op.key)
                if art is not None:  # every call of a CUDA op inside its call scope
                    fn = native_runtime.wrap(fn, art, self.driver, self.device)
                self.kernels[op.key] = (get_slot(op.slot), fn)
                results[op.key] = P.LoadResult(True)
            except BaseException as e:  # noqa: BLE001 - any import failure is the bundle's
                results[op.key] = P.LoadResult(False, P.Reason.IMPORT_ERROR, _tail(e))
        wire.send(self.fd, P.reply(P.Loaded(results, _env(self.device))))

    def on_call(self, req: P.Call, tensors: dict[str, torch.Tensor]) -> None:
        spec, fn = self.kernels[req.op]
        compiled = req.mode == P.CallMode.COMPILE
        if compiled:
            fn = self._compiled(req.op, spec, fn)
        t0 = time.perf_counter()
        args = self._materialise(req.alloc, tensors)
        params = self._params(spec, req.params, by_name=compiled)
        t1 = time.perf_counter()
        reply = self._run(spec, fn, args, params, req.watch_sync, req.nonce)
        t2 = time.perf_counter()
        if not reply.ok:
            self._send(reply)
            return
        big = {
            a.name for a in spec.args if a.role == "in" and args[a.name].numel() * args[a.name].element_size() > BIG_INPUT
        }
        digests = {k: tensor_digest(args[k]) for k in sorted(big)}
        back = {k: v.detach().cpu() for k, v in args.items() if k not in big}
        # where the worker's share of a call went (informational, worker-reported: no verdict reads it)
        share = {"materialise": t1 - t0, "invoke": t2 - t1, "digest_and_copy": time.perf_counter() - t2}
        self._send(dataclasses.replace(reply, digests=digests, worker_s=share), back)

    def on_graph(self, req: P.Graph, tensors: dict[str, torch.Tensor]) -> None:
        """Capture one call in a CUDA graph, then replay it with new graph-dynamic values."""
        spec, fn = self.kernels[req.op]
        args = self._materialise(req.alloc, {k: v for k, v in tensors.items() if "." not in k})
        params = self._params(spec, req.params)
        out: dict[str, torch.Tensor] = {}
        try:
            warm = self._run(spec, fn, rebase(args), params, False, req.nonce)
            if not warm.ok:
                self._send(warm)
                return
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn(**args, **params)
        except BaseException as e:  # noqa: BLE001
            self._send(P.Result(False, req.nonce, P.Reason.GRAPH_CAPTURE, _tail(e)))
            return
        try:
            for i in range(req.replays):
                for k, v in tensors.items():
                    if k.startswith(f"r{i}."):
                        args[k.split(".", 1)[1]].copy_(v.to(self.device))
                for name in (a.name for a in spec.args if a.role == "out"):
                    args[name].fill_(_poison(args[name].dtype, 0))
                graph.replay()
                torch.cuda.synchronize()
                for a in spec.args:
                    if a.written:
                        out[f"r{i}.{a.name}"] = args[a.name].detach().cpu().clone()
        except BaseException as e:  # noqa: BLE001
            self._send(P.Result(False, req.nonce, P.Reason.GRAPH_REPLAY, _tail(e)))
            return
        # read-only inputs after the last replay: a kernel that writes into them only while being
        # captured (is_current_stream_capturing) does it on every replay; the host compares
        final = {a.name: tensor_digest(args[a.name]) for a in spec.by_role("in")}
        self._send(P.Result(True, req.nonce, final_digests=final), out)

    def on_bench(self, req: P.Bench, _: dict) -> None:
        from cacheon_subnet.bench_timing import run_bench_request

        spec, fn = self.kernels[req.op]
        tensors: dict[str, torch.Tensor] | None = None
        try:
            done, tensors = run_bench_request(spec, fn, P.request(req), self.device)
            reply = P.read_reply(done, P.BenchReply)  # bench_timing's dict, in its typed form
        except BaseException as e:  # noqa: BLE001
            reply, tensors = P.BenchReply(False, P.Reason.EXCEPTION, _tail(e)), None
        wire.send(self.fd, P.reply(reply), tensors)

    def on_timed_setup(self, req: P.TimedSetup, _: dict) -> None:
        """Host-clocked timing: map the host's memfd (sent right after this frame) as K argument
        sets for one target (a loaded op, or the slot reference on a baseline worker)."""
        import socket

        from cacheon_subnet.bench_timing import map_arena, reference_kernel

        try:
            with socket.socket(fileno=os.dup(self.fd)) as sock:
                _data, fds, _flags, _addr = socket.recv_fds(sock, 1, 1)
            if len(fds) != 1:
                raise RuntimeError(f"expected one memory fd, got {len(fds)}")
            calls = map_arena(fds[0], req.call_bytes, P.request(req)["calls"])
            os.close(fds[0])
            fn = reference_kernel(get_slot(req.slot)) if req.op == "@reference" else self.kernels[req.op][1]
            if req.op not in self.timed and len(self.timed) >= 2:
                raise RuntimeError("at most two timed targets (the op and the reference) per worker")
            self.timed[req.op] = (fn, calls, dict(req.params))
        except BaseException as e:  # noqa: BLE001
            wire.send(self.fd, P.reply(P.TimedReady(False, P.Reason.SETUP, _tail(e))))
            return
        wire.send(self.fd, P.reply(P.TimedReady(True)))

    def on_timed_run(self, req: P.TimedRun, _: dict) -> None:
        """One batch of calls; the reply carries no timing (the host's clock is the only one)."""
        from cacheon_subnet.bench_timing import run_calls

        try:
            if req.op not in self.timed:
                raise RuntimeError(f"timed_run of {req.op!r} before its timed_setup")
            fn, calls, params = self.timed[req.op]
            run_calls(fn, calls, params, min(req.n, len(calls)))
        except BaseException as e:  # noqa: BLE001
            wire.send(self.fd, P.reply(P.TimedDone(False, P.Reason.EXCEPTION, _tail(e))))
            return
        wire.send(self.fd, P.reply(P.TimedDone(True)))

    # -- helpers ----------------------------------------------------------------------------
    def _send(self, reply: P.Result, tensors: dict[str, torch.Tensor] | None = None) -> None:
        """A result echoes its request's nonce: the host refuses a reply that does not answer this call."""
        wire.send(self.fd, P.reply(reply), tensors)

    def _materialise(self, alloc: Mapping[str, P.Alloc], tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Inputs to the device (views preserved); outputs allocated and poisoned; scratch filled."""
        args = rebase(tensors, self.device)
        for name, a in alloc.items():
            t = torch.empty(a.shape, dtype=dtype_of(a.dtype), device=self.device)
            args[name] = _noise(t, a.noise_seed or 0) if a.poison == 2 else t.fill_(_poison(t.dtype, a.poison))
        return args

    def _invoke(
        self, spec: SlotSpec, fn: Callable[..., Any], args: dict[str, torch.Tensor], params: dict[str, Any], watch_sync: bool
    ) -> dict[str, Any]:
        """One call's result as its wire dict (tests/adversarial/test_rng_counter.py reads it)."""
        return P.reply(self._run(spec, fn, args, params, watch_sync, ""))

    def _run(
        self,
        spec: SlotSpec,
        fn: Callable[..., Any],
        args: dict[str, torch.Tensor],
        params: dict[str, Any],
        watch_sync: bool,
        nonce: str,
    ) -> P.Result:
        before = {k: (v.data_ptr(), v.untyped_storage().data_ptr()) for k, v in args.items()}
        watch = HostSyncWatch(self.root)
        cuda = self.device.type == "cuda"
        # torch.rand_like draws from the process's default generators, whose CUDA seed is fixed: a
        # kernel comparing its draw with that known sequence counted its calls (faithful for the
        # first 400, wrong after; red team 2026-12-04). A fresh secret seed per call leaves it no
        # position to read: every draw is new noise, as it is in the engine.
        torch.seed()
        try:
            if cuda and watch_sync:
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            if watch_sync:
                with watch:
                    result = fn(**args, **params)
            else:
                result = fn(**args, **params)
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
                torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
            reason = P.Reason.HOST_SYNC if "synchroniz" in str(e) and watch_sync else P.Reason.EXCEPTION
            return P.Result(False, nonce, reason, _tail(e))
        aliases = []
        input_storages = {v.untyped_storage().data_ptr() for k, v in args.items() if spec.arg(k).role == "in"}
        for k, v in args.items():
            if (v.data_ptr(), v.untyped_storage().data_ptr()) != before[k]:
                aliases.append(f"{k} was re-pointed to other storage")
            elif spec.arg(k).role == "out" and v.untyped_storage().data_ptr() in input_storages:
                aliases.append(f"{k} shares storage with an input")
        returned = None if result is None else type(result).__name__[: P.NAME_CHARS]
        return P.Result(True, nonce, returned=returned, host_sync=tuple(watch.hits), aliases=tuple(aliases))

    def _compiled(self, key: str, spec: SlotSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The dispatch path SGLang's piecewise graphs trace: custom op + Dynamo fullgraph."""
        if key not in self.compiled:
            from cacheon_subnet.slots.custom_op import register_slot_op

            tag = f"{abs(hash(key)) % 10**8}_{len(self.compiled)}"
            call = register_slot_op(spec, fn, "cacheon_verify", tag)

            def dispatch(**kw: Any) -> None:
                call(**kw)

            self.compiled[key] = torch.compile(dispatch, fullgraph=True, backend="aot_eager", dynamic=False)
        return self.compiled[key]


def _poison(dtype: torch.dtype, which: int) -> float | int | bool:
    if dtype.is_floating_point:
        return float("nan") if which == 0 else -31337.0
    if dtype == torch.bool:
        return which == 0
    return -0x5A5A5A5A if which == 0 else 0x3C3C3C3C


def _noise(t: torch.Tensor, seed: int) -> torch.Tensor:
    """Poison 2: data-like values (what a live engine buffer holds), so a kernel cannot tell a
    verify call from an engine call by looking for NaN or -31337 in its output."""
    g = torch.Generator().manual_seed(seed)
    if t.dtype.is_floating_point:
        return t.copy_(torch.randn(t.shape, generator=g))
    return t.copy_(torch.randint(0, 2 if t.dtype == torch.bool else 1 << 15, t.shape, generator=g))


def _tail(e: BaseException, limit: int = 1500) -> str:
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return text[-limit:]


def _env(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0], "device": str(device)}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        pass
    env["triton_interpret"] = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def main(argv: list[str] | None = None) -> int:
    a = boot.parse_args(argv)
    device = boot.device_of(a)
    group = boot.join_group(a, device) if a.world_size > 1 else None
    boot.preload(a, device)
    # the CUDA ops' artifacts and their loaded modules: before the guard (cuda-python's import and
    # cuModuleLoadData are the validator's), never inside a timed or captured call
    natives, driver = native_runtime.open_for_process(a.native_root, a.native, torch.device(device))
    if os.environ.get("TRITON_INTERPRET") == "1":
        from cacheon_subnet.verify import interp_fix

        interp_fix.apply()
    from cacheon_subnet.guard import install_guard

    install_guard(os.path.join(a.bundle_root, a.package), boot.guard_writable(dict(os.environ), os.getcwd()))
    sys.path.insert(0, a.bundle_root)
    Worker(a.fd, os.path.join(a.bundle_root, a.package), a.package, device, group, natives, driver).serve()
    return 0


if __name__ == "__main__":
    from cacheon_subnet.procs import run_main

    run_main(main, wind_down=False)  # no teardown, and nothing the contribution registered runs at exit
