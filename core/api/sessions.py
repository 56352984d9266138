"""Sessions: the conversation service, the session it moves, and the outputs it sends to a surface.

The concrete output types are one vocabulary, reached through one namespace: `outputs.Reply`, `outputs.ShowMenu`.
"""

from __future__ import annotations

from ..session import outputs
from ..session.commands import TypedText
from ..session.model import Session
from ..session.outputs import Output
from ..session.service import SessionService

__all__ = ["Output", "Session", "SessionService", "TypedText", "outputs"]
