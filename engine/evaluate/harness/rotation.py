"""Timed calls a candidate cannot tell from checked ones, and whose outputs are checked.

The timer (engine.evaluate.harness.timing) calls the reference and the candidate with arguments from a
`Rotation` instead of one input set reused for every rep:

- **Input sets.** `K` sets drawn from the problem's `get_inputs()`, each from its own secret seed
  (different contents), all drawn before timing, outside the timed window.
- **Buffers.** Before every call (warm-up and timed, reference and candidate alike) the rep's set
  is copied into one of two buffers, alternating per callee: each call gets new contents, a new
  version counter and (against its own last call) another pointer, and what a call wrote into its
  inputs is gone before the next one. Consecutive reps use different sets (each rep's set is drawn
  with `secrets`, never the previous one), and the reference and the candidate get the same set
  in a rep, so their times stay comparable.
- **Checked outputs.** After the warm-up, once the number of reps is known, a sample of the timed
  reps is drawn with `secrets` (the candidate cannot predict it). The candidate's output of a
  sampled rep is cloned right after that rep, outside the timed window (a candidate may reuse its
  output buffer), with whether it left its inputs as they were. After timing, the caller compares
  each clone with the fp64 reference computed then, on that rep's set (engine.evaluate.child.measure).

Memory is bounded by a byte budget (`KTREE_TIMING_ROTATION_MB`; default 256 MiB on the cpu; on
cuda an eighth of the GPU's memory, at least 2 GiB, and never over half of what is free when the
sets are drawn): K sets + 2 buffers + the sampled outputs (SAMPLES per pass, at most MAX_PASSES
passes). At least MIN_SETS sets and one sample per pass are kept even over the budget. Where
MIN_SETS sets and the two buffers do not fit it (inputs of gigabytes: a loss on two 4 GiB inputs),
the rotation is *lean*: MIN_SETS sets passed in place, no buffers (half the memory), each set's
fingerprint (its float64 sum) telling whether a call changed it; its sets are drawn from their
seeds when timing starts and let go in between (park: the check trials' fp64 answers need the
memory), so they never sit beside the checks. A memo keyed on the input's
pointer can then hit on a set seen before; for such inputs the byte speed of light (reading them
takes milliseconds) flags a time that skips the work. `cost()` says what was spent.

Imports only torch and the standard library.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine import settings
from engine.evaluate.harness import clocks, noise
from engine.evaluate.harness.memory import MIN_SETS, WINDOW_BYTES, stream_sum, tensor_bytes

MAX_SETS = 4
SAMPLES = noise.SAMPLES  # sampled (checked) candidate reps per timing pass, at most
MAX_PASSES = 1 + noise.MAX_RETIMES  # one pass and its re-timings
CPU_BUDGET_MB = 256
CUDA_BUDGET_MIN_MB = 2048
DRAW_SHARE = 0.05  # the extra sets' draws may take this share of the timing budget (at least MIN_SETS)


def budget_bytes(device: str) -> int:
    """The rotation's byte budget: KTREE_TIMING_ROTATION_MB, else the device's default."""
    raw = settings.get("KTREE_TIMING_ROTATION_MB")
    if raw:
        try:
            return max(0, int(float(raw) * 2**20))
        except ValueError:
            pass
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return CUDA_BUDGET_MIN_MB * 2**20
        free, total = torch.cuda.mem_get_info()
        return min(max(CUDA_BUDGET_MIN_MB * 2**20, total // 8), free // 2)
    return CPU_BUDGET_MB * 2**20


def lean(set_bytes: int, budget: int) -> bool:
    """Whether MIN_SETS sets and the two buffers would not fit the budget: the sets go in place."""
    return set_bytes * (MIN_SETS + 2) > budget


def plan(set_bytes: int, out_bytes: int, budget: int) -> tuple[int, int]:
    """(sets, samples per pass) within `budget`: samples take at most a quarter of it over every
    pass, the sets (and the two buffers) the rest."""
    samples = SAMPLES if out_bytes <= 0 else max(1, min(SAMPLES, budget // 4 // (MAX_PASSES * out_bytes)))
    left = budget - samples * MAX_PASSES * max(out_bytes, 0)
    sets = MAX_SETS if set_bytes <= 0 else left // set_bytes - 2
    return max(MIN_SETS, min(MAX_SETS, sets)), samples


def _flatten(out: Any) -> list[Any] | None:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        flat: list[Any] = []
        for o in out:
            inner = _flatten(o)
            if inner is None:
                return None
            flat += inner
        return flat
    return None


@dataclass
class Sample:
    """One checked timed rep of the candidate: the pass and rep, which set it ran on, its outputs
    cloned right after the rep (None: not tensors), whether its inputs were left unchanged."""

    timing_pass: int
    rep: int
    reps: int
    set_index: int
    outputs: list[Any] | None
    inputs_unchanged: bool
    # Per output, where a large output kept only a window (engine.evaluate.harness.memory.WINDOW_BYTES): the
    # window's first element in the flattened output, drawn with `secrets` after the rep; else None.
    windows: list[int | None] | None = None


@dataclass
class Rotation:
    """The input sets, the two buffers, the rep plan and the samples of one evaluation's timing."""

    sets: list[list[Any]]
    samples_per_pass: int = SAMPLES
    checked: str = "new"  # the callee whose outputs are sampled
    lean: bool = False  # the sets passed in place, no buffers (see the module's docstring)
    samples: list[Sample] = field(default_factory=list)
    # What a timed call of the checked callee did that no honest call does (`_timed_call`): each
    # with its integrity check's evidence prefix, the first few only.
    violations: list[str] = field(default_factory=list)
    draw_s: float = 0.0
    copy_s: float = 0.0
    _buffers: list[list[Any]] = field(default_factory=list)
    _calls: dict[str, int] = field(default_factory=dict)
    _last_sets: dict[str, list[int]] = field(default_factory=dict)  # per callee, each buffer's last set
    _plan: list[int] = field(default_factory=list)
    _sampled: frozenset[int] = frozenset()
    _current: dict[str, tuple[int, list[Any]]] = field(default_factory=dict)
    _last_warm: int = -1
    _protected: set[int] = field(default_factory=set)
    _sums: list[list[str]] = field(default_factory=list)
    _draw: Callable[[], list[Any]] | None = None  # lean: draws a set (after its seed is set)
    _seeds: list[int] = field(default_factory=list)  # lean: each set's seed
    _set_bytes: int = 0
    _handed_storage: list[tuple[int, int]] = field(default_factory=list)  # the checked call's inputs
    passes: int = 0
    reps: int = 0

    def __post_init__(self) -> None:
        import torch

        if self.lean:
            return
        if len(self.sets) < 1:
            raise ValueError("a rotation needs at least one input set")
        self._set_bytes = tensor_bytes(self.sets[0])
        self._buffers = [[t.detach().clone() if isinstance(t, torch.Tensor) else t for t in self.sets[0]]
                         for _ in range(2)]

    @classmethod
    def draw(cls, first: list[Any], draw: Callable[[], list[Any]], device: str, out_bytes: int,
             time_budget_s: float, samples: int | None = None, cap: int | None = None) -> Rotation:
        """A rotation of `first` (drawn already; a lean one empties that list and draws its own sets)
        and more sets from `draw()`, each seeded here from `secrets`, as many as the byte budget (at
        most `cap`: the memory plan's, engine.evaluate.harness.memory.Plan.rotation_bytes) and the draw-time
        budget allow."""
        import torch

        set_bytes = tensor_bytes(first)
        budget = budget_bytes(device) if cap is None else min(budget_bytes(device), cap)
        sets_wanted, per_pass = plan(set_bytes, out_bytes, budget)
        if lean(set_bytes, budget):  # drawn again from their seeds whenever they are needed
            first.clear()  # (the caller's list: not beside the sets drawn here, measured on an H200 at
            # 3 input sets + 2 GiB, the bound, for an 8 GiB matrix-vector input)
            seeds = [secrets.randbits(62) for _ in range(MIN_SETS)]
            rotation = cls([], per_pass if samples is None else samples, lean=True, _draw=draw, _seeds=seeds,
                           _set_bytes=set_bytes)
            rotation.ensure()
            return rotation
        sets = [list(first)]
        t0 = clocks.perf_counter()
        while len(sets) < sets_wanted:
            torch.manual_seed(secrets.randbits(62))
            sets.append(list(draw()))
            spent = clocks.perf_counter() - t0
            if len(sets) >= MIN_SETS and spent / (len(sets) - 1) * (len(sets)) > DRAW_SHARE * time_budget_s:
                break  # one more draw would pass the draw-time budget
        if device == "cuda":
            torch.cuda.synchronize()
        rotation = cls(sets, per_pass if samples is None else samples)
        rotation.draw_s = clocks.perf_counter() - t0
        return rotation

    def ensure(self) -> None:
        """A lean rotation's sets drawn (again) from their seeds, if parked; else nothing."""
        if not self.lean or self.sets or self._draw is None:
            return
        import torch

        t0 = clocks.perf_counter()
        state = torch.random.get_rng_state()
        try:
            for seed in self._seeds:
                torch.manual_seed(seed)
                self.sets.append(list(self._draw()))
        finally:
            torch.random.set_rng_state(state)
        self._sums = [_fingerprint(s) for s in self.sets]
        self.draw_s += clocks.perf_counter() - t0

    def park(self) -> None:
        """A lean rotation's sets let go until ensure() (the check trials need that memory); a
        full rotation keeps its sets."""
        if self.lean:
            # (and the set each callee last got: else one set stays alive through the checks)
            self.sets, self._sums = [], []
            self._current.clear()

    # -- the timer's side (engine.evaluate.harness.timing) ------------------------------------------

    def start(self, reps: int) -> None:
        """A timing pass of `reps` timed reps begins (after its warm-up): plan which set each rep
        uses and which of the checked callee's reps are sampled."""
        self.passes += 1
        self.reps += reps
        order: list[int] = []
        for _ in range(reps):
            order.append(self._pick(order[-1] if order else self._last_warm))
        self._plan = order
        count = min(self.samples_per_pass, reps)
        self._sampled = frozenset(secrets.SystemRandom().sample(range(reps), count))

    def _pick(self, previous: int) -> int:
        n = len(self.sets)
        if n == 1:
            return 0
        k = secrets.randbelow(n - 1)
        return k + 1 if k >= previous >= 0 else k

    def args(self, name: str, rep: int) -> list[Any]:
        """The arguments of `name`'s call in `rep` (-1: warm-up): the rep's set copied into the
        callee's next buffer. Called outside the timed window."""
        import torch

        self.ensure()
        t0 = clocks.perf_counter()
        if rep < 0 or rep >= len(self._plan):
            index = self._pick(self._last_warm)
            self._last_warm = index
        else:
            index = self._plan[rep]
        calls = self._calls.get(name, 0)
        self._calls[name] = calls + 1
        if self.lean:  # the set itself (no copy)
            self._current[name] = (index, self.sets[index])
            if name == self.checked:
                self._handed_storage = self._handed(self.sets[index])
            self.copy_s += clocks.perf_counter() - t0
            return list(self.sets[index])
        # The buffers alternate, but a buffer never gets the set it held last: with two sets,
        # alternating both would put each set in its own buffer every time, and a memo keyed on
        # the input's pointer would always be right (measured on an H100).
        lasts = self._last_sets.setdefault(name, [-1, -1])
        b = calls % 2
        if lasts[b] == index and lasts[1 - b] != index:
            b = 1 - b
        lasts[b] = index
        buffer = self._buffers[b]
        for slot, (b, s) in enumerate(zip(buffer, self.sets[index], strict=True)):
            if isinstance(b, torch.Tensor):
                if b.shape != s.shape or b.dtype != s.dtype or b.device != s.device:
                    buffer[slot] = s.detach().clone()  # (a set whose shapes differ: its own buffer)
                else:
                    b.copy_(s)
            else:
                buffer[slot] = s
        self._current[name] = (index, buffer)
        if name == self.checked:
            self._handed_storage = self._handed(buffer)
        self.copy_s += clocks.perf_counter() - t0
        return list(buffer)

    def _handed(self, buffer: list[Any]) -> list[tuple[int, int]]:
        """Each input tensor's storage as handed over: (address, bytes)."""
        import torch

        return [(b.untyped_storage().data_ptr(), b.untyped_storage().nbytes()) for b in buffer
                if isinstance(b, torch.Tensor)]

    def protect(self, *models: Any) -> None:
        """Storage never poisoned after a call: the models' parameters and buffers (a forward may
        return one of them)."""
        import torch

        for model in models:
            if isinstance(model, torch.nn.Module):
                for t in (*model.parameters(), *model.buffers()):
                    self._protected.add(t.untyped_storage().data_ptr())

    def done(self, name: str, rep: int, out: Any) -> None:
        """`name`'s call in `rep` (-1: warm-up) returned `out` (the timed window is closed): keep a
        clone of a sampled rep's outputs and whether its inputs are as they were given, then
        poison the outputs (NaN; -1 or True where not floating) so that no later call finds a
        right answer in memory it never wrote: a freed output's block is what the allocator
        hands out next."""
        import torch

        flat = _flatten(out)
        if name == self.checked and len(self.violations) < 3:
            why = _timed_call(out, flat, self._current.get(name, (0, []))[1], self._handed_storage)
            if why:
                where = f"timed call {rep + 1}" if rep >= 0 else "a warm-up call"
                self.violations.append(why.replace(": ", f": {where}: ", 1))
        if name == self.checked and rep in self._sampled and 0 <= rep < len(self._plan):
            index, buffer = self._current[name]
            outputs, windows = (None, None) if flat is None else _kept_outputs(flat)
            if self.lean:
                unchanged = _fingerprint(self.sets[index]) == self._sums[index]
            else:
                unchanged = all(torch.equal(b, s) for b, s in zip(buffer, self.sets[index], strict=True)
                                if isinstance(b, torch.Tensor))
            self.samples.append(Sample(self.passes, rep, len(self._plan), index, outputs, unchanged, windows))
        if flat is None:
            return
        _, buffer = self._current.get(name, (0, []))
        keep = self._protected | {b.untyped_storage().data_ptr() for b in buffer if isinstance(b, torch.Tensor)}
        for t in flat:
            try:
                if t.untyped_storage().data_ptr() in keep:
                    continue
                if t.is_floating_point() or t.is_complex():
                    t.detach().fill_(float("nan"))
                elif t.dtype == torch.bool:
                    t.detach().fill_(True)
                else:
                    t.detach().fill_(-1)
            except Exception:  # (an expanded view, a tensor subclass: left as it is)
                continue

    # -- after timing -----------------------------------------------------------------------

    def cost(self) -> dict[str, Any]:
        """What the rotation cost: sets, bytes held (sets, buffers, sampled outputs), seconds spent
        drawing and copying."""
        set_bytes = self._set_bytes
        sample_bytes = sum(tensor_bytes(s.outputs or []) for s in self.samples)
        sets = len(self._seeds) if self.lean else len(self.sets)
        return {"sets": sets, "samples": len(self.samples), "set_bytes": set_bytes, "lean": self.lean,
                "bytes": (sets + (0 if self.lean else 2)) * set_bytes + sample_bytes,
                "draw_s": round(self.draw_s, 4), "copy_s": round(self.copy_s, 4)}

    def release(self) -> None:
        """Drop the sets, buffers and samples (memory back before the verdict's other steps)."""
        self.sets = [] if self.lean else self.sets[:1]
        self._buffers = []
        self.samples = []
        self._handed_storage = []


