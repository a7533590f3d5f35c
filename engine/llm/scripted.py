"""The `scripted` provider: an offline LLM that answers the method's prompts from the scripted
library (engine.scripted_library: the canned ideas and kernels, as data, read through its
`answers`). An implementation prompt whose contract asks for Triton is answered from the
problem's Triton kernels (on either backend: on the cpu one they run under Triton's interpreter).

It reads the prompt as a model would: the idea prompt's "already tried" list and the number of
ideas asked for, the implementation prompt's idea title. Deterministic for a given seed.

A problem the library has no answers for still gets a provider (`missing` says why; any call
raises LLMError with it): `ktree run` refuses it before the search starts (engine.launch), a
suite records that problem as failed with the reason and goes on (engine.search.suite).

For `ktree bench pipeline`, which measures the pipeline at the search shape it is given, two
options make it answer like a model with an endless supply: `fill` (when fewer untried ideas are
left than asked for, tried ones are proposed again, so every call gets K ideas) and `stamp` (each
implementation starts with a comment line naming the stamp and a serial number, so every variant
is a distinct source and really builds, as a model's variants do, instead of hitting the build
cache of an identical library file).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path

from engine import scripted_library, settings
from engine.evaluate import languages
from engine.llm.base import Completion, LLMError, Message, Usage
from engine.llm.providers import ProviderSetupError, Setup
from engine.prompts import FIX_HEADER, IMPLEMENT_HEADER, TRIED_HEADER, ReplyError, extract_code
from engine.scripted_library import NoAnswers, ScriptedIdea, answered, available, language_dir

DATA = scripted_library.ROOT  # the library's folder (the benches read its kernel files)
STAMP_MARK = "# ktree bench: a distinct source, built for real: "
STAND_IN_MARK = "# scripted stand-in: "
library_dir = language_dir  # the name the benches know

__all__ = ["DATA", "STAMP_MARK", "STAND_IN_MARK", "ScriptedIdea", "ScriptedProvider", "has_scripted",
           "library_dir", "load_ideas", "scripted_backends", "scripted_problems", "unstamped"]


def unstamped(code: str) -> str:
    """The code without a `stamp` line (nor the stand-in remark under it): the library's file."""
    first, _, rest = code.lstrip().partition("\n")
    code = rest if first.startswith(STAMP_MARK) else code
    first, _, rest = code.lstrip().partition("\n")
    return rest if first.startswith(STAND_IN_MARK) else code


def scripted_problems() -> list[str]:
    """Every problem the library has an idea list for (engine.scripted_library.available)."""
    return available()


def scripted_backends(problem: str) -> list[str]:
    """What the scripted provider answers this problem with: the backends it has C++/CUDA
    (load_inline) kernels for, then each other language it has kernels in (`triton`; [] for
    none). One reading of engine.scripted_library.available, as the provider's error and the
    estimate's."""
    out = [b for b in ("cpu", "cuda") if problem in available(b, languages.DEFAULT)]
    return out + [name for name in languages.names()
                  if name != languages.DEFAULT and problem in available("cuda", name)]


def has_scripted(problem: str, backend: str, language: str) -> bool:
    """Whether the library has kernels for this problem in this language on this backend."""
    return problem in available(backend, language)


def load_ideas(problem: str, backend: str) -> list[ScriptedIdea]:
    """The problem's ideas with kernels in the language dir `backend` (cpu, cuda, triton)."""
    try:
        return scripted_library.answers(problem, backend)
    except NoAnswers as exc:
        raise LLMError(str(exc)) from None


