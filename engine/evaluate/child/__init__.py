"""What runs beside the candidate: the processes that import generated code.

Everything here runs in an evaluation process, never in the engine: `evaluation` (the one-shot
process, `python -m engine.evaluate.child.evaluation JOB RESULT`: compile, evaluate, reference,
warm, agreement jobs), `worker_process` (the long-lived one per device, serving evaluations one at a
time), and the steps they share: `load` (build and import the solution, make models and inputs),
`check` (the check trials against the fp64 answers, with the integrity checks), `measure` (timing,
the reference's own timings), `reference` (the reference job). They import torch, the standard
library, the languages (engine/evaluate/languages/, with what every language's loading shares:
failures, build keys, inputs, precision) and the harness (engine/evaluate/harness/: integrity,
tamper, timing, clocks, rotation, noise, gpuload, expected_cache), never the host's side
(engine/evaluate/host/: the evaluator, the compile pool, the workers' handles, the sandbox, the
devices), which names these modules on command lines and takes only build keys from here
(`load.build_key`); the profilers, which run beside a candidate too, load its model through `load`.
"""
