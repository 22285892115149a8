"""A CPU stand-in for sglang.Engine with the same calls the arena driver makes (generate with
token ids and logprobs, collective_rpc, shutdown). Like SGLang, the engine object in the driver
is a proxy and the "scheduler" is a separate process started with multiprocessing's spawn
(so it inherits none of the driver's pipes); that process activates the real seam
(seams.activate) and its tiny LM calls the real dispatch (seams.dispatch.run) for norm.rmsnorm,
so receipts, answers, route swaps, strict failures and wrong kernels behave as in the engine, and
contribution code runs where it runs in SGLang: in the scheduler, never in the driver."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# torch is bound by _serve, in the scheduler process only: the driver holds just the proxy, and
# not importing torch there saves ~1.2 CPU-s per engine start (docs/benchmarks.md, session 14).

V, H = 512, 64


def _reference_stock(slot_id: str):
    from cacheon_subnet.slots import get_slot

    spec = get_slot(slot_id)

    def kernel(**kw: Any) -> None:
        ref = spec.reference({a.name: kw[a.name] for a in spec.args}, {p.name: kw[p.name] for p in spec.params})
        for a in spec.args:
            if a.written and a.name in ref:
                kw[a.name].copy_(ref[a.name])

    return kernel, f"reference stand-in for {slot_id}"


class _Runner:
    def __init__(self, engine: FakeCore) -> None:
        self.engine = engine
        self.graph_runner = None
        self.piecewise_cuda_graph_runner = None
        self.device_timer = None  # SGLang's timing slot (model_runner.py:408); the forward clock fills it

    def init_device_graphs(self) -> None:
        """'Capture': one forward at a decode batch size, like CUDA graph capture does."""
        self.engine.capturing = True
        try:
            self.engine.hidden(torch.zeros(4, 3, dtype=torch.long))
        finally:
            self.engine.capturing = False
        self.graph_runner = object()

    def init_piecewise_cuda_graphs(self) -> None:
        self.piecewise_cuda_graph_runner = object()


class FakeCore:
    def __init__(self, **kwargs: Any) -> None:
        from seams import route
        from seams.activate import activate_scheduler

        if os.environ.get("TRITON_INTERPRET") == "1":
            from cacheon_subnet.verify import interp_fix

            interp_fix.apply()  # bf16 loads/stores under the CPU interpreter

        g = torch.Generator().manual_seed(0)
        self.emb = torch.randn(V, H, generator=g) * 0.5
        self.weight = (1 + 0.3 * torch.randn(H, generator=g)).to(torch.bfloat16)
        import seams.stock

        seams.stock.stock_kernel = _reference_stock  # this engine's "SGLang" kernels are the slot references
        active = activate_scheduler(0)
        runner = _Runner(self)
        runner.model = torch.nn.Module()  # what a resident timed engine digests (seams/resident.py)
        runner.model.register_buffer("emb", self.emb)
        runner.model.weight = torch.nn.Parameter(self.weight, requires_grad=False)
        self.weight = runner.model.weight.data  # one tensor: the model's and the one the norm is handed
        self.scheduler = SimpleNamespace(tp_worker=SimpleNamespace(model_runner=runner))
        if not kwargs.get("disable_cuda_graph"):
            self.scheduler.tp_worker.model_runner.init_device_graphs()
        if active:
            from seams import forward_clock, resident

            route.attach(self.scheduler)
            forward_clock.attach(self.scheduler, 0)
            resident.attach(self.scheduler, 0)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        from seams.dispatch import run

        x = self.emb[ids % V].mean(dim=1).to(torch.bfloat16).contiguous()
        got = run("norm.rmsnorm", {"x": x, "weight": self.weight}, {"eps": 1e-6})
        if got is not None:
            return got["out"].float()
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight.float()).to(torch.bfloat16).float()

    def forward(self, ids: torch.Tensor, category: str = "decode") -> torch.Tensor:
        """One step, timed like SGLang's CudaGraphRunner.replay ("decode") or an eager prefill
        ("extend"): inside device_timer.wrap."""
        import contextlib

        timer = self.scheduler.tp_worker.model_runner.device_timer
        self.category = category
        with timer.wrap(metadata={"category": category}) if timer else contextlib.nullcontext():
            return self.hidden(ids)

    def logprobs(self, ids: list[int], category: str = "decode") -> torch.Tensor:
        h = self.forward(torch.tensor([ids[-3:]]), category)
        return torch.log_softmax(4.0 * h @ self.emb.T, dim=-1)[0]

    def generate(
        self,
        input_ids: list[list[int]],
        sampling_params: dict,
        return_logprob: bool = False,
        top_logprobs_num: int = 0,
        logprob_start_len: Any = None,
    ) -> list[dict]:
        outs = []
        n_new = int(sampling_params["max_new_tokens"])
        for i, prompt in enumerate(input_ids):
            ids = list(prompt)
            meta: dict[str, Any] = {}
            if logprob_start_len is not None:
                start = logprob_start_len[i] if isinstance(logprob_start_len, list) else logprob_start_len
                tok, top = [(None, ids[start], None)], [None]  # SGLang's shape: first entry None
                for pos in range(start + 1, len(ids)):
                    lp = self.logprobs(ids[:pos], "extend")
                    tok.append((float(lp[ids[pos] % V]), ids[pos], None))
                    v, ix = lp.topk(top_logprobs_num)
                    top.append([(float(a), int(b), None) for a, b in zip(v, ix)])
                meta.update(input_token_logprobs=tok, input_top_logprobs=top)
            out, olp, otop = [], [], []
            for step in range(n_new):  # the first token comes from the prefill, the rest from decode steps
                lp = self.logprobs(ids, "decode" if step else "extend")
                t = int(lp.argmax())
                out.append(t)
                ids.append(t)
                if return_logprob:
                    olp.append((float(lp[t]), t, None))
                    v, ix = lp.topk(max(top_logprobs_num, 1))
                    otop.append([(float(a), int(b), None) for a, b in zip(v, ix)])
            if return_logprob:
                meta.update(output_token_logprobs=olp, output_top_logprobs=otop)
            outs.append({"output_ids": out, "meta_info": meta})
        return outs

    def collective_rpc(self, method: str, **kwargs: Any) -> None:
        getattr(self.scheduler, method)(**kwargs)  # AttributeError when no candidate is active

    def shutdown(self) -> None:
        pass


class SlowStockCore(FakeCore):
    """Stock path 5 ms slower per call: a candidate that takes the seam is measurably faster."""

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        from seams.dispatch import REGISTRY

        if not (REGISTRY.enabled and REGISTRY.route_on):
            import time

            time.sleep(0.005)
        return super().hidden(ids)


class SlowCandidateCore(FakeCore):
    """The candidate route 5 ms slower per call: a clear loser (the sequential stop's FAIL)."""

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        from seams.dispatch import REGISTRY

        if REGISTRY.enabled and REGISTRY.route_on:
            import time

            time.sleep(0.005)
        return super().hidden(ids)


class PrefillTaxCore(SlowStockCore):
    """The candidate route wins every decode step but costs 20 ms per prefill: faster on the
    decode-step clock and on the wall clock, slower where the decode clock does not look."""

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        from seams.dispatch import REGISTRY

        if REGISTRY.enabled and REGISTRY.route_on and getattr(self, "category", "") == "extend":
            import time

            time.sleep(0.02)
        return super().hidden(ids)


class StridedCaptureCore(SlowStockCore):
    """Graph capture hands the norm a strided x (as CUDA's in-place QK-norm hands decode
    attention a view into the packed qkv), eager batches a contiguous one. A kernel that is
    truly faster then runs in no graph the timed windows replay: on the H200 the attention
    example read C/B 1.0000 with evidence "ok" this way (2026-12-02)."""

    bs1_contiguous = True  # as on CUDA: a [1, HQ, D] view is contiguous, so the bs-1 graph did take it

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        from seams.dispatch import run

        if not getattr(self, "capturing", False):
            return super().hidden(ids)
        if self.bs1_contiguous:
            super().hidden(ids[:1])
        wide = self.emb[ids % V].mean(dim=1).to(torch.bfloat16).repeat(1, 2)
        got = run("norm.rmsnorm", {"x": wide[:, :H], "weight": self.weight}, {"eps": 1e-6})
        return got["out"].float() if got is not None else wide[:, :H].float()


class AllStridedCaptureCore(StridedCaptureCore):
    """Every captured call outside the ABI: the candidate fires nowhere at capture."""

    bs1_contiguous = False


class HangingEngine:
    """Starts a grandchild and never returns: the host's wall-clock limit must kill the group."""

    def __init__(self, **kwargs: Any) -> None:
        import subprocess
        import time

        subprocess.Popen(["sleep", "300"])
        time.sleep(300)


class BrokenEngine:
    """Fails to start before any seam activation (an infrastructure failure, e.g. out of memory)."""

    def __init__(self, **kwargs: Any) -> None:
        raise RuntimeError("CUDA out of memory while allocating the KV cache")


class UnconfirmedCore(SlowStockCore):
    """Stock is slow only in the first engine: a gain that the confirmation engine does not see."""

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        if "receipts-confirm" in os.environ.get("CACHEON_RECEIPT_DIR", ""):
            return FakeCore.hidden(self, ids)
        return super().hidden(ids)


def _serve(conn: Any, core: str, kwargs: dict[str, Any]) -> None:
    """The scheduler process: build the core, then answer the driver's calls until shutdown."""
    import torch as _torch

    globals()["torch"] = _torch
    try:
        engine = globals()[core](**kwargs)
    except BaseException as e:  # noqa: BLE001 - the driver reports it
        conn.send(("err", repr(e)))
        return
    conn.send(("ok", None))
    while True:
        try:
            name, args, kw = conn.recv()
        except EOFError:
            return
        if name == "shutdown":
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", getattr(engine, name)(*args, **kw)))
        except BaseException as e:  # noqa: BLE001
            conn.send(("err", repr(e)))


class _Proxy:
    """The driver's side of the fake engine (SGLang's Engine + TokenizerManager)."""

    core = "FakeCore"

    def __init__(self, **kwargs: Any) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # as SGLang: engine.py:1325
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self.core, kwargs), name="fake-scheduler", daemon=True)
        self._proc.start()
        child.close()
        status, msg = self._recv()
        if status != "ok":
            raise RuntimeError(f"scheduler failed to start: {msg}")

    def _recv(self) -> tuple[str, Any]:
        try:
            return self._conn.recv()
        except EOFError:
            raise RuntimeError(f"the scheduler process died (exit {self._proc.exitcode})") from None

    def _call(self, name: str, *args: Any, **kw: Any) -> Any:
        self._conn.send((name, args, kw))
        status, out = self._recv()
        if status != "ok":
            raise RuntimeError(f"{name}: {out}")
        return out

    def generate(self, **kw: Any) -> list[dict]:
        return self._call("generate", **kw)

    def collective_rpc(self, method: str, **kwargs: Any) -> None:
        self._call("collective_rpc", method, **kwargs)

    def shutdown(self) -> None:
        try:
            self._call("shutdown")
        except (RuntimeError, OSError):
            pass
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()


