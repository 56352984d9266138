"""Which decision a command line gets: allow, ask or forbid, and why.

Every part of a compound command is matched against the rules (the longest matching prefix
decides for that part, else `default`); the strictest part decides for the line. A line the
checker cannot see through is `ask` at least, and a forbidden prefix anywhere in it forbids it.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .command_config import STRICTNESS, CommandRule, CommandsConfig, Decision
from .command_line import Analysis, analyse, words_anywhere

ALLOW_FOR_RUN_WORDS = 2


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str  # for the audit log and the model: the rule or what made it stricter
    rule: str | None = None  # the prefix of the deciding rule, if a rule decided
    allow_for_run: str | None = None  # a prefix the owner may allow for the rest of the run


def decide(line: str, config: CommandsConfig, allowed_for_run: Collection[str] = ()) -> Verdict:
    """Raises CommandLineInvalid when the line cannot be parsed."""
    analysis = analyse(line)
    verdicts = [_part(words, config.rules, config.default) for words in analysis.parts]
    forbidden = _forbidden_anywhere(line, config.rules)
    if forbidden is not None:
        return Verdict("forbid", f"rule '{forbidden}' forbids it", rule=forbidden)
    worst = max(verdicts, key=lambda v: STRICTNESS[v.decision], default=Verdict("ask", "no command"))
    if worst.decision == "forbid":
        return worst
    if not analysis.analysable:
        return Verdict("ask", "it cannot be checked: " + ", ".join(dict.fromkeys(analysis.opaque)),
                       allow_for_run=None)
    if worst.decision == "allow":
        return worst
    owner_allowed = [_match(words, allowed_for_run) for words, v in zip(analysis.parts, verdicts) if v.decision != "allow"]
    if allowed_for_run and all(owner_allowed):
        return Verdict("allow", "allowed for this run by its owner", rule=owner_allowed[0])
    return Verdict("ask", worst.reason, rule=worst.rule, allow_for_run=_allow_for_run(analysis, config))


def decide_unreadable(line: str, config: CommandsConfig) -> Verdict:
    """A line the shell accepts but the checker cannot read: forbidden if a forbidden prefix shows, else ask."""
    forbidden = _forbidden_anywhere(line, config.rules)
    if forbidden is not None:
        return Verdict("forbid", f"rule '{forbidden}' forbids it", rule=forbidden)
    return Verdict("ask", "it cannot be checked: a construct the checker cannot read")


def _part(words: Sequence[str], rules: Sequence[CommandRule], default: Decision) -> Verdict:
    best: CommandRule | None = None
    for rule in rules:
        if _starts_with(words, rule.prefix) and (best is None or _longer_or_stricter(rule, best)):
            best = rule
    if best is None:
        return Verdict(default, f"no rule names '{' '.join(words[:ALLOW_FOR_RUN_WORDS])}' (default: {default})")
    return Verdict(best.decision, f"rule '{best.prefix}' ({best.decision})", rule=best.prefix)


def _longer_or_stricter(rule: CommandRule, best: CommandRule) -> bool:
    a, b = len(rule.prefix.split()), len(best.prefix.split())
    return a > b or (a == b and STRICTNESS[rule.decision] > STRICTNESS[best.decision])


def _starts_with(words: Sequence[str], prefix: str) -> bool:
    """Whole words; a last prefix word ending in '/' matches any path below it (`uv run @pkg/`);
    a command named by its path matches its name."""
    wanted = _split(prefix)
    if not wanted or len(words) < len(wanted):
        return False
    if "/" not in wanted[0] and "/" in words[0]:  # /usr/bin/git is git
        words = [words[0].rsplit("/", 1)[-1], *words[1:]]
    *head, last = wanted
    if any(w != x for w, x in zip(words, head)):
        return False
    word = words[len(head)]
    return word == last or (last.endswith("/") and word.startswith(last))


def _match(words: Sequence[str], prefixes: Collection[str]) -> str | None:
    return next((p for p in prefixes if _starts_with(words, p)), None)


def _forbidden_anywhere(line: str, rules: Sequence[CommandRule]) -> str | None:
    """A forbidden prefix found as consecutive words anywhere (inside quotes and substitutions too)."""
    tokens = words_anywhere(line)
    for rule in rules:
        if rule.decision != "forbid":
            continue
        wanted = _split(rule.prefix)
        for i in range(len(tokens) - len(wanted) + 1):
            if _starts_with(tokens[i:], rule.prefix):
                return rule.prefix
    return None


def _allow_for_run(analysis: Analysis, config: CommandsConfig) -> str | None:
    """The first words shared by every part that needs asking, when they share them."""
    asking = [w for w in analysis.parts if _part(w, config.rules, config.default).decision == "ask"]
    if not asking:
        return None
    first = asking[0]
    prefix = first[:3] if first[1:2] == ["-m"] else first[:ALLOW_FOR_RUN_WORDS]  # python -m pytest
    if any(list(w[: len(prefix)]) != prefix for w in asking):
        prefix = asking[0][:1]
        if any(w[:1] != prefix for w in asking):
            return None
    return shlex.join(prefix)


def _split(prefix: str) -> list[str]:
    try:
        return shlex.split(prefix)
    except ValueError:
        return prefix.split()
