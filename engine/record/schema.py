"""The store's tables, as SQL: the schema a fresh DB gets and the steps that migrate an older one.

Kept apart from engine.record.store so the SQL reads on its own; engine.record.store re-exports these names.
"""

from __future__ import annotations

SCHEMA_VERSION = 9

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    id           INTEGER PRIMARY KEY,
    problem      TEXT NOT NULL,
    problem_path TEXT NOT NULL,
    backend      TEXT NOT NULL,
    strategy     TEXT NOT NULL,
    provider     TEXT NOT NULL,
    models       TEXT NOT NULL,          -- JSON list
    config       TEXT NOT NULL,          -- JSON object: rounds, ideas, variants, top, ...
    sizes        TEXT NOT NULL,          -- JSON object: the size constants it runs at
    status       TEXT NOT NULL,          -- running | finished | stopped | interrupted | failed
    stop_reason  TEXT,                   -- why it ended early: budget, bad key, ...
    created_at   REAL NOT NULL,
    finished_at  REAL,
    ref_ms       REAL,
    best_node_id INTEGER,
    best_speedup REAL,
    pid          INTEGER,                -- the engine process while it runs
    heartbeat_at REAL,                   -- last sign of life from that process
    suite_id     INTEGER                 -- suites.id of the suite it is a problem of (NULL: none)
);
CREATE TABLE IF NOT EXISTS suites (      -- `ktree suite`: many problems searched as one run
    id           INTEGER PRIMARY KEY,
    name         TEXT NOT NULL,          -- what was given: a directory, a level, files
    problems     TEXT NOT NULL,          -- JSON list of problem specs (paths), in order
    config       TEXT NOT NULL,          -- JSON object: the per-problem request and the suite cap
    status       TEXT NOT NULL,          -- running | finished | stopped | interrupted
    stop_reason  TEXT,
    created_at   REAL NOT NULL,
    finished_at  REAL,
    pid          INTEGER,
    heartbeat_at REAL
);
CREATE TABLE IF NOT EXISTS nodes (
    id         INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    parent_id  INTEGER REFERENCES nodes(id),
    kind       TEXT NOT NULL CHECK (kind IN ('root', 'idea', 'variant')),
    round      INTEGER NOT NULL,
    title      TEXT NOT NULL DEFAULT '',
    text       TEXT NOT NULL DEFAULT '',
    source     TEXT NOT NULL DEFAULT '',
    status     TEXT NOT NULL,
    origin     TEXT NOT NULL DEFAULT 'llm',  -- llm | human | fix | edit
    pinned     INTEGER NOT NULL DEFAULT 0,   -- always kept as a parent
    pruned     INTEGER NOT NULL DEFAULT 0,   -- queued work cancelled, never selected
    want       INTEGER NOT NULL DEFAULT 0,   -- an idea still generating: how many ideas it asks for
    language   TEXT NOT NULL DEFAULT '',     -- a variant's kernel language: cuda | triton ('' otherwise)
    library    TEXT NOT NULL DEFAULT '',     -- its verdict's `library` mark: the ops, joined ('' none)
    disturbed  INTEGER NOT NULL DEFAULT 0,   -- its verdict's reference time disagreed with its history
    speedup    REAL,
    time_ms    REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_session ON nodes(session_id);
CREATE TABLE IF NOT EXISTS evaluations (
    id          INTEGER PRIMARY KEY,
    node_id     INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    session_id  INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    status      TEXT NOT NULL,
    max_abs_err REAL,
    time_ms     REAL,
    ref_ms      REAL,
    speedup     REAL,
    backend     TEXT NOT NULL,
    device      TEXT NOT NULL,
    sizes       TEXT NOT NULL,           -- JSON: the sizes this evaluation ran at
    verdict     TEXT NOT NULL,           -- JSON: the whole Verdict
    created_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS evaluations_session ON evaluations(session_id);
CREATE TABLE IF NOT EXISTS llm_calls (
    id               INTEGER PRIMARY KEY,
    session_id       INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    node_id          INTEGER REFERENCES nodes(id),
    provider         TEXT NOT NULL,
    model            TEXT NOT NULL,
    purpose          TEXT NOT NULL,      -- idea | implement | fix
    prompt           TEXT NOT NULL,
    reply            TEXT NOT NULL,
    input_tokens     INTEGER NOT NULL DEFAULT 0,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd         REAL NOT NULL DEFAULT 0,
    latency_s        REAL NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 1,  -- 1 + retries (429 / 5xx / timeouts)
    status           TEXT NOT NULL,      -- ok | error
    error            TEXT,
    created_at       REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_calls_session ON llm_calls(session_id);
CREATE TABLE IF NOT EXISTS reference_times (   -- `ktree bench timing`: a cache per problem + device
    id            INTEGER PRIMARY KEY,
    problem       TEXT NOT NULL,
    source_hash   TEXT NOT NULL,                -- the problem file's content at the time
    sizes         TEXT NOT NULL,
    backend       TEXT NOT NULL,
    device        TEXT NOT NULL,
    torch_version TEXT NOT NULL,
    eager_ms      REAL,
    compile_ms    REAL,
    created_at    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS commands (      -- human steering, applied between scheduling steps
    id         INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,               -- prune | expand | pin | inject_idea | edit_variant | ...
    args       TEXT NOT NULL,               -- JSON object
    created_at REAL NOT NULL,
    applied_at REAL                         -- NULL until the engine has carried it out
);
CREATE INDEX IF NOT EXISTS commands_session ON commands(session_id);
CREATE TABLE IF NOT EXISTS rounds (        -- each round's parents, as selected: a resume starts here
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    round      INTEGER NOT NULL,
    parent_ids TEXT NOT NULL,               -- JSON list of node ids
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, round)
);
CREATE TABLE IF NOT EXISTS profiles (      -- each profile a search took (it lives in the verdict's JSON)
    id         INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    node_id    INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    round      INTEGER NOT NULL,            -- the search's round when it was taken
    reason     TEXT NOT NULL,               -- parent | best | asked
    tool       TEXT NOT NULL DEFAULT '',    -- ncu | torch | cpu | off
    error      TEXT,                        -- why it could not be taken (NULL: it was)
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS profiles_session ON profiles(session_id);
"""

# Steps that bring a DB of version N-1 to version N. Fresh DBs get SCHEMA directly; an older DB
# runs every step above its version in one transaction, then SCHEMA (which only adds what is
# missing). Append a step (and bump SCHEMA_VERSION) for each change to the tables above.
MIGRATIONS: dict[int, str] = {
    2: """
ALTER TABLE nodes ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN pruned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN pid INTEGER;
ALTER TABLE sessions ADD COLUMN heartbeat_at REAL;
""",
    3: """
ALTER TABLE nodes ADD COLUMN want INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS rounds (
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    round      INTEGER NOT NULL,
    parent_ids TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, round)
);
""",
    4: """
ALTER TABLE nodes ADD COLUMN language TEXT NOT NULL DEFAULT '';
UPDATE nodes SET language = 'cuda' WHERE kind = 'variant';
""",
    5: "",  # (no schema change: profiles live in the verdict's JSON)
    6: """
CREATE TABLE IF NOT EXISTS suites (
    id           INTEGER PRIMARY KEY,
    name         TEXT NOT NULL,
    problems     TEXT NOT NULL,
    config       TEXT NOT NULL,
    status       TEXT NOT NULL,
    stop_reason  TEXT,
    created_at   REAL NOT NULL,
    finished_at  REAL,
    pid          INTEGER,
    heartbeat_at REAL
);
ALTER TABLE sessions ADD COLUMN suite_id INTEGER;
""",
    7: """
CREATE TABLE IF NOT EXISTS profiles (
    id         INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    node_id    INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    round      INTEGER NOT NULL,
    reason     TEXT NOT NULL,
    tool       TEXT NOT NULL DEFAULT '',
    error      TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS profiles_session ON profiles(session_id);
""",
    8: """
ALTER TABLE nodes ADD COLUMN library TEXT NOT NULL DEFAULT '';
UPDATE nodes SET library = COALESCE((SELECT group_concat(ops.value, ', ')
    FROM evaluations e, json_each(e.verdict, '$.library.ops') AS ops
    WHERE e.id = (SELECT MAX(id) FROM evaluations WHERE node_id = nodes.id)), '')
    WHERE kind = 'variant';
""",
    9: """
ALTER TABLE nodes ADD COLUMN disturbed INTEGER NOT NULL DEFAULT 0;
UPDATE nodes SET disturbed = 1 WHERE kind = 'variant' AND EXISTS (SELECT 1
    FROM evaluations e, json_each(e.verdict, '$.flags') AS f
    WHERE e.id = (SELECT MAX(id) FROM evaluations WHERE node_id = nodes.id)
      AND f.value LIKE 'reference-disturbed%');
""",
}