def _timed_call(out: Any, flat: list[Any] | None, buffer: list[Any],
                handed: list[tuple[int, int]]) -> str | None:
    """What is wrong with a timed call's outputs and inputs, cheaply (no element is read): an output
    that is not exactly a plain tensor (a lazy subclass does its work when read, after the window),
    an output sharing storage with an input, an input whose storage is not as handed over (grown to
    keep answers beyond its elements). None for an honest call."""
    import torch

    if flat is None:
        return f"output-type: the output is a {type(out).__name__}, not a tensor"
    for i, t in enumerate(flat):
        if type(t) is not torch.Tensor:
            return f"output-type: output {i} is a {type(t).__name__}, not a plain tensor"
    inputs = [b for b in buffer if isinstance(b, torch.Tensor)]
    for j, (b, (ptr, nbytes)) in enumerate(zip(inputs, handed, strict=False)):
        storage = b.untyped_storage()
        if storage.data_ptr() != ptr or storage.nbytes() != nbytes:
            return (f"inputs-modified: input {j}'s storage is not as handed over ({nbytes} bytes, now"
                    f" {storage.nbytes()})")
    for i, t in enumerate(flat):
        storage = t.untyped_storage()
        lo, hi = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        if hi > lo and any(lo < ptr + nbytes and ptr < hi for ptr, nbytes in handed if nbytes):
            return f"aliasing: output {i} shares memory with an input"
    return None


def _kept_outputs(flat: list[Any]) -> tuple[list[Any], list[int | None]]:
    """A sampled rep's outputs as kept for the recheck: clones, except that an output over
    WINDOW_BYTES keeps a window of that size at an offset drawn now with `secrets` (the candidate
    cannot know which part will be compared), so the samples stay within the memory plan."""
    outputs: list[Any] = []
    windows: list[int | None] = []
    for t in flat:
        t = t.detach()
        n = max(1, WINDOW_BYTES // max(t.element_size(), 1))
        if t.numel() * t.element_size() > WINDOW_BYTES and t.is_contiguous():
            start = secrets.randbelow(t.numel() - n + 1)
            outputs.append(t.reshape(-1)[start:start + n].clone())
            windows.append(start)
        else:
            outputs.append(t.clone())
            windows.append(None)
    return outputs, windows


def _fingerprint(tensors: list[Any]) -> list[str]:
    """Each tensor's float64 sum, as text (a NaN sum then equals itself): whether a call wrote into
    a lean set."""
    import torch

    return [repr(stream_sum(t)) if t.numel() else "0"
            for t in tensors if isinstance(t, torch.Tensor)]
