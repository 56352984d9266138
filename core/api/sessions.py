"""Sessions: the conversation service, the session it moves, and the outputs it sends to a surface.

The output types are one vocabulary, reached through one namespace: `outputs.Output` (any of them),
`outputs.Reply`, `outputs.ShowMenu`.
"""

from __future__ import annotations

from ..session import outputs
from ..session.commands import TypedText
from ..session.model import Session
from ..session.service import SessionService

__all__ = ["Session", "SessionService", "TypedText", "outputs"]
