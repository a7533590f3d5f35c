"""ktree's engine: problems, LLM providers, the search, evaluation and the store.

Kept free of imports so that ``engine.evaluate`` runs on a bare GPU box (torch + stdlib).
"""
