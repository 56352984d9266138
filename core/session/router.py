"""CommandRouter: turns one line of user text into a command, without side effects.

Pure and deterministic so it can be table-tested: no I/O, no LLM. The session layer decides what
each command does (dispatch); this module only decides which command the user meant.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from .outputs import MenuEntry
from ..package.models import Agent, MenuItem
from ..package.validate import package_ref

# BMAD's words, as menu items marked webOnly / ideOnly use them: "web" is Slack here, "ide" the terminal.
Surface = Literal["web", "ide"]
Confidence = Literal["exact", "high", "medium", "low"]
CommandKind = Literal[
    "ShowMenu",
    "StartWorkflow",
    "ResumeRun",
    "ExecScript",
    "RunAction",
    "Chat",
    "DismissAgent",
    "ClarifyChoice",
    "Refused",
]
GlobalCommand = Literal["menu", "pause", "stop", "resume", "dismiss", "status", "model", "help"]

BUILTIN_ACTIONS = {"menu.show": "ShowMenu", "agent.dismiss": "DismissAgent", "run.resume": "ResumeRun"}
FUZZY_THRESHOLD = 30
GLOBAL_COMMANDS = ("menu", "status", "pause", "stop", "resume", "dismiss", "model", "help")


class RoutableWorkflow(Protocol):
    """What the router needs of a workflow (core.package.models.Workflow is one)."""

    @property
    def id(self) -> str: ...

    @property
    def workflow_path(self) -> str: ...


class DataRef(BaseModel):
    path: str  # as written in the package (templates kept); resolved by the session
    parse_as: Literal["text", "json", "yaml", "csv", "xml"]


class ActionRef(BaseModel):
    type: Literal["promptId", "inline"]
    value: str  # the prompt id (without '#') or the inline instruction


class ResolvedCommand(BaseModel):
    """What the user meant. Fields beyond `kind` are filled only where that kind uses them."""

    kind: CommandKind
    confidence: Confidence = "exact"
    reason: str = ""
    item_index: int | None = None  # 1-based over visible items
    item_label: str | None = None
    workflow_id: str | None = None  # StartWorkflow
    md_path: str | None = None  # ExecScript: the markdown as written in the item
    action: ActionRef | None = None  # RunAction
    data: DataRef | None = None
    validate_workflow: str | None = None
    candidates: list[MenuEntry] = []  # ClarifyChoice
    error_code: str | None = None  # Refused: UNKNOWN_WORKFLOW, NOT_SUPPORTED_CLASSIC_WORKFLOW, ...
    message: str | None = None  # Refused: a sentence the user can act on
    details: str = ""  # text after the first line (extra user input for Chat/ExecScript)


# ---------------------------------------------------------------- normalisation


def normalise(text: str) -> str:
    """Case-insensitive, trimmed, one leading '*' ignored (BMAD "*cmd" style)."""
    norm = text.strip().lower()
    if norm.startswith("*"):
        norm = norm[1:].strip()
    return norm


_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    "a an and the to of for on in at with by from my me i you your we our it this that is are be "
    "please can could would will like let lets do some one about up just".split()
)
# Verbs people use for "create"; menus say create, users say make, write, draft, a new ...
_CREATE_WORDS = frozenset("create make write draft build generate produce new start prepare".split())
# "I need a PRD" asks for one to be made, but only when nothing else in the text says what to do.
_IMPLIED_CREATE = frozenset("need want get give".split())
_SYNONYMS = {"doc": "document", "docs": "document", "spec": "specification", "specs": "specification"}
_V6_TRIGGER = re.compile(r"^\s*\*?(?P<code>[^\s]+)\s+or\s+fuzzy\s+match\s+on\s+(?P<phrase>.+?)\s*$", re.I)
_DESC_CODE = re.compile(r"^\s*\[(?P<code>[A-Za-z0-9][A-Za-z0-9-]{0,7})\]\s*")


def _canonical(word: str) -> str:
    """One spelling per meaning: create-verbs become `create`, simple plurals their singular."""
    if word in _CREATE_WORDS:
        return "create"
    word = _SYNONYMS.get(word, word)
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


@lru_cache(maxsize=4096)
def _content_words(text: str) -> frozenset[str]:
    return frozenset(_canonical(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS)


@dataclass(frozen=True)
class _Query:
    text: str  # normalised
    words: frozenset[str]  # canonical content words, without the implied-create verbs
    implied_create: bool  # "need"/"want" with no other verb: the user asks for something to be made


def _query(norm: str) -> _Query:
    raw = [w for w in _WORD.findall(norm) if w not in _STOPWORDS]
    implied = any(w in _IMPLIED_CREATE for w in raw)
    words = frozenset(_canonical(w) for w in raw if w not in _IMPLIED_CREATE)
    return _Query(norm, words, implied)


def parse_global_command(text: str) -> GlobalCommand | None:
    """`*menu`, `/PAUSE now`, ... → the command name; anything else (even `/foo`) → None."""
    first = text.strip().split(maxsplit=1)
    if not first or first[0][:1] not in ("*", "/"):
        return None
    name = first[0][1:].lower()
    return name if name in GLOBAL_COMMANDS else None  # type: ignore[return-value]


# ---------------------------------------------------------------- candidates


@dataclass(frozen=True)
class _Target:
    """Something a menu item (or one of its handlers) can run."""

    workflow: str | None
    exec: str | None
    action: str | None
    data: str | None


@dataclass(frozen=True)
class _Candidate:
    index: int  # visible index of the (parent) menu item
    item: MenuItem
    target: _Target
    exact_terms: tuple[str, ...]  # normalised
    fuzzy_fields: tuple[tuple[str, int, int], ...]  # (normalised text, whole-word weight, substring weight)


TRIGGER_WEIGHTS = (100, 70)
HANDLER_WEIGHTS = (90, 60)
DESCRIPTION_WEIGHTS = (50, 30)


def visible_items(agent: Agent, surface: Surface) -> list[tuple[int, MenuItem]]:
    """Menu items shown on this surface, numbered 1.. over the visible ones only."""
    shown = [
        item
        for item in agent.menu
        if not (surface == "web" and item.ide_only) and not (surface == "ide" and item.web_only)
    ]
    return list(enumerate(shown, start=1))


def display_trigger(item: MenuItem) -> str | None:
    """What to show (and type) for an item: the phrase of a v6 trigger, else the trigger or cmd as written."""
    raw = item.trigger or item.cmd
    if not raw:
        return None
    v6 = _V6_TRIGGER.match(raw)
    return v6.group("phrase").strip().strip("\"'`") if v6 else raw.strip()


CLASSIC_UNAVAILABLE = "not available here yet: it is an older kind of workflow this app cannot run"


_IMPORT_NOTE = re.compile(r"\s*\(unavailable here[^)]*\)\s*$")


def item_unavailable(item: MenuItem) -> str | None:
    """Why this item cannot run here, in words for users; None when it can.

    An importer marks an item it could not map with `unavailable: <reason>`; a classic BMAD workflow
    reference is unavailable too."""
    marked = getattr(item, "unavailable", None)
    if isinstance(marked, str) and marked.strip():
        return marked.strip()
    refs = (item.workflow, item.exec, item.validate_workflow)
    return CLASSIC_UNAVAILABLE if any(ref and _is_classic(ref) for ref in refs) else None


def _entry(index: int, item: MenuItem) -> MenuEntry:
    unavailable = item_unavailable(item)
    # the reason is shown once, by the surface: an older import's "(unavailable here: …)" suffix is dropped
    label = _IMPORT_NOTE.sub("", item.description) if unavailable else item.description
    return MenuEntry(index=index, label=label, trigger=display_trigger(item), unavailable=unavailable)


def menu_entries(agent: Agent, surface: Surface) -> list[MenuEntry]:
    """The visible menu as numbered entries (what ShowMenu and ClarifyChoice display)."""
    return [_entry(i, item) for i, item in visible_items(agent, surface)]


def _trigger_terms(raw: str) -> tuple[list[str], list[str]]:
    """A trigger string's exact terms and its fuzzy phrases; understands BMAD v6 "CP or fuzzy match on x"."""
    v6 = _V6_TRIGGER.match(raw)
    if v6:
        phrase = v6.group("phrase").strip().strip("\"'`")
        return [normalise(v6.group("code")), normalise(phrase)], [normalise(phrase)]
    return [normalise(raw)], [normalise(raw)]


