"""GPU workers on several hosts through Ray (optional extra `ray`): `--arena-workers ray://HOST:PORT`
(Ray Client) or `auto` (the cluster this host belongs to, `ray start` already run).

Each qualification is one Ray task asking for one GPU (`num_gpus`; Ray sets CUDA_VISIBLE_DEVICES,
which every engine of the arena inherits). The task gets the qualifier (the arena config, no
state) and a `QualifyJob` (bundle files, op, incumbent: no DB, no wallet, no chain keys — only the
validator process holds those) and returns a typed `JobResult`; the validator thread alone writes
it into the state DB under the job's idempotency key (validator/dispatch.py). A worker that dies
mid-job (host lost, process killed) makes Ray run the task again elsewhere (`max_retries`); the
key makes a retried or twice-delivered result count once. A worker whose code computes another
arena id (other pins, other config) is refused: its numbers are not comparable.
"""

from __future__ import annotations

from typing import Any

from cacheon_subnet.errors import CacheonError
from cacheon_subnet.records import JobResult, QualifyJob
from cacheon_subnet.validator.dispatch import bind_result, run_job


class RayUnavailable(CacheonError):
    """--arena-workers needs Ray: `pip install 'cacheon-subnet[ray]'`."""


def _task(qualifier: Any, job: QualifyJob) -> JobResult:
    import socket

    return run_job(qualifier, job, worker=f"ray {socket.gethostname()}")


class RayPool:
    def __init__(
        self,
        qualifier: Any,
        address: str,
        *,
        slots: int | None = None,
        num_gpus: float = 1.0,
        resources: dict[str, float] | None = None,
        max_retries: int = 3,
        runtime_env: dict[str, Any] | None = None,
        init: bool = True,
    ) -> None:
        if not (address == "auto" or address.startswith("ray://") or address == "local"):
            raise ValueError(f"--arena-workers {address!r}: expected ray://HOST:PORT, auto, or local")
        try:
            import ray
        except ImportError:
            raise RayUnavailable(
                "--arena-workers needs Ray on this host and every worker: pip install 'cacheon-subnet[ray]'"
            ) from None
        self._ray = ray
        if init and not ray.is_initialized():
            ray.init(
                address=None if address == "local" else address,
                runtime_env=runtime_env,
                log_to_driver=False,
                ignore_reinit_error=True,
            )
        self.qualifier = qualifier
        self.arena_id, self.label = qualifier.arena_id, qualifier.label
        self.head_to_head = getattr(qualifier, "head_to_head", False)
        self._fn = ray.remote(_task).options(
            num_gpus=num_gpus, resources=resources or {}, max_retries=max_retries, retry_exceptions=False
        )
        self._slots, self._per_job, self._resources = slots, num_gpus, resources or {}
        self._refs: dict[str, Any] = {}
        self._jobs: dict[str, QualifyJob] = {}

    def free_slots(self) -> int:
        cap = self._slots
        if cap is None:
            total = self._ray.cluster_resources()
            need = {"GPU": self._per_job, **self._resources}
            cap = int(min(total.get(k, 0.0) / v for k, v in need.items() if v > 0)) if any(need.values()) else 1
        return max(0, cap - len(self._refs))

    def submit(self, job: QualifyJob) -> None:
        if job.key in self._refs:
            return
        self._refs[job.key] = self._fn.remote(self.qualifier, job)
        self._jobs[job.key] = job

    def in_flight(self) -> frozenset[str]:
        return frozenset(self._refs)

    def poll(self) -> list[JobResult]:
        if not self._refs:
            return []
        ready, _ = self._ray.wait(list(self._refs.values()), num_returns=len(self._refs), timeout=0)
        ready_ids = {r.hex() for r in ready}
        out = []
        for key in [k for k, r in self._refs.items() if r.hex() in ready_ids]:
            ref, job = self._refs.pop(key), self._jobs.pop(key)
            try:
                res = bind_result(job, self._ray.get(ref), "ray")
            except self._ray.exceptions.RayError as e:  # retries spent: the workers, not the miner
                res = JobResult(
                    key,
                    job.contribution_id,
                    job.target,
                    job.start_block,
                    None,
                    f"ray worker lost ({type(e).__name__}): {str(e)[:500]}",
                    "ray",
                    incumbent_id=job.incumbent.contribution_id if job.incumbent else None,
                )
            if res.result is not None and res.result.arena_id != self.arena_id:
                res = JobResult(
                    key,
                    job.contribution_id,
                    job.target,
                    job.start_block,
                    None,
                    f"worker {res.worker} measured arena {res.result.arena_id}, this validator runs "
                    f"{self.arena_id} (other code or pins on that host): not comparable",
                    res.worker,
                    incumbent_id=res.incumbent_id,
                )
            out.append(res)
        return out

    def close(self) -> None:
        for ref in self._refs.values():
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - shutting down
                pass
        self._refs.clear()
