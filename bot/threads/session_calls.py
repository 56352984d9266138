"""The session calls a thread event can turn into: one small value per kind of call, made by the event
handlers (text, clicks, forms, upkeep) and run by `CallRunner` on the channel's session service.

A call knows what it costs: `gated` calls may ask the model, so they wait for a run slot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Union

from crewagent.core.api.sessions import FormAnswer, outputs, Session, SessionService, TypedText

from ..base.thread import ThreadRecord
from .event_claim import EventClaim

Sink = Callable[[outputs.Output], Awaitable[None]]
SLOT_CONTROLS = frozenset({"resume", "retry"})  # controls that pump the run again
URGENT_COMMANDS = frozenset({"pause", "stop"})  # reach a pumping run at once, outside the thread's order


@dataclass(frozen=True)
class OpenThread:
    """First contact in a new thread (a mention, a DM, `/crew`)."""

    typed: TypedText

    @property
    def gated(self) -> bool:
        return bool(self.typed.text.strip())


@dataclass(frozen=True)
class SayText:
    """The owner's reply in the thread (or a menu number picked from a button); never a `*command`."""

    typed: TypedText
    gated = True


@dataclass(frozen=True)
class ChooseModel:
    """`*model` (which model the thread uses) or `*model NAME` (switch it); never asks the model."""

    typed: TypedText
    gated = False


@dataclass(frozen=True)
class GuestChat:
    """Someone other than the owner chats with the thread's agent."""

    text: str
    gated = True


@dataclass(frozen=True)
class PickAgent:
    agent_id: str
    gated = False


@dataclass(frozen=True)
class AnswerWidget:
    """An answer to the run's (or the agent's) open question, from a button or a form, typed."""

    answer: FormAnswer
    gated = True


@dataclass(frozen=True)
class RunControl:
    """A `*command` or a control button: pause, stop, resume, retry, status, menu, dismiss, help."""

    action: str

    @property
    def gated(self) -> bool:
        return self.action in SLOT_CONTROLS


@dataclass(frozen=True)
class StartNext:
    """A next-step button: start `workflow_id` after the completed run `run_id`, on its branch."""

    run_id: str
    workflow_id: str
    gated = True


SessionCall = Union[OpenThread, SayText, ChooseModel, GuestChat, PickAgent, AnswerWidget, RunControl, StartNext]


@dataclass(frozen=True)
class ThreadCall:
    """One session call for one thread, as an event handler decided it."""

    record: ThreadRecord
    call: SessionCall
    user: str  # who acted (whom a streamed reply is for)
    reaction_ts: str | None = None  # the message to mark as being worked on
    now: bool = False  # pause/stop of a pumping run: no run slot, outputs straight to the thread
    budgeted: bool = True  # False: work a request that passed the budget check already began (a resume at start-up)
    claim: EventClaim | None = None  # the event's dedupe keys, still to be claimed once its effect is durable

    @property
    def fresh_status(self) -> bool:
        """`*status`: the status is posted anew at the bottom of the thread."""
        return isinstance(self.call, RunControl) and self.call.action == "status"


async def start(service: SessionService, session: Session, call: SessionCall, sink: Sink) -> None:
    """Make the call on the service; every output goes to `sink` as it happens (the returned copy is not used)."""
    if isinstance(call, OpenThread):
        await service.open(session, call.typed, emit=sink)
    elif isinstance(call, (SayText, ChooseModel)):
        await service.handle_text(session, call.typed, emit=sink)
    elif isinstance(call, GuestChat):
        await service.guest_chat(session, call.text, emit=sink)
    elif isinstance(call, PickAgent):
        await service.pick_agent(session, call.agent_id, emit=sink)
    elif isinstance(call, StartNext):
        await service.start_next(session, call.run_id, call.workflow_id, emit=sink)
    elif isinstance(call, AnswerWidget):
        await service.handle_widget_submit(session, call.answer, emit=sink)
    else:
        await service.control(session, call.action, emit=sink)  # type: ignore[arg-type]
