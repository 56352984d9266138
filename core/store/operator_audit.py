"""Which of a run's audit events an operator asks about, and how each becomes a operator log row.

A run's execution.jsonl holds everything (every tool call, every model request); the operator log keeps
only decisions a person made or a refusal a person met, with whom and where they came from:

- `approval.decided`: a command or tool approved, denied or allowed for the run (`by` is who clicked);
- `state.confirmed`: a Confirm that lets a completed run change its state document;
- `delivery`: Commit & push of a run's branch;
- `budget.refused`: a request refused because a daily token budget was spent (written by the surface).
"""

from __future__ import annotations

from typing import Any

from ..base.attribution import Attribution
from .operator_log import AuditEntry

OPERATOR_KINDS = frozenset({"approval.decided", "state.confirmed", "delivery", "budget.refused"})
_NOT_DETAIL = frozenset({"kind", "ts", "runId", "by", "channel"})


def operator_log_entry(event: dict[str, Any], run_id: str, who: Attribution) -> AuditEntry | None:
    """The row for an event an operator asks about; None for any other event."""
    kind = event.get("kind")
    if kind not in OPERATOR_KINDS:
        return None
    person = str(event.get("by") or who.person)
    detail = {k: v for k, v in event.items() if k not in _NOT_DETAIL and v is not None}
    channel = str(event.get("channel") or who.channel)
    return AuditEntry(person=person, channel=channel, run_id=run_id, kind=str(kind), detail=detail)
