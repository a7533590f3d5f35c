"""Where the devices' idle time went: `ktree bench pipeline`'s idle table. Each sample in which a
device is not held (not busy) is given one cause: the first in CAUSES that holds at that moment,
read from the evaluator's state (the device's own stage, its queue) and the search's (its nodes'
statuses, its rounds, as the bench hears them). The causes of a device's idle samples sum to its
idle time, so the table has no remainder to guess at.

The order of precedence, and why:

1. What the device itself is doing for the variant it was handed, before it holds it
   (`LocalEvaluator.device_states()`'s `stage`): another process's host lock, its worker's start,
   the variant's setup before the lock, the cpu timer's wait for running builds. The device has
   its work then; nothing else would change its wait.
2. `queued`: the device is free while a compiled variant waits for one. The engine's own gap.
3. Builds, then fix calls, then other LLM calls: the work upstream of the device, nearest first
   (a running build yields a variant sooner than a call in flight).
4. What is left: the search's setup before its first call, the round's tail (nothing to build
   or ask: the round waits on its last evaluations elsewhere, or the next round is not asked yet),
   the end after the last round.

`other` takes a stage this module does not know (a newer evaluator's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.bench.summary import markdown_table

# (cause, what it means), in the order of precedence.
CAUSES: tuple[tuple[str, str], ...] = (
    ("host lock", "another process on the host holds the device"),
    ("start", "a worker starting (Python, torch, the CUDA context) for the variant it was handed, or ahead"
              " (on the cpu: its wait for another process's timing too)"),
    ("load", "the variant it was handed set up before the lock (Triton's JIT, the reference's baseline)"),
    ("timer", "cpu: the variant it was handed waits for the running builds to end before it times"),
    ("queued", "free while a compiled variant waits for a device: the engine's own gap"),
    ("build", "builds running or code waiting for a compile slot; nothing compiled waits"),
    ("fix", "a fix call to the LLM in flight; nothing to build or run"),
    ("llm", "idea or implement calls in flight; nothing to build or run"),
    ("round tail", "nothing to build or ask: the round waits on its last evaluations elsewhere, or the next"
                   " round's ideas are not asked yet"),
    ("setup", "before the search's first node (its session, its reference)"),
    ("end", "after every search's last round (its summary, the workers closing)"),
    ("other", "a device stage not named here"),
)
CAUSE_NAMES = tuple(name for name, _ in CAUSES)

# The evaluator's device stages (engine.evaluate.host.devices.Device.stage) -> their cause.
STAGE_CAUSES = {"lock": "host lock", "start": "start", "prewarm": "load", "reference": "load", "quiet": "timer"}


@dataclass(frozen=True)
class Moment:
    """What the engine is doing at one sample, for every device alike."""

    queued: int = 0  # compiled variants waiting for a device (the evaluator's device queue)
    building: int = 0  # builds running
    to_build: int = 0  # variants whose code waits for a compile slot (status "queued")
    fix_calls: int = 0  # fix calls in flight (variants of origin "fix", generating)
    llm_calls: int = 0  # idea and implement calls in flight (ideas and other variants generating)
    started: bool = False  # a search has a node beyond its root
    ended: bool = False  # every search has done its last round


def moment_of(statuses: Iterable[tuple[str, str, str]], *, queued: int, building: int, started: bool,
              ended: bool) -> Moment:
    """The Moment from the nodes' (kind, status, origin) and the evaluator's device queue;
    `building`: the builds running (the bench's count: see engine.bench.pipeline)."""
    fix = llm = to_build = 0
    for kind, status, origin in statuses:
        if status == "generating":
            if kind == "variant" and origin == "fix":
                fix += 1
            elif kind in ("idea", "variant"):
                llm += 1
        elif status == "queued" and kind == "variant":
            to_build += 1
    return Moment(queued=queued, building=building, to_build=to_build, fix_calls=fix, llm_calls=llm,
                  started=started, ended=ended)


def idle_cause(moment: Moment, stage: str = "") -> str:
    """The cause of one idle device's sample (its `stage`, as device_states() says it)."""
    if stage:
        return STAGE_CAUSES.get(stage, "other")
    if moment.queued:
        return "queued"
    if moment.building or moment.to_build:
        return "build"
    if moment.fix_calls:
        return "fix"
    if moment.llm_calls:
        return "llm"
    if not moment.started:
        return "setup"
    if moment.ended:
        return "end"
    return "round tail"


class IdleLedger:
    """The idle seconds per cause, per device and for all of them, sample by sample."""

    def __init__(self) -> None:
        self.devices: dict[str, dict[str, float]] = {}  # name -> cause -> seconds (as devices appear)

    def add(self, dt: float, moment: Moment, devices: Iterable[Mapping[str, Any]]) -> None:
        """One sample of `dt` seconds: each device not busy gets its cause."""
        for d in devices:
            causes = self.devices.setdefault(str(d["name"]), {})
            if d.get("busy"):
                continue
            stage = "lock" if d.get("waiting_for") else str(d.get("stage") or "")
            cause = idle_cause(moment, stage)
            causes[cause] = causes.get(cause, 0.0) + dt

    def report(self, wall_s: float) -> dict[str, Any]:
        """{"idle_s", "fraction_of_wall", "causes": [{cause, idle_s, fraction_of_wall}], "devices":
        [{name, idle_s, causes}]}: every cause in CAUSES order (those with no time left out); the
        fractions of the devices' wall (wall × devices; one device's: its wall). The causes' seconds
        are rounded so that they sum to the idle total."""
        n = max(1, len(self.devices))
        total: dict[str, float] = {}
        for causes in self.devices.values():
            for cause, seconds in causes.items():
                total[cause] = total.get(cause, 0.0) + seconds
        return {**_split(total, wall_s * n),
                "devices": [{"name": name, **_split(causes, wall_s)} for name, causes in self.devices.items()]}


def _split(causes: Mapping[str, float], wall_s: float) -> dict[str, Any]:
    rows = [(c, causes[c]) for c in CAUSE_NAMES if causes.get(c, 0.0) > 0]
    idle = round(sum(s for _, s in rows), 3)
    shown = [round(s, 3) for _, s in rows]
    if shown:  # the rounding's remainder to the largest, so that the rows sum to the total shown
        largest = max(range(len(shown)), key=shown.__getitem__)
        shown[largest] = round(shown[largest] + idle - sum(shown), 3)

    def share(seconds: float) -> float:
        return round(seconds / wall_s, 4) if wall_s else 0.0

    return {"idle_s": idle, "fraction_of_wall": share(idle),
            "causes": [{"cause": c, "idle_s": s, "fraction_of_wall": share(s)}
                       for (c, _), s in zip(rows, shown, strict=True)]}


def idle_table(idle: Mapping[str, Any]) -> str:
    """The idle table: per cause, its seconds and share of the wall, what it means; the total
    last. With several devices, a column per device too."""
    devices = idle.get("devices") or []
    several = len(devices) > 1
    per_device = [{c["cause"]: c["idle_s"] for c in d["causes"]} for d in devices]
    what = dict(CAUSES)
    header = ("device idle, by cause", "seconds", "of the wall",
              *([d["name"] for d in devices] if several else ()), "what it means")
    rows = []
    for c in idle["causes"]:
        rows.append((c["cause"], f"{c['idle_s']:.2f} s", f"{c['fraction_of_wall'] * 100:.1f} %",
                     *([f"{p.get(c['cause'], 0.0):.2f} s" for p in per_device] if several else ()),
                     what.get(c["cause"], "")))
    rows.append(("idle in all", f"{idle['idle_s']:.2f} s", f"{idle['fraction_of_wall'] * 100:.1f} %",
                 *([f"{d['idle_s']:.2f} s" for d in devices] if several else ()),
                 "the devices' wall (wall x devices) less the time held" if several else "the wall less the"
                 " time held"))
    return markdown_table(header, rows)
