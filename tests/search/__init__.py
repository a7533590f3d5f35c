"""The search: strategies, steering, stop and resume, suites, providers, prompts, the store."""