class FakeEngine(_Proxy):
    core = "FakeCore"


class SlowStockEngine(_Proxy):
    core = "SlowStockCore"


class SlowCandidateEngine(_Proxy):
    core = "SlowCandidateCore"


class PrefillTaxEngine(_Proxy):
    core = "PrefillTaxCore"


class UnconfirmedEngine(_Proxy):
    core = "UnconfirmedCore"


class StridedCaptureEngine(_Proxy):
    core = "StridedCaptureCore"


class AllStridedCaptureEngine(_Proxy):
    core = "AllStridedCaptureCore"


# where FlashInfer 0.6 builds under its FLASHINFER_WORKSPACE_BASE (flashinfer/jit/env.py)
FLASHINFER_OPS = os.path.join(".cache", "flashinfer", "0.6.12", "90a", "cached_ops", "k")


class CompilingEngine(_Proxy):
    """Writes a stand-in for JIT output into its Triton cache and FlashInfer's JIT workspace,
    named for whether contribution code was loaded: the seed caches must gain the pristine file
    and never the other."""

    core = "FakeCore"

    def __init__(self, **kwargs: Any) -> None:
        name = "with-contribution.cubin" if os.environ.get("CACHEON_ENGINE_TREE") else "pristine.cubin"
        for key, sub in (("TRITON_CACHE_DIR", "k"), ("FLASHINFER_WORKSPACE_BASE", FLASHINFER_OPS)):
            d = os.environ.get(key)
            if not d:
                continue
            k = os.path.join(d, sub)
            os.makedirs(k, exist_ok=True)
            with open(os.path.join(k, name), "wb") as f:
                f.write(b"compiled")
            with open(os.path.join(k, f"{name}.path"), "w") as f:  # what tvm-ffi (ninja) writes into build.ninja
                f.write(d)
        super().__init__(**kwargs)


