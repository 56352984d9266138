"""`*model`: which model this conversation's calls use, and switching it to another the operator allows.

The choice is kept on the Session (the surface persists it with the conversation), so it holds for a
resumed run and for whichever process serves the conversation next; a run takes it at each pump.
"""

from __future__ import annotations

from ..model.choice import ModelChoice
from .context import Deps, OutputStream
from .model import Session
from .outputs import Notice


def choice_of(deps: Deps) -> ModelChoice:
    """The operator's list; without one, the configured model is the only choice."""
    return deps.models or ModelChoice(default=deps.engine.llm.model)


def chosen_model(deps: Deps, session: Session) -> str | None:
    """The model the conversation picked, if it is still allowed (None: the configured default)."""
    chosen = session.model
    return chosen if chosen and choice_of(deps).allows(chosen) else None


async def choose_model(deps: Deps, session: Session, text: str, out: OutputStream) -> None:
    """`*model` reports; `*model NAME` switches to an allowed model and refuses any other, changing nothing."""
    choice = choice_of(deps)
    words = text.strip().split()
    in_use = choice.in_use(session.model)
    if len(words) < 2:
        hint = " Type `*model NAME` to switch." if len(choice.allowed) > 1 else ""
        await out.put(Notice(text=f"This conversation uses the model `{in_use}`. Allowed: {choice.listed()}.{hint}"))
        return
    name = words[1].strip("`")
    if not choice.allows(name):
        text = f"`{name}` is not an allowed model, so nothing changed (still `{in_use}`). Allowed: {choice.listed()}."
        await out.put(Notice(text=text, level="warning"))
        return
    session.model = name
    await out.put(Notice(text=f"Switched to the model `{name}`: this conversation's next model calls use it."))
