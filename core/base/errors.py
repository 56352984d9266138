"""One error type for every user-facing boundary: a stable code, a human message, safe details."""

from __future__ import annotations

from typing import Any


class CrewError(Exception):
    """An expected failure with a machine code and a message a person can act on.

    Details must never hold real server paths: they may reach the LLM or Slack.
    """

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
