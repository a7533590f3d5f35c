"""Where evaluations run. `local` (the default): engine.evaluate.evaluator.LocalEvaluator, on this
host's GPUs (or its cores, on the cpu backend). `ray`: engine.executors.ray_executor.RayEvaluator,
one actor per GPU of a Ray cluster, each running that same local evaluator on its node.

Both offer what the search uses: `backend`, `compile_workers`, `waiting`, `job()`,
`evaluate()`, `device_states()`, `close()`.
"""

EXECUTORS = ("local", "ray")
