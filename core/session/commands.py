"""The `*` commands a person can type, in the surface's words: `*help`, and what an unknown one is told.

A terminal has `*quit`; a Slack thread has `*handover`. The lists here are what `*help` shows and what
a mistyped command is answered with, so both always name the same commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .router import GLOBAL_COMMANDS, GlobalCommand, parse_global_command
from .context import Surface
from .model import SessionMode

COMMAND_LIKE = re.compile(r"\*[A-Za-z][\w-]*")  # `*frobnicate`, not Slack's bold `*yes*`

_MEANING = {
    "menu": "show the agent's menu (a run stays open)",
    "status": "show the run's status",
    "pause": "stop after the current step; the run waits, labelled Paused",
    "stop": "stop now, between turns; the run stays resumable",
    "resume": "continue the saved run",
    "dismiss": "leave the run or the agent (a run stays saved)",
    "model": "say which model this conversation uses; *model NAME switches to another allowed one",
    "help": "this list",
}
_SURFACE_ONLY: dict[Surface, dict[str, str]] = {
    "ide": {"quit": "leave the chat"},
    "web": {"handover": "give this thread to someone else: *handover @someone"},
}


@dataclass(frozen=True)
class TypedText:
    """What a person typed, with the `*command` it is (None: not one), parsed once where the text arrives.

    A surface that already knows the command (a Slack event carries it) builds this directly, so the
    session never parses the text a second time."""

    text: str
    command: GlobalCommand | None = None

    @classmethod
    def parse(cls, text: str) -> TypedText:
        return cls(text, parse_global_command(text))


def command_names(surface: Surface) -> list[str]:
    """Every command a person can type on this surface, in the order `*help` lists them."""
    return [*GLOBAL_COMMANDS, *_SURFACE_ONLY[surface]]


def looks_like_command(text: str) -> bool:
    words = text.strip().split(maxsplit=1)
    return bool(words) and COMMAND_LIKE.fullmatch(words[0]) is not None


def unknown_command(text: str, surface: Surface) -> str:
    word = text.strip().split(maxsplit=1)[0]
    commands = ", ".join(f"*{name}" for name in command_names(surface))
    return f"I don't know the command {word}. Commands: {commands}."


def help_text(surface: Surface, mode: SessionMode) -> str:
    """`*help`: what to type here, then every command with what it does."""
    meanings = {**_MEANING, **_SURFACE_ONLY[surface]}
    lines = [_what_to_type(mode), "Commands:"]
    lines += [f"*{name} — {meanings[name]}" for name in command_names(surface)]
    return "\n".join(lines)


def _what_to_type(mode: SessionMode) -> str:
    if mode == "run":
        return "Your messages are answers for the run. Type *menu to start something else."
    if mode == "agent":
        return "Pick a menu item by number or trigger, type another agent's name to switch, or just ask."
    if mode == "chat":
        return "Ask anything about the project; *dismiss goes back to the agents."
    return "Pick an agent by number or name, or type `chat` for a plain assistant."
