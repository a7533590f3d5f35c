"""The Verdict: everything one evaluation of one variant found, as a JSON-able frozen record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Flags that speak of the timing's quality, not of the kernel (engine.evaluate.harness.noise sets them): a
# correct verdict may carry them.
TIMING_FLAGS = ("noisy", "contended")
# ... and those that begin so (engine.evaluate.host.reference_history: the reference's time disagreed
# with its history; the text goes on to say how).
REFERENCE_DISTURBED = "reference-disturbed"


def is_timing_flag(flag: str) -> bool:
    """A flag on the timing's quality (TIMING_FLAGS, `reference-disturbed: ...`), not on the kernel."""
    return flag in TIMING_FLAGS or flag.startswith(REFERENCE_DISTURBED)

# Terminal statuses of an evaluation, worst first.
# How a verdict's log begins when it was the reference, not the solution, that failed.
REFERENCE_FAILED = "the reference itself failed"
STATUSES = (
    "compile_error",
    "runtime_error",
    "timeout",
    "crashed",
    "incorrect",
    "flagged",
    "correct",
)

LOG_TAIL_CHARS = 4000


def log_tail(text: str, limit: int = LOG_TAIL_CHARS) -> str:
    """The last `limit` characters of a log, cut at a line start where possible."""
    if len(text) <= limit:
        return text
    tail = text[-limit:]
    cut = tail.find("\n")
    return tail[cut + 1 :] if 0 <= cut < 200 else tail


@dataclass(frozen=True)
class Verdict:
    status: str
    backend: str = ""
    device: str = ""
    flags: tuple[str, ...] = ()
    # Remarks that do not change the status: torch ops a correct variant runs besides its kernels
    # (their share of its time), a degenerate problem (docs/verdicts.md).
    notes: tuple[str, ...] = ()
    # The reference's main op left to torch or a library (cuDNN, cuBLAS) while the candidate's own
    # kernels do the rest of the problem's work (docs/verdicts.md): {"ops": ["aten.convolution"],
    # "share": the reference's time share of those ops (0..1)}. Empty where the candidate's own
    # kernels do the main work. A verdict with it is still `correct`; a search may exclude it.
    library: dict[str, Any] = field(default_factory=dict)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rel_l2_err: float | None = None
    trials: int = 0
    time_ms: float | None = None
    time_p10_ms: float | None = None
    time_p90_ms: float | None = None
    ref_eager_ms: float | None = None
    ref_p10_ms: float | None = None
    ref_p90_ms: float | None = None
    ref_compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    # The eager speedup's interval, from the ~95 % intervals of the two medians (noise.py).
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    sol_fraction: float | None = None
    reps: int = 0
    compile_s: float | None = None
    language: str = ""  # the solution's kernel language: "cuda" (a load_inline extension), "triton"
    # A Triton solution's first call (outside the timed window): jit_s, interpreted, and per
    # @triton.autotune kernel the configs it had, how many it timed, the one chosen.
    jit: dict[str, Any] = field(default_factory=dict)
    eval_s: float | None = None
    sizes: dict[str, Any] = field(default_factory=dict)
    log: str = ""
    # Where it was measured when not on this host (the ray executor): executor, device ("node/gpuK"),
    # node_id, host, pid, and the devices lost while it ran on them before ("requeued", "lost").
    placement: dict[str, Any] = field(default_factory=dict)
    # Which device measured it: slot ("gpu1", "cpu0"), physical index, name, uuid, driver, torch
    # and CUDA versions, host (timing.device_info).
    gpu: dict[str, Any] = field(default_factory=dict)
    # Why it is slow (correct verdicts, engine.evaluate.profile.profiler): tool ("ncu" | "torch" | "cpu" |
    # "off"), per-kernel metrics, diagnosis {bound, evidence, numbers}, the reference's profile.
    profile: dict[str, Any] = field(default_factory=dict)
    # compute-sanitizer memcheck's report of an illegal or misaligned access (runtime errors).
    sanitizer: str = ""
    # How it was timed (engine.evaluate.harness.noise.summary): passes, the medians' intervals
    # (time_ci_ms, ref_ci_ms), the CPU timer's wait for a core, what the GPU probe saw, the
    # intra-op thread count and the cores, and the build's arch retargeting where one happened.
    timing: dict[str, Any] = field(default_factory=dict)
    # What the evaluation held (engine.evaluate.harness.memory): peak_gpu_bytes (the allocator's peak in the
    # evaluating process), host_peak_bytes (its resident peak), inputs_bytes, outputs_bytes,
    # reference_peak_bytes (the reference's own forward), answers ("fp64" | "native"), bound_bytes
    # and plan_bytes (the memory plan's bound and estimate). Empty where no evaluation ran.
    memory: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict status {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "correct"

    @property
    def bound(self) -> str:
        """The diagnosis' bound ("memory", "compute", "latency", "launch"), "" without a profile."""
        return str(((self.profile or {}).get("diagnosis") or {}).get("bound") or "")

    @property
    def compiler_error(self) -> str | None:
        """A compile error's first line from the compiler itself (file:line: error ...), else None."""
        from engine.evaluate.build_errors import first_error

        return first_error(self.log or "") if self.status == "compile_error" else None

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        if self.speedup_lo is None or self.speedup_hi is None:
            return None
        return self.speedup_lo, self.speedup_hi

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["flags"] = list(self.flags)
        d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        kwargs["flags"] = tuple(kwargs.get("flags") or ())
        kwargs["notes"] = tuple(kwargs.get("notes") or ())
        return cls(**kwargs)


def device_label(verdict: Verdict) -> str:
    """Which device measured a verdict, as the store and the screens show it: "gpu1: NVIDIA H200";
    the bare device name for a verdict without its `gpu` (recorded before there were several)."""
    slot = (verdict.gpu or {}).get("slot")
    name = verdict.device or ""
    return f"{slot}: {name}" if slot and name else slot or name
