"""Which decision a command line gets: allow, ask or forbid, and why.

Every part of a compound command, in every form its words can take and with its wrappers set
aside (command_line.py), is matched against the rules (the longest prefix that surely matches
decides for that part, else `default`); the strictest part decides for the line. A form that is
forbidden forbids the line without a question; a part that only may be a forbidden command (a word
the checker cannot know stands where the rule's words go) asks every time. A line the checker cannot
see through is `ask` at least, and a forbidden prefix anywhere in it forbids it.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .command_config import STRICTNESS, CommandRule, CommandsConfig, Decision
from .command_line import Analysis, analyse, words_anywhere
from .command_match import Match, matches, normalised, prefix_words
from .command_words import UNKNOWN, brace_words
from .command_wrappers import is_wrapper, program, unwrap

ALLOW_FOR_RUN_WORDS = 2


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str  # for the audit log and the model: the rule or what made it stricter
    rule: str | None = None  # the prefix of the deciding rule, if a rule decided
    allow_for_run: str | None = None  # a prefix the owner may allow for the rest of the run
    every_time: bool = False  # a prefix allowed for the run never lifts it (it could be a forbidden command)


def decide(line: str, config: CommandsConfig, allowed_for_run: Collection[str] = ()) -> Verdict:
    """Raises CommandLineInvalid when the line cannot be parsed."""
    analysis = analyse(line)
    forbidden = _forbidden_written(analysis.written, config.rules) or _forbidden_anywhere(line, config.rules)
    if forbidden is not None:
        return Verdict("forbid", f"rule '{forbidden}' forbids it", rule=forbidden)
    verdicts = [_part(words, config.rules, config.default) for words in analysis.parts]
    worst = max(verdicts, key=lambda v: STRICTNESS[v.decision], default=Verdict("ask", "no command"))
    if worst.decision == "forbid":
        return worst
    if not analysis.analysable:
        return Verdict("ask", "it cannot be checked: " + ", ".join(dict.fromkeys(analysis.opaque)),
                       allow_for_run=None)
    if worst.decision == "allow":
        return worst
    could_be_forbidden = next((v for v in verdicts if v.every_time), None)
    if could_be_forbidden is not None:  # the owner may approve it once; no prefix allowed for the run covers it
        return could_be_forbidden
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
    """The longest rule that surely names the words decides; a forbidden one they may name makes it ask."""
    best: CommandRule | None = None
    could_be: CommandRule | None = None
    for rule in rules:
        found = matches(words, prefix_words(rule.prefix), allows=rule.decision == "allow")
        if found is Match.YES and (best is None or _longer_or_stricter(rule, best)):
            best = rule
        elif found is Match.MAYBE and rule.decision == "forbid":
            could_be = rule
    if best is not None and best.decision == "forbid":
        return Verdict("forbid", f"rule '{best.prefix}' ({best.decision})", rule=best.prefix)
    if could_be is not None:
        return Verdict("ask", f"it could be '{could_be.prefix}', which is forbidden", rule=could_be.prefix,
                       every_time=True)
    if best is None:
        shown = " ".join(w.replace(UNKNOWN, "…") for w in words[:ALLOW_FOR_RUN_WORDS])
        return Verdict(default, f"no rule names '{shown}' (default: {default})")
    return Verdict(best.decision, f"rule '{best.prefix}' ({best.decision})", rule=best.prefix)


def _longer_or_stricter(rule: CommandRule, best: CommandRule) -> bool:
    a, b = len(rule.prefix.split()), len(best.prefix.split())
    return a > b or (a == b and STRICTNESS[rule.decision] > STRICTNESS[best.decision])


def _match(words: Sequence[str], prefixes: Collection[str]) -> str | None:
    return next((p for p in prefixes if matches(words, prefix_words(p), allows=True) is Match.YES), None)


def _forbidden_written(written: Sequence[Sequence[str]], rules: Sequence[CommandRule]) -> str | None:
    """A forbidden command anywhere in a command as written, its wrappers set aside (`chroot / git -C . push`)."""
    forbidding = [(rule.prefix, prefix_words(rule.prefix)) for rule in rules if rule.decision == "forbid"]
    starts = {program(wanted[0]) for _, wanted in forbidding if wanted}
    for words in written:
        for i, word in enumerate(words):
            if program(normalised(word)) not in starts and not is_wrapper(word):
                continue
            command = unwrap(words[i:]).command
            for prefix, wanted in forbidding:
                if matches(command, wanted) is Match.YES:
                    return prefix
    return None


def _forbidden_anywhere(line: str, rules: Sequence[CommandRule]) -> str | None:
    """A forbidden command in the line's words read without its structure (inside quotes, substitutions,
    constructs the parser does not model), braces expanded."""
    tokens = [word for token in words_anywhere(line) for word in brace_words(token)]
    return _forbidden_written([tokens], rules)


def _allow_for_run(analysis: Analysis, config: CommandsConfig) -> str | None:
    """The first words shared by every part that needs asking, when they share them."""
    asking = [w for w in analysis.parts if _part(w, config.rules, config.default).decision == "ask"]
    if not asking:
        return None
    asking = [_known_start(w) for w in asking]
    first = asking[0]
    prefix = first[:3] if first[1:2] == ["-m"] else first[:ALLOW_FOR_RUN_WORDS]  # python -m pytest
    if any(list(w[: len(prefix)]) != prefix for w in asking):
        prefix = asking[0][:1]
        if any(w[:1] != prefix for w in asking):
            return None
    return shlex.join(prefix) if prefix else None


def _known_start(words: Sequence[str]) -> list[str]:
    """The words before the first one holding text the checker cannot know."""
    return list(itertools.takewhile(lambda w: UNKNOWN not in w, words))


