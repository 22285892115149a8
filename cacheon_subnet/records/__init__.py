"""Records (the "records" layer, docs/architecture.md): the typed values that cross layers, processes and storage.

A verdict is one typed path from the arena to the leaderboard: the arena builds a `QualifyResult`
with its evidence as records (detail.py), the dispatch pools carry it (jobs.py), the ledger files
it, and the web page and the blame rule decode the stored row once through `read_detail`. JSON
appears only at those boundaries, through the strict codec (codec.py). The guard in
tests/records/test_records_guard.py keeps every field reachable from QualifyResult a typed record.
"""

from cacheon_subnet.records.codec import RecordError, from_json, loads, to_json
from cacheon_subnet.records.detail import (
    NO_FIGURES,
    ArenaWindow,
    BoardFigures,
    ConfirmFigures,
    CpuCase,
    CpuDetail,
    CpuSeries,
    EvidenceSummary,
    GpuDetail,
    OffCpu,
    SpeedBrief,
    board_json,
    board_of,
    decode_detail,
    detail_json,
    read_detail,
)
from cacheon_subnet.records.enums import ContributionState, Role, SpeedMetric, Verdict
from cacheon_subnet.records.jobs import JobResult, QualifyJob, job_key
from cacheon_subnet.records.qualify import Qualifier, QualifyResult, result_problem

__all__ = [
    "NO_FIGURES",
    "ArenaWindow",
    "BoardFigures",
    "ConfirmFigures",
    "ContributionState",
    "CpuCase",
    "CpuDetail",
    "CpuSeries",
    "EvidenceSummary",
    "GpuDetail",
    "JobResult",
    "OffCpu",
    "Qualifier",
    "QualifyJob",
    "QualifyResult",
    "RecordError",
    "Role",
    "SpeedBrief",
    "SpeedMetric",
    "Verdict",
    "board_json",
    "board_of",
    "decode_detail",
    "detail_json",
    "from_json",
    "job_key",
    "loads",
    "read_detail",
    "result_problem",
    "to_json",
]