def _tokens(text: str) -> int:
    """A rough token count (4 characters a token), for the llm_calls row."""
    return max(1, len(text) // 4)


class ScriptedProvider:
    name = "scripted"
    scripted = True

    def __init__(self, problem: str, backend: str, seed: int = 0, latency_s: float = 0.0,
                 fill: bool = False, stamp: str | None = None):
        self.problem = problem
        self.fill = fill
        self.stamp = stamp
        self.stamped = 0  # implementations stamped so far
        self.backend = backend
        # The library per language dir (the backend's load_inline kernels, Triton's, ...): one
        # answers each implementation prompt, by the language its contract asks for.
        self.pools: dict[str, list[ScriptedIdea]] = {}  # the backend's own dir first
        for name in languages.names():
            folder = languages.get(name).library_dir(backend)
            if folder not in self.pools and has_scripted(problem, backend, name):
                self.pools[folder] = load_ideas(problem, folder)
        self.missing: str | None = None  # why it cannot answer this problem at all
        if not self.pools:
            try:
                scripted_library.answers(problem, backend)
            except NoAnswers as exc:
                self.missing = str(exc)
        keys: dict[str, ScriptedIdea] = {}
        for pool in self.pools.values():  # (an idea in the backend's own words: its dir comes first)
            for idea in pool:
                keys.setdefault(idea.key, idea)
        self.ideas = list(keys.values())  # the ideas proposed: those with a kernel in any language
        self.latency_s = latency_s
        self._rng = random.Random(seed)
        self._next_variant: dict[tuple[str, str], int] = {
            (d, idea.key): self._rng.randrange(len(idea.variants))
            for d, pool in self.pools.items() for idea in pool
        }

    async def complete(
        self,
        messages: list[Message],
        model: str = "scripted",
        max_output_tokens: int = 0,
        reasoning: str | None = None,
    ) -> Completion:
        started = time.perf_counter()
        if self.missing is not None:
            raise LLMError(self.missing)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self.answer(messages[-1].content)
        usage = Usage(input=sum(_tokens(m.content) for m in messages), output=_tokens(text))
        return Completion(text, usage, 0.0, time.perf_counter() - started, model)

    def unanswered(self, languages: Sequence[str]) -> str | None:
        """Why a search of this problem in these kernel languages gets no answers (None: it does)."""
        for language in languages:
            try:
                scripted_library.answers(self.problem, language_dir(self.backend, language))
            except NoAnswers as exc:
                return str(exc)
        return None

    def answer(self, prompt: str) -> str:
        """The reply to one of the method's prompts (idea, implementation or fix)."""
        if FIX_HEADER in prompt:
            return self._fix(prompt)
        if IMPLEMENT_HEADER in prompt:
            return self._implement(prompt)
        return self._ideas(prompt)

    def _ideas(self, prompt: str) -> str:
        m = re.search(r"Propose exactly (\d+)", prompt)
        k = int(m.group(1)) if m else 3
        tried_section = prompt.split(TRIED_HEADER, 1)[1].split("\n## ", 1)[0] if TRIED_HEADER in prompt else ""
        fresh = [i for i in self.ideas if i.title not in tried_section]
        order = fresh[:]
        self._rng.shuffle(order)
        if self.fill:
            while len(order) < k:  # tried ideas again: those not in this reply yet first
                unused = [i for i in self.ideas if i not in order]
                order.append(self._rng.choice(unused or self.ideas))
        chosen = order[:k]
        reply = json.dumps([{"title": i.title, "description": i.description} for i in chosen], indent=2)
        if not chosen:  # (said beside the empty list: the node that asked shows why it got none)
            reply += (f"\n\nAll {len(self.ideas)} scripted ideas for {self.problem} on {self.backend} are"
                      " already tried on this branch: none is left to propose here (a real provider"
                      " proposes new ones).")
        return reply

    def _implement(self, prompt: str) -> str:
        section = prompt.split(IMPLEMENT_HEADER, 1)[1].strip()
        title = section.splitlines()[0].strip() if section else ""
        wanted = next((lang.library_dir(self.backend) for lang in languages.registry().values()
                       if lang.contract_mark and lang.contract_mark in prompt), self.backend)
        lang_dir = wanted if wanted in self.pools else next(iter(self.pools))
        pool = self.pools[lang_dir]
        key = next((i.key for p in self.pools.values() for i in p if i.title == title), None)
        idea = next((i for i in pool if i.key == key), None)  # (its title may be another dir's wording)
        if idea is None:
            # A human-written idea (or one with no kernel in this language): the scripted model
            # answers with the library's closest idea instead, and says so in the reply and code.
            stand_in = self._closest(title, pool)
            path = self._take(stand_in, lang_dir)
            remark = (f"{STAND_IN_MARK[2:]}no kernel was written for the idea {title!r}; this is the"
                      f" library's \"{stand_in.title}\" ({path.name})")
            return (
                f"The scripted model has no implementation of {title!r}. {remark[0].upper()}{remark[1:]}.\n\n"
                f"```python\n{self._stamped(f'# {remark}' + chr(10) + answered(path).rstrip())}\n```\n"
            )
        path = self._take(idea, lang_dir)
        return (
            f"Here is an implementation of \"{idea.title}\" ({path.name}).\n\n"
            f"```python\n{self._stamped(answered(path).rstrip())}\n```\n"
        )

    def _take(self, idea: ScriptedIdea, lang_dir: str) -> Path:
        """The idea's next variant file (they are handed out in turn)."""
        n = self._next_variant[(lang_dir, idea.key)]
        self._next_variant[(lang_dir, idea.key)] = n + 1
        return idea.variants[n % len(idea.variants)]

    def _closest(self, title: str, pool: list[ScriptedIdea] | None = None) -> ScriptedIdea:
        """The library's idea that shares the most words with `title` (the first on a tie)."""
        words = {w for w in re.findall(r"[a-z0-9]+", title.lower()) if len(w) > 2}

        def shared(idea: ScriptedIdea) -> int:
            return len(words & set(re.findall(r"[a-z0-9]+", f"{idea.title} {idea.description}".lower())))

        return max(pool or self.ideas, key=shared)

    def _stamped(self, code: str) -> str:
        if self.stamp is None:
            return code
        self.stamped += 1
        return f"{STAMP_MARK}{self.stamp}-{self.stamped}\n{code}"

    def _fix(self, prompt: str) -> str:
        """The corrected file, when the failing source is one of the library's variants."""
        section = prompt.split(FIX_HEADER, 1)[1]
        try:
            failing = extract_code(section.split("\n## ", 1)[0])
        except ReplyError:
            failing = ""
        failing = unstamped(failing)
        for idea in (i for pool in self.pools.values() for i in pool):
            for path in idea.variants:
                fixed = path.parent / "fixes" / path.name
                if failing.strip() in (answered(path).strip(), path.read_text().strip()) and fixed.exists():
                    return (f"Here is the corrected {path.name}.\n\n"
                            f"```python\n{self._stamped(answered(fixed).rstrip())}\n```\n")
        return "I cannot tell what is wrong with this build from the log."


def make(setup: Setup) -> ScriptedProvider:
    """The `scripted` provider (engine.llm.providers): canned answers for the problem, no key."""
    try:
        return ScriptedProvider(setup.problem, setup.backend, seed=setup.seed,
                                latency_s=float(settings.get("KTREE_SCRIPTED_LATENCY", "0")))
    except LLMError as exc:
        raise ProviderSetupError(str(exc)) from None