def _description_code(description: str) -> tuple[str | None, str]:
    """`"[CP] Create PRD"` → ("cp", "create prd"): the bracket code is an exact term, the rest fuzzy text."""
    m = _DESC_CODE.match(description)
    if not m:
        return None, description
    return m.group("code").lower(), description[m.end():]


def _build_candidates(visible: list[tuple[int, MenuItem]]) -> list[_Candidate]:
    out: list[_Candidate] = []
    for index, item in visible:
        exact: list[str] = []
        fuzzy: list[tuple[str, int, int]] = []
        for raw in (item.trigger, item.cmd):
            if raw:
                terms, phrases = _trigger_terms(raw)
                exact += terms
                fuzzy += [(p, *TRIGGER_WEIGHTS) for p in phrases]
        handlers: list[dict[str, Any]] = []
        for trig in item.triggers or []:
            match = str(trig.get("match") or "").strip()
            if not match:
                continue
            if trig.get("type") == "alias":
                exact.append(normalise(match))
                fuzzy.append((normalise(match), *TRIGGER_WEIGHTS))
            elif trig.get("type") == "handler":
                handlers.append(trig)
        code, rest = _description_code(item.description)
        if code:
            exact.append(code)
        fuzzy.append((normalise(rest), *DESCRIPTION_WEIGHTS))
        target = _Target(item.workflow, item.exec, item.action, item.data)
        out.append(_Candidate(index, item, target, tuple(t for t in exact if t), tuple(fuzzy)))
        for trig in handlers:
            match = normalise(str(trig["match"]))
            handler_target = _Target(
                _str_or_none(trig.get("workflow")),
                _str_or_none(trig.get("exec")),
                _str_or_none(trig.get("action")),
                _str_or_none(trig.get("data")) or item.data,
            )
            out.append(_Candidate(index, item, handler_target, (match,), ((match, *HANDLER_WEIGHTS),)))
    return out


