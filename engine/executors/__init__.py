"""Where evaluations run. `local` (the default): engine.evaluate.host.evaluator.LocalEvaluator, on this
host's GPUs (or its cores, on the cpu backend). `ray`: engine.executors.ray_executor.RayEvaluator,
one actor per GPU of a Ray cluster, each running that same local evaluator on its node.

Both implement the `Evaluator` protocol (engine.evaluate.base) — `backend`, `gpus`,
`compile_workers`, `waiting`, `job()`, `evaluate()`, `device_states()`, `close()` — and build their
jobs with the one builder, engine.evaluate.host.make_job.make_job.
"""

EXECUTORS = ("local", "ray")
