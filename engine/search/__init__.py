"""The search: an orchestrator (`Search`, engine.search.orchestrator) that runs the work, and the
parts it asks, each readable alone:

- strategies: the methods (tree, sequential, best-of-n) as policy over plain data,
- budget: what may be spent and what has been (dollars, tokens, variants, time),
- calls: one LLM call, recorded, charged and published,
- steering: human commands (engine.record.control) applied to the running search,
- resume: a session read back from the DB, and its in-flight work recovered,
- rows: the node rows every part inserts,
- config: `SearchConfig`, the search as asked for (recorded with the session).
"""

from engine.search.config import SearchConfig
from engine.search.orchestrator import Search, SearchAborted

__all__ = ["Search", "SearchAborted", "SearchConfig"]