def _str_or_none(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


# ---------------------------------------------------------------- scoring


@dataclass(frozen=True, order=True)
class _Score:
    """How well a text matches a candidate: the tier decides, the strength breaks ties within it."""

    tier: int  # a field weight (TRIGGER_WEIGHTS...); 0 = no match
    strength: float = 0.0  # shared content words, plus a half for an implied "create"
    coverage: int = 0  # the user's words found anywhere in the item (trigger or description)


_NO_MATCH = _Score(0)


def _field_score(query: _Query, field: str, word_w: int, sub_w: int) -> _Score:
    """Every word of one side among the other's → `word_w`; most of the text's words in the field,
    or one text inside the other → `sub_w`."""
    f_words = _content_words(field)
    shared = len(query.words & f_words)
    bonus = 0.5 if query.implied_create and "create" in f_words and "create" not in query.words else 0.0
    if query.words and f_words and (f_words <= query.words or query.words <= f_words):
        return _Score(word_w, shared + bonus)
    if shared >= 2 and shared * 3 >= len(query.words) * 2:
        return _Score(sub_w, shared + bonus)
    if len(query.text) >= 3 and len(field) >= 3 and (query.text in field or field in query.text):
        return _Score(sub_w, shared + bonus)
    return _NO_MATCH


def _score(query: _Query, cand: _Candidate) -> _Score:
    best = max((_field_score(query, f, w, s) for f, w, s in cand.fuzzy_fields), default=_NO_MATCH)
    if best.tier == 0:
        return best
    words = frozenset().union(*(_content_words(f) for f, _, _ in cand.fuzzy_fields))
    return _Score(best.tier, best.strength, len(query.words & words))


def _confidence(score: int) -> Confidence:
    return "high" if score >= 90 else "medium" if score >= 50 else "low"


# ---------------------------------------------------------------- resolution


def resolve(
    agent: Agent,
    text: str,
    *,
    surface: Surface,
    workflows: Sequence[RoutableWorkflow],
) -> ResolvedCommand:
    """Resolve one user message against the agent's visible menu, then map the hit to a command."""
    raw = text.strip()
    if not raw:
        return ResolvedCommand(kind="ShowMenu", reason="empty input")
    first_line, _, details = raw.partition("\n")
    details = details.strip()
    norm = normalise(first_line)
    visible = visible_items(agent, surface)

    if re.fullmatch(r"[0-9]+", norm):
        return _by_number(agent, int(norm), visible, details, workflows)

    candidates = _build_candidates(visible)
    bare = norm[1:-1].strip() if norm.startswith("[") and norm.endswith("]") else norm  # "[CP]" typed as shown
    for cand in candidates:
        if bare and bare in cand.exact_terms:
            return _map(agent, cand.index, cand.item, cand.target, "exact", "trigger", details, workflows)

    query = _query(norm)
    best_per_item: dict[int, tuple[_Score, _Candidate]] = {}
    for cand in candidates:
        score = _score(query, cand)
        if score.tier >= FUZZY_THRESHOLD and (cand.index not in best_per_item or score > best_per_item[cand.index][0]):
            best_per_item[cand.index] = (score, cand)
    if best_per_item:
        best = max(score for score, _ in best_per_item.values())
        top = sorted(index for index, (score, _) in best_per_item.items() if score == best)
        if len(top) == 1:  # one item clearly wins: a higher tier, or more of the user's words
            cand = best_per_item[top[0]][1]
            reason = f"fuzzy score {best.tier}"
            return _map(agent, cand.index, cand.item, cand.target, _confidence(best.tier), reason, details, workflows)
        return ResolvedCommand(
            kind="ClarifyChoice",
            confidence=_confidence(best.tier),
            reason="Several menu items match",
            candidates=[_entry(i, it) for i, it in visible if i in top],
            details=details,
        )
    return ResolvedCommand(kind="Chat", confidence="low", reason="no menu item matches", details=details)


def _by_number(
    agent: Agent,
    n: int,
    visible: list[tuple[int, MenuItem]],
    details: str,
    workflows: Sequence[RoutableWorkflow],
) -> ResolvedCommand:
    """The `n`-th visible item, or a clarification that says which numbers there are."""
    if 1 <= n <= len(visible):
        index, item = visible[n - 1]
        target = _Target(item.workflow, item.exec, item.action, item.data)
        return _map(agent, index, item, target, "exact", "number", details, workflows)
    span = f"1 to {len(visible)}" if visible else "none"
    return ResolvedCommand(
        kind="ClarifyChoice",
        reason=f"{n} is not a menu number (valid: {span})",  # ClarifyChoice reasons are shown to the user
        candidates=[_entry(i, it) for i, it in visible],
        details=details,
    )


def _map(
    agent: Agent,
    index: int,
    item: MenuItem,
    target: _Target,
    confidence: Confidence,
    reason: str,
    details: str,
    workflows: Sequence[RoutableWorkflow],
) -> ResolvedCommand:
    """Turn a matched item into a command: workflow > exec > action."""
    base: dict[str, Any] = {
        "confidence": confidence,
        "reason": reason,
        "item_index": index,
        "item_label": item.description,
        "details": details,
        "data": _data_ref(target.data),
        "validate_workflow": item.validate_workflow,
    }
    marked = getattr(item, "unavailable", None)
    if isinstance(marked, str) and marked.strip():
        return ResolvedCommand(kind="Refused", error_code="NOT_SUPPORTED_CLASSIC_WORKFLOW",
                               message=f"That menu item is not available here: {marked.strip()}. "
                                       "Pick another item, or just ask me something.", **base)
    if target.workflow:
        return _map_workflow(target.workflow, workflows, base)
    if target.exec:
        return _map_exec(target.exec, workflows, base)
    if target.action:
        return _map_action(agent, target.action, base)
    return ResolvedCommand(
        kind="Refused",
        error_code="UNKNOWN_WORKFLOW",
        message=f"The menu item '{item.description}' has nothing to run (no workflow, exec or action).",
        **base,
    )


def _is_classic(ref: str) -> bool:
    return ref.lower().endswith((".yaml", ".yml", ".xml"))


def _classic(ref: str, base: dict[str, Any]) -> ResolvedCommand:
    """Refused in words for users; `crewagent package validate` gives the package author the technical reason."""
    return ResolvedCommand(
        kind="Refused",
        error_code="NOT_SUPPORTED_CLASSIC_WORKFLOW",
        message=f"That menu item is {CLASSIC_UNAVAILABLE}. Pick another item, or just ask me something.",
        **base,
    )


def _display_ref(ref: str) -> str:
    """A package reference as the user may see it: templates shortened, never a server path."""
    for prefix in ("{package-root}/", "{project-root}/", "@pkg/", "@project/", "./"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref.rsplit("/", 1)[-1] if ref.startswith("/") else ref


def _workflow_ids(workflows: Sequence[RoutableWorkflow]) -> list[str]:
    return [w.id for w in workflows]


def workflow_for_path(md_path: str, workflows: Sequence[RoutableWorkflow]) -> str | None:
    """The workflow whose `workflow.md` is exactly this path (`@pkg/`, `{package-root}/`, `./` aside).

    Never a guess: a file beside a workflow, or in its folder, is not that workflow.
    """
    norm = package_ref(md_path)
    if norm is None:
        return None
    return next((w.id for w in workflows if package_ref(w.workflow_path) == norm), None)


def looks_like_workflow(md_path: str) -> bool:
    """`workflow.md`, `workflow-create-prd.md`: a file meant to be run as a workflow, not a script."""
    name = md_path.rsplit("/", 1)[-1].lower()
    return name.startswith("workflow") and name.endswith(".md")


def _unknown_workflow(ref: str, workflows: Sequence[RoutableWorkflow], base: dict[str, Any]) -> ResolvedCommand:
    ids = ", ".join(_workflow_ids(workflows)) or "none"
    return ResolvedCommand(
        kind="Refused",
        error_code="UNKNOWN_WORKFLOW",
        message=f"This package has no workflow '{_display_ref(ref)}'. Known workflows: {ids}.",
        **base,
    )


def _map_workflow(ref: str, workflows: Sequence[RoutableWorkflow], base: dict[str, Any]) -> ResolvedCommand:
    if _is_classic(ref):
        return _classic(ref, base)
    workflow_id = ref if ref in _workflow_ids(workflows) else workflow_for_path(ref, workflows)
    if workflow_id is None:
        return _unknown_workflow(ref, workflows, base)
    return ResolvedCommand(kind="StartWorkflow", workflow_id=workflow_id, **base)


def _map_exec(ref: str, workflows: Sequence[RoutableWorkflow], base: dict[str, Any]) -> ResolvedCommand:
    if _is_classic(ref):
        return _classic(ref, base)
    if not ref.lower().endswith(".md"):
        return ResolvedCommand(
            kind="Refused",
            error_code="NOT_SUPPORTED_CLASSIC_WORKFLOW",
            message=f"'{_display_ref(ref)}' cannot be executed: only markdown (.md) scripts are supported.",
            **base,
        )
    workflow_id = workflow_for_path(ref, workflows)
    if workflow_id is not None:
        return ResolvedCommand(kind="StartWorkflow", workflow_id=workflow_id, **base)
    if looks_like_workflow(ref):
        return _unknown_workflow(ref, workflows, base)
    return ResolvedCommand(kind="ExecScript", md_path=ref, **base)


def _map_action(agent: Agent, ref: str, base: dict[str, Any]) -> ResolvedCommand:
    ref = ref.strip()
    if ref in BUILTIN_ACTIONS:
        return ResolvedCommand(kind=BUILTIN_ACTIONS[ref], **base)  # type: ignore[arg-type]
    if ref.startswith("#"):
        prompt_id = ref[1:].strip()
        if agent.prompt(prompt_id) is None:
            known = ", ".join(p.id for p in agent.prompts) or "none"
            return ResolvedCommand(
                kind="Refused",
                error_code="UNKNOWN_PROMPT_ID",
                message=f"{agent.metadata.name} has no prompt '{prompt_id}' (known prompts: {known}).",
                **base,
            )
        return ResolvedCommand(kind="RunAction", action=ActionRef(type="promptId", value=prompt_id), **base)
    return ResolvedCommand(kind="RunAction", action=ActionRef(type="inline", value=ref), **base)


def _data_ref(path: str | None) -> DataRef | None:
    if not path:
        return None
    ext = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    parse_as = {"json": "json", "yaml": "yaml", "yml": "yaml", "csv": "csv", "xml": "xml"}.get(ext, "text")
    return DataRef(path=path, parse_as=parse_as)  # type: ignore[arg-type]