class StartCompilingEngine(_Proxy):
    """A start that compiles despite its seeds, as the diag must see it (arena/engine/startdiag.py): its
    scheduler writes a new Triton file and a FlashInfer build, rewrites a seeded tvm-ffi file under
    the same name, drops a file into HOME (a cache no seed covers) and runs a compiler process
    named `ninja`."""

    core = "StartCompilingCore"


class StartCompilingCore(FakeCore):
    def __init__(self, **kwargs: Any) -> None:
        import shutil
        import subprocess
        import tempfile

        tri, tvm, fi, home = (
            os.environ[k] for k in ("TRITON_CACHE_DIR", "TVM_FFI_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "HOME")
        )
        os.makedirs(os.path.join(tri, "hashdir"), exist_ok=True)
        with open(os.path.join(tri, "hashdir", "k.cubin"), "wb") as f:
            f.write(b"compiled at start")
        os.makedirs(os.path.join(fi, FLASHINFER_OPS), exist_ok=True)  # FlashInfer's JIT: its own seed, not HOME
        with open(os.path.join(fi, FLASHINFER_OPS, "k.so"), "wb") as f:
            f.write(b"built by ninja")
        with open(os.path.join(tvm, "mod_1234", "mod.so"), "wb") as f:  # seeded: same name, rebuilt
            f.write(b"rebuilt by ninja, longer than the seed")
        os.makedirs(os.path.join(home, ".nv", "ComputeCache"), exist_ok=True)
        with open(os.path.join(home, ".nv", "ComputeCache", "index"), "wb") as f:
            f.write(b"x")
        d = tempfile.mkdtemp()
        tool = os.path.join(d, "ninja")  # a compiler stand-in: the diag counts processes by name
        shutil.copy(shutil.which("sleep") or "/bin/sleep", tool)
        subprocess.run([tool, "1.5"], check=True)
        shutil.rmtree(d, ignore_errors=True)
        super().__init__(**kwargs)


POISON = 7777  # a token id a hostile contribution's outputs carry into the teacher


class StatefulTeacherCore(FakeCore):
    """A teacher that keeps state across requests (what a resident T must never let reach the
    next verdict): once it has graded a sequence with POISON, every logprob it reports moves."""

    shift = 0.0

    def generate(self, input_ids: list[list[int]], sampling_params: dict, **kw: Any) -> list[dict]:
        if kw.get("logprob_start_len") is not None and any(POISON in ids for ids in input_ids):
            self.shift = 0.5
        return super().generate(input_ids, sampling_params, **kw)

    def logprobs(self, ids: list[int], category: str = "decode") -> torch.Tensor:
        return super().logprobs(ids, category) + self.shift


class CrashingTeacherCore(FakeCore):
    """A teacher that dies on a hostile sequence: only that verdict may pay for it."""

    def generate(self, input_ids: list[list[int]], sampling_params: dict, **kw: Any) -> list[dict]:
        if kw.get("logprob_start_len") is not None and any(POISON in ids for ids in input_ids):
            os._exit(9)
        return super().generate(input_ids, sampling_params, **kw)


class NanTeacherCore(FakeCore):
    """A teacher whose state, once it has graded a sequence with POISON, turns the logprob of every
    graded token into NaN (top-k untouched): a canary compared by `abs(a - b) > atol` never sees a
    NaN (every comparison with one is false)."""

    poisoned = False

    def generate(self, input_ids: list[list[int]], sampling_params: dict, **kw: Any) -> list[dict]:
        teach = kw.get("logprob_start_len") is not None
        outs = super().generate(input_ids, sampling_params, **kw)
        if teach and self.poisoned:
            for o in outs:
                mi = o["meta_info"]
                mi["input_token_logprobs"] = [
                    t if t[0] is None else (float("nan"), t[1], t[2]) for t in mi["input_token_logprobs"]
                ]
        if teach and any(POISON in ids for ids in input_ids):
            self.poisoned = True
        return outs


class NanTeacherEngine(_Proxy):
    core = "NanTeacherCore"


class StatefulTeacherEngine(_Proxy):
    core = "StatefulTeacherCore"


class CrashingTeacherEngine(_Proxy):
    core = "CrashingTeacherCore"


class KeepModulesCore(FakeCore):
    """A broken control of the resident timed engine's removal (tests/arena/test_resident_contamination.py):
    the rank's purge leaves the contribution's modules in sys.modules (and its tree on sys.path)."""

    def __init__(self, **kwargs: Any) -> None:
        from seams import resident

        resident.purge = lambda packages, root: []
        super().__init__(**kwargs)


class KeepModulesEngine(_Proxy):
    core = "KeepModulesCore"
