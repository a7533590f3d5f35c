"""One session's rows as the export's tables hold them: each variant with the tree around it
(its idea, the code its prompt was built on), its verdict and its LLM call; each idea with its
call and its best outcome. Built from engine.dataset.source's cursors, one session at a time."""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Iterator
from typing import Any

from engine import prompts
from engine.dataset import source as db
from engine.dataset.hygiene import source_hash
from engine.domain import DEFAULT_LANGUAGE
from engine.evaluate import STATUSES

# Outcomes from worst to best: the best of an idea's variants is the last of these it reached.
OUTCOME_RANK = {s: i for i, s in enumerate(("cancelled", "failed", *STATUSES))}


def _num(value: Any) -> float | None:
    """A finite float, or None (NaN and infinities are not JSON)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str | None:
    if value is None or value == "" or value == [] or value == {}:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


class SessionReader:
    """The rows of one session: `variants()` streams, then `ideas()` from what it saw."""

    def __init__(self, conn: sqlite3.Connection, session: db.Session, split: str):
        self.conn, self.session, self.split = conn, session, split
        self.tree = db.nodes(conn, session.id)
        self.actions = db.human_actions(conn, session.id)
        self.reference = db.root_source(conn, session.id)
        self._sources: dict[int, str] = {}
        self._outcomes: dict[int, dict[str, Any]] = {}  # idea node -> its variants' tally

    def _where(self) -> dict[str, Any]:
        return {"session_id": self.session.id, "problem": self.session.problem, "split": self.split,
                "scripted": self.session.scripted}

    def _source(self, node_id: int) -> str:
        if node_id not in self._sources:
            self._sources[node_id] = db.node_source(self.conn, node_id)
        return self._sources[node_id]

    def _speedup(self, node: dict[str, Any] | None) -> float | None:
        if node is None:
            return None
        return 1.0 if node["kind"] == "root" else _num(node["speedup"])

    def _idea_of(self, node: dict[str, Any]) -> dict[str, Any] | None:
        cur = self.tree.get(node["parent_id"]) if node["parent_id"] is not None else None
        while cur is not None and cur["kind"] != "idea":
            cur = self.tree.get(cur["parent_id"]) if cur["parent_id"] is not None else None
        return cur

    def variants(self) -> Iterator[dict[str, Any]]:
        s = self.session
        config = s.config
        for row in db.variants(self.conn, s.id):
            node = self.tree[row["id"]]
            parent = self.tree.get(node["parent_id"]) if node["parent_id"] is not None else None
            idea = self._idea_of(node)
            # The code the prompt was built on: an implement prompt, the idea's parent; a fix or an
            # edit, the variant it fixes or edits.
            code = self.tree.get(idea["parent_id"]) if parent is not None and parent["kind"] == "idea" \
                and idea is not None else parent
            base = self.tree.get(idea["parent_id"]) if idea is not None else None
            verdict = json.loads(row["verdict"]) if row["verdict"] else {}
            diagnosis = ((verdict.get("profile") or {}).get("diagnosis") or {})
            gpu = (verdict.get("gpu") or {}).get("name") or verdict.get("device") or None
            status = row["eval_status"] or node["status"]
            speedup = _num(verdict.get("speedup_eager"))
            record = {
                **self._where(), "node_id": node["id"], "problem_path": s.problem_path,
                "reference_source": self.reference, "sizes": json.dumps(verdict.get("sizes") or s.sizes),
                "backend": s.backend, "language": node["language"] or DEFAULT_LANGUAGE,
                "precision": config.get("precision"), "atol": _num(config.get("atol")),
                "rtol": _num(config.get("rtol")), "gpu": gpu, "round": node["round"],
                "origin": node["origin"],
                "parent_node_id": code["id"] if code else None, "parent_kind": code["kind"] if code else None,
                "parent_source": self._source(code["id"]) if code else None,
                "base_speedup": self._speedup(base),
                "idea_node_id": idea["id"] if idea else None, "idea_title": idea["title"] if idea else None,
                "idea_description": (idea["text"] or None) if idea else None,
                "prompt": row["prompt"], "reply": row["reply"], "source": row["source"] or None,
                "source_hash": source_hash(row["source"] or "") or None,
                "status": status, "flags": [str(f) for f in verdict.get("flags") or ()],
                "notes": "; ".join([*([node["text"]] if node["text"] else []),
                                    *(str(n) for n in verdict.get("notes") or ())]) or None,
                "library": ", ".join(str(op) for op in (verdict.get("library") or {}).get("ops") or ()) or None,
                "library_share": _num((verdict.get("library") or {}).get("share")),
                **{k: _num(verdict.get(k)) for k in (
                    "max_abs_err", "max_rel_err", "rel_l2_err", "time_ms", "time_p10_ms", "time_p90_ms",
                    "ref_eager_ms", "ref_compile_ms")},
                "speedup_eager": speedup, "speedup_lo": _num(verdict.get("speedup_lo")),
                "speedup_hi": _num(verdict.get("speedup_hi")),
                "speedup_compile": _num(verdict.get("speedup_compile")),
                "sol_fraction": _num(verdict.get("sol_fraction")),
                "diagnosis": diagnosis.get("bound") or None,
                "diagnosis_evidence": _text(diagnosis.get("evidence")),
                "compile_s": _num(verdict.get("compile_s")), "log": verdict.get("log") or None,
                "model": row["model"], "provider": row["provider"],
                "input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"],
                "reasoning_tokens": row["reasoning_tokens"], "cost_usd": _num(row["cost_usd"]),
                "pinned": bool(node["pinned"]), "pruned": bool(node["pruned"]),
                "human_actions": self.actions.get(node["id"], []),
            }
            if idea is not None:
                self._tally(idea["id"], record)
            yield record

    def _tally(self, idea_id: int, record: dict[str, Any]) -> None:
        t = self._outcomes.setdefault(idea_id, {"variants": 0, "correct": 0, "best_status": None,
                                                "best_speedup": None, "best_node_id": None})
        t["variants"] += 1
        status = record["status"]
        if OUTCOME_RANK.get(status, -1) > OUTCOME_RANK.get(t["best_status"], -1):
            t["best_status"] = status
        if status == "correct":
            t["correct"] += 1
            speed = record["speedup_eager"]
            if speed is not None and (t["best_speedup"] is None or speed > t["best_speedup"]):
                t["best_speedup"], t["best_node_id"] = speed, record["node_id"]

    def ideas(self) -> Iterator[dict[str, Any]]:
        """Every answered idea with the call that proposed it and its best outcome (after
        `variants()` has run: the outcomes are its tally)."""
        calls = db.idea_calls(self.conn, self.session.id)
        titles: dict[int, set[str]] = {}
        for node in self.tree.values():
            if node["kind"] != "idea" or node["status"] != "ok":
                continue
            call = calls.get(node["id"])
            if call is None and node["origin"] == "llm":
                call = self._call_of(node, calls, titles)
            parent = self.tree.get(node["parent_id"])
            tally = self._outcomes.get(node["id"], {"variants": 0, "correct": 0, "best_status": None,
                                                    "best_speedup": None, "best_node_id": None})
            parent_speedup = self._speedup(parent)
            best = tally["best_speedup"]
            yield {
                **self._where(), "idea_node_id": node["id"], "round": node["round"], "origin": node["origin"],
                "parent_node_id": node["parent_id"], "parent_kind": parent["kind"] if parent else None,
                "parent_speedup": parent_speedup, "title": node["title"], "description": node["text"] or None,
                "call_id": call["id"] if call else None,
                **{k: (call[k] if call else None) for k in (
                    "prompt", "reply", "model", "input_tokens", "output_tokens", "reasoning_tokens")},
                "cost_usd": _num(call["cost_usd"]) if call else None, **tally,
                "improved": best is not None and parent_speedup is not None and best > parent_speedup,
            }

    def _call_of(self, node: dict[str, Any], calls: dict[int, dict[str, Any]],
                 titles: dict[int, set[str]]) -> dict[str, Any] | None:
        """The call whose reply proposed this idea: one made for an idea of the same parent and
        round before it whose reply names it; else the latest such call."""
        near = [calls[a] for a in sorted(calls) if a < node["id"] and a in self.tree
                and self.tree[a]["parent_id"] == node["parent_id"] and self.tree[a]["round"] == node["round"]]
        for call in reversed(near):
            if call["id"] not in titles:
                try:
                    titles[call["id"]] = {i.title for i in prompts.parse_ideas(call["reply"] or "")}
                except prompts.ReplyError:
                    titles[call["id"]] = set()
            if node["title"] in titles[call["id"]]:
                return call
        return near[-1] if near else None


def problem_key(session: db.Session, reference: str) -> tuple[str, str, str, str]:
    """What makes a problem row: its name, its source, its sizes and its backend."""
    digest = hashlib.sha256(reference.encode()).hexdigest()[:16]
    return session.problem, digest, json.dumps(session.sizes, sort_keys=True), session.backend
