"""The judge's clean process, one per device: a child of a worker's fork server of its own
(engine.evaluate.child.worker_process, asked `{"judge": 1}`), so that the judge's calls reach it along
the same path as the candidate's reach the candidate (the server's relay: the same hops, the same
waits on a loaded host, which the judge's clock then takes out).

It never imports a candidate, so nothing a candidate did can reach it (docs/judge.md). It holds the
reference of the problem under evaluation and serves the judge (engine.evaluate.host.judge), one JSON
line in, one out, after `{"judging": pid}`:

- `{"call": {"job", "seed", "out", "max_bytes", "window"}}`: the reference on inputs drawn from `seed`,
  its outputs written as bytes (harness.handover, as the candidate's side writes them) and kept here as
  the answers for that seed -> `{"called": seed, "inner_ms": its own clock's time of the call,
  "extra_ms": what this side did that the candidate's side does not (the reference made for the job
  on its first call, the answers kept, the written files removed), "setup_ms", "draw_ms", "write_ms":
  parts of it, for reading}`. The judge times the round trip from its side: the round trip less
  `inner_ms` and `extra_ms` is what drawing, writing and the pipe cost, which the judge takes out of
  the candidate's round trips (on a GPU, removing a 32 MiB window's file alone once cost several ms:
  left in, it hid a 6.7 ms kernel behind a forged 0.17 ms claim).
- `{"compare": {"seed", "path", "atol", "rtol"}}`: the candidate's bytes for that seed against the
  answers, by engine.evaluate.child.check.compare -> `{"ok", "errs", "reason"}`.
- `{"forget": 1}`: the answers dropped (and on cuda the model: the GPU's memory is the next job's).

The bytes it writes are removed once written (the cost of writing is what it measures); its answers
stay in this process, which the candidate's sandbox cannot see.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from engine.evaluate.jobs import EvalJob

_MODEL: dict[str, Any] = {}
_ANSWERS: dict[int, list[Any]] = {}


def _reference(job: EvalJob) -> tuple[Any, Any, str, Any]:
    """(problem, model, device, cast) for the job, made as the evaluation makes its reference."""
    import torch

    from engine.evaluate.languages.common import model_to, precision_dtype
    from engine.evaluate.loading import load_module_from_path

    key = (job.problem_path, json.dumps(job.sizes, sort_keys=True), job.precision, job.backend, job.seed)
    if _MODEL.get("key") != key:
        _MODEL.clear()
        device = "cuda" if job.backend == "cuda" else "cpu"
        problem = load_module_from_path(job.problem_path, job.sizes)
        init = problem.get_init_inputs()
        cast = precision_dtype(job)
        torch.manual_seed(job.seed)
        model = problem.Model(*init)
        if isinstance(model, torch.nn.Module):
            model = model_to(model, device, cast).eval()
        _MODEL.update(key=key, problem=problem, model=model, device=device, cast=cast)
    return _MODEL["problem"], _MODEL["model"], _MODEL["device"], _MODEL["cast"]


def call(request: dict[str, Any]) -> dict[str, Any]:
    import torch

    from engine.evaluate.child.check import flatten
    from engine.evaluate.harness import clocks, handover
    from engine.evaluate.languages.common import make_inputs

    t_all = clocks.perf_counter()
    job = EvalJob.from_dict(request["job"])
    t_setup = clocks.perf_counter()
    problem, model, device, cast = _reference(job)  # (made on the job's first call: not a call's cost)
    setup_ms = 1e3 * clocks.since(t_setup)
    seed = int(request["seed"])
    with torch.no_grad():
        # The steps the candidate's side takes too (engine.evaluate.child.audit), each timed here:
        # drawing, the call, writing. Whatever else this call does is `extra_ms`.
        t_draw = clocks.perf_counter()
        torch.manual_seed(seed)
        inputs = make_inputs(problem, device, cast)
        if device == "cuda":
            torch.cuda.synchronize()
        draw_ms = 1e3 * clocks.since(t_draw)
        t0 = clocks.perf_counter()
        out = flatten(model(*inputs))
        if device == "cuda":
            torch.cuda.synchronize()
        inner_ms = 1e3 * clocks.since(t0)
        path = str(request["out"])
        # written as the candidate's side writes (the same cost), kept as the answers: the window the
        # candidate will hand over, and each output's whole shape
        t_write = clocks.perf_counter()
        meta, written = handover.write(out, path, int(request["max_bytes"]), float(request["window"]))
        write_ms = 1e3 * clocks.since(t_write)
        if device == "cuda":  # kept where the compare is quick: the device (the windows are small)
            written = [t.detach().reshape(-1)[m["start"]:m["start"] + m["count"]].clone()
                       for t, m in zip(out, meta, strict=True)]
        _ANSWERS[seed] = (written, [(m["shape"], m["start"]) for m in meta])
        handover.remove(path)  # (the mapped windows stay)
    extra_ms = max(1e3 * clocks.since(t_all) - draw_ms - inner_ms - write_ms, 0.0)
    return {"called": seed, "inner_ms": inner_ms, "extra_ms": extra_ms, "setup_ms": setup_ms,
            "draw_ms": draw_ms, "write_ms": write_ms}


def compare(request: dict[str, Any]) -> dict[str, Any]:
    from engine.evaluate.child.check import compare as compare_outputs
    from engine.evaluate.harness import handover

    seed = int(request["seed"])
    kept = _ANSWERS.get(seed)
    if kept is None:
        return {"ok": False, "errs": {}, "reason": "no answer kept for this call"}
    answers, shapes = kept
    got = handover.read(str(request["path"]), sum(t.numel() * t.element_size() for t in answers) + 64)
    if isinstance(got, str):
        return {"ok": False, "errs": {}, "reason": got}
    outs, meta = got
    outs = [o.to(a.device) for o, a in zip(outs, answers, strict=False)]
    if len(outs) != len(answers):
        return {"ok": False, "errs": {}, "reason": f"{len(outs)} outputs, expected {len(answers)}"}
    for i, (m, (shape, start)) in enumerate(zip(meta, shapes, strict=True)):
        if m.get("shape") != shape or m.get("start") != start:
            why = f"output {i} has shape {m.get('shape')}, expected {shape}"
            return {"ok": False, "errs": {}, "reason": why}
    atol, rtol = float(request["atol"]), float(request["rtol"])
    # An answer within atol of zero everywhere is judged by allclose alone, as the check trials judge
    # an output of noise around zero (engine.evaluate.child.check.noise_outputs): its relative L2
    # error would measure rounding, not work.
    noise = [i for i, a in enumerate(answers) if a.numel() and float(a.abs().max()) <= atol]
    ok, errs, reason = compare_outputs(outs, answers, atol, rtol, [t.dtype for t in answers], noise=noise)
    return {"ok": bool(ok), "errs": errs, "reason": reason}


def forget() -> dict[str, Any]:
    _ANSWERS.clear()
    if _MODEL.get("device") == "cuda":
        import torch

        _MODEL.clear()
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
    return {"forgot": 1}


def serve(requests: Any, out: Any) -> None:
    from engine.evaluate.harness import timing

    timing.fix_threads()  # the candidate's process times with the same thread count
    out.write(json.dumps({"judging": os.getpid()}) + "\n")
    out.flush()
    for line in requests:
        if not line.strip():
            continue
        message = json.loads(line)
        if "end" in message:
            return
        try:
            if "call" in message:
                answer = call(message["call"])
            elif "compare" in message:
                answer = compare(message["compare"])
            else:
                answer = forget()
        except Exception as exc:  # the reference's own failure: said, never a hang
            answer = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
