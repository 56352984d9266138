"""One-shot conversations outside a run: agent persona chat, plain ChatMode, exec scripts, prompt actions.

The session keeps only a short text history (user inputs, injected context, assistant answers),
trimmed to a token budget, because the record is persisted by the surface after every event.
Tool calls and their (possibly large) results are not kept between turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ..base.answers import UserInput
from ..store.history import message_tokens
from .outputs import AgentCard, Reply, ReplyDelta, WidgetRequest
from ..package.models import Agent, Package
from .context import Deps, OutputStream, card
from .model import PendingWidget, Session
from .model_command import chosen_model

HISTORY_BUDGET_TOKENS = 6_000
Mode = Literal["agent", "chat", "script"]


async def talk(
    deps: Deps,
    session: Session,
    package: Package,
    agent: Agent | None,
    user_text: UserInput,
    out: OutputStream,
    *,
    mode: Mode,
    extra_context: Sequence[str] = (),
    guest: bool = False,
) -> None:
    """Ask the model once (with its small read-only tool loop) and show the answer or its question.

    A guest (someone who is not the conversation's owner) gets an answer but changes nothing the
    owner relies on: an open question stays open, a question the model asks back is shown as text,
    and a run's conversation keeps its own history.
    """
    if not guest:
        session.pending_widget = None  # typing instead of answering an open question makes it stale
    previous = list(session.history)
    shown_as = card(agent) if agent is not None and mode != "chat" else None

    async def on_delta(turn: int, text: str, *, restart: bool = False) -> None:
        await out.put(ReplyDelta(text=text, turn=turn, agent=shown_as, restart=restart))

    reply = await deps.engine.converse(
        package,
        agent,
        previous,
        user_text,
        project_root=deps.project_root,
        mode=mode,
        extra_context=extra_context,
        on_delta=on_delta if out.streams else None,
        model=chosen_model(deps, session),
    )
    added = [m for m in reply.history[len(previous):] if m.get("role") == "user"]
    answer = reply.text.strip()
    if answer:
        added.append({"role": "assistant", "content": answer})
    if not (guest and session.mode == "run"):
        session.history = trim(previous + added, HISTORY_BUDGET_TOKENS)
    await _show(session, answer, reply.widget, out, shown_as, guest=guest)


async def _show(
    session: Session,
    answer: str,
    widget: dict[str, Any] | None,
    out: OutputStream,
    shown_as: AgentCard | None,
    *,
    guest: bool,
) -> None:
    """The answer, and the question the model asked back: as a widget for the owner, as text for a guest."""
    if widget is not None and guest:
        question = str(widget.get("message") or "").strip()
        await out.put(Reply(text="\n\n".join(t for t in (answer, question) if t) or "(no answer)", agent=shown_as))
        return
    if widget is not None:
        if answer and answer != str(widget.get("message") or "").strip():
            await out.put(Reply(text=answer, agent=shown_as))
        session.pending_widget = PendingWidget.from_payload(widget, None)
        await out.put(WidgetRequest(widget=widget, run_id=None))
        return
    await out.put(Reply(text=answer or "(no answer)", agent=shown_as))


def trim(history: list[dict[str, Any]], budget_tokens: int) -> list[dict[str, Any]]:
    """Drop the oldest messages until the rest fits (the last exchange always stays); starts with a user turn."""
    kept = list(history)
    total = sum(message_tokens(m) for m in kept)
    while len(kept) > 2 and total > budget_tokens:
        total -= message_tokens(kept.pop(0))
        while kept and kept[0].get("role") != "user":
            total -= message_tokens(kept.pop(0))
    return kept
