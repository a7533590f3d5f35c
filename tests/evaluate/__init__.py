"""The evaluator: sandbox, workers, timing, integrity, memory, builds, languages, profiles."""
