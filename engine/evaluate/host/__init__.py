"""The host's side of evaluation: what runs in the engine's process (or a Ray node's), never
beside a candidate.

The evaluator and its pipeline (`evaluator`), the one way to build a job (`make_job`, which
tells a source's kernel language), the per-device workers' handles (`worker`, `devices`), the one
timer per device across the host (`hostlock`), the sandbox every process that imports generated
code starts in (`sandbox`), the one-shot evaluation process's parent side (`runner`), how long an
evaluation may hold its device (`eval_limit`), what is remembered of builds (`build_memo`) and of
the reference's times (`reference_times`, `reference_history`, `clean_reference`), and a second
opinion on a source (`static_rules`). It starts the processes of `child/` by module path; nothing
beside the candidate imports it (tests/test_architecture.py).
"""
