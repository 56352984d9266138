"""`crewagent usage` and `crewagent audit`: the operator log, read from CREWAGENT_HOME or, with
`--database-url` (or CREWAGENT_DATABASE_URL), from the Postgres database the replicas share.

`usage --by user|channel` sums every model call's tokens per Slack user (or terminal login) or per
channel; `audit` lists approvals, Confirms, deliveries and budget refusals with who and when.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

from crewagent.core.api.errors import CrewError
from crewagent.core.api.runs import stamp
from crewagent.core.api.stores import AuditEntry, OperatorLog, RuntimeStore, UsageTotal

from .exit_codes import EXIT_FAILED, EXIT_USAGE
from .render import Write, stdout_write

_AGO = re.compile(r"^(\d+)([dh])$")


def run(args: argparse.Namespace, write: Write = stdout_write) -> int:
    try:
        since = parse_since(args.since)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    url = getattr(args, "database_url", None) or os.environ.get("CREWAGENT_DATABASE_URL")
    try:
        with _operator_log(url) as log:
            if args.command == "usage":
                return _usage(log, args.by, since, args.json, write)
            return _audit(log, args, since, write)
    except CrewError as exc:  # a URL that is no Postgres URL, or a database that does not answer
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if exc.code == "DATABASE_URL_INVALID" else EXIT_FAILED


def parse_since(text: str | None, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> str | None:
    """`7d` / `12h` (that long ago), `2026-01-31` (that UTC day's start) or a full ISO time; as the log's stamp."""
    if not text:
        return None
    ago = _AGO.match(text.strip())
    if ago:
        amount, unit = int(ago.group(1)), ago.group(2)
        return stamp(now() - (timedelta(days=amount) if unit == "d" else timedelta(hours=amount)))
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since {text!r} is neither a date (2026-01-31), a time (2026-01-31T09:00Z) nor an "
                         "age (7d, 12h)") from None
    return stamp(when if when.tzinfo else when.replace(tzinfo=timezone.utc))


@contextmanager
def _operator_log(url: str | None) -> Iterator[OperatorLog]:
    if not url:
        yield RuntimeStore().operator_log
        return
    from crewagent.core.api.stores import PostgresOperatorLog

    log = PostgresOperatorLog.connect(url)
    try:
        yield log
    finally:
        log.close()


def _usage(log: OperatorLog, by: str, since: str | None, as_json: bool, write: Write) -> int:
    totals = log.usage_totals("channel" if by == "channel" else "user", since)
    if as_json:
        write(json.dumps({"by": by, "since": since, "rows": [_usage_row(by, t) for t in totals]}, indent=2))
        return 0
    if not totals:
        write(f"No model usage recorded{f' since {since}' if since else ''}.")
        return 0
    rows = [(t.key or "(nobody)", f"{t.calls:,}", f"{t.input_tokens:,}", f"{t.output_tokens:,}",
             f"{t.total_tokens:,}") for t in totals]
    _table((by.upper(), "CALLS", "INPUT", "OUTPUT", "TOTAL"), rows, write)
    return 0


def _usage_row(by: str, total: UsageTotal) -> dict[str, object]:
    return {by: total.key, "calls": total.calls, "input_tokens": total.input_tokens,
            "output_tokens": total.output_tokens, "total_tokens": total.total_tokens}


def _audit(log: OperatorLog, args: argparse.Namespace, since: str | None, write: Write) -> int:
    entries = log.audit_entries(run_id=args.run, person=args.user, since=since)
    if args.json:
        write(json.dumps([e.model_dump() for e in entries], indent=2, ensure_ascii=False))
        return 0
    if not entries:
        write("No audit entries match.")
        return 0
    rows = [(e.at, e.person or "(nobody)", e.channel, e.run_id or "-", e.kind, _what(e)) for e in entries]
    _table(("WHEN (UTC)", "USER", "CHANNEL", "RUN", "KIND", "WHAT"), rows, write)
    return 0


def _what(entry: AuditEntry) -> str:
    detail = entry.detail
    if entry.kind == "approval.decided":
        given = detail.get("input")
        command = given.get("command") if isinstance(given, dict) else None
        what = f"`{command}`" if command else detail.get("title", "")
        return f"{detail.get('decision', '?')} {detail.get('tool', '')}: {what}".rstrip(": ")
    if entry.kind == "delivery":
        return f"{detail.get('outcome', '?')} {detail.get('branch', '')}".strip()
    if entry.kind == "budget.refused":
        return f"budgets.{detail.get('budget')}: {detail.get('spent', 0):,} of {detail.get('limit', 0):,} tokens"
    return ", ".join(f"{k}={v}" for k, v in detail.items())


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]], write: Write) -> None:
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(len(head))]
    for row in (head, *rows):
        write("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
