"""Where evaluations run: this host's devices (engine.evaluate.host's `LocalEvaluator`) or a Ray
cluster's (`ray_executor.RayEvaluator`, each node running that same evaluator), and the one way an
evaluator is made (`factory.make_evaluator`), its backend chosen by one rule (`backends`).

It stands above the host's side: it imports host/, nothing of evaluate/ imports it
(tests/test_architecture.py).
"""
