"""Sessions: the conversation service, the session it moves, and the outputs it sends to a surface.

The output types are one vocabulary, reached through one namespace: `outputs.Output` (any of them),
`outputs.Reply`, `outputs.ShowMenu`. So are the answers a surface gives to an open question:
`answers.ConfirmationAnswer`, `answers.answer_of(widget, value)`; `FormAnswer` is any of them.
"""

from __future__ import annotations

from ..base import answers
from ..base.answers import FormAnswer, UserInput
from ..session import outputs
from ..session.commands import TypedText
from ..session.model import Session
from ..session.service import SessionService

__all__ = ["FormAnswer", "Session", "SessionService", "TypedText", "UserInput", "answers", "outputs"]
