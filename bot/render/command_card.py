"""A shell_run command in the thread: its line in the plan and the status line while it runs, then a
message with its exit code, duration and last output lines, and a "Show output" button for the whole log."""

from __future__ import annotations

from crewagent.core.api.events import engine_events

from ..base import actions as act
from ..base.actions import ButtonValue
from .blocks import actions_block, button
from .message import SECTION_LIMIT, SlackMessage, context, section
from .mrkdwn import escape, truncate

STATUS_LIMIT = 150
SHOWN_COMMAND = 80


def seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s" if ms < 10_000 else f"{round(ms / 1000)} s"


def _short(command: str) -> str:
    return truncate(command, SHOWN_COMMAND)


def plan_key(event: engine_events.CommandProgress) -> str:
    """What a command's plan line starts with, so its later lines replace the earlier ones."""
    return f"$ {_short(event.command)}"


def plan_line(event: engine_events.CommandProgress) -> str:
    """`$ python -m pytest -q · 12 s` while it runs; `… · exit 1 · 3.2 s` once it ended."""
    if event.running:
        return f"{plan_key(event)} · running {seconds(event.elapsed_ms)}"
    return f"{plan_key(event)} · {outcome(event)}"


def status_line(event: engine_events.CommandProgress) -> str:
    """The thread's status line while a command runs: the command, the time so far, its last output line."""
    line = f"Running `{_short(event.command)}` · {seconds(event.elapsed_ms)}"
    if event.last_line:
        line += f" · {event.last_line}"
    return truncate(line, STATUS_LIMIT)


def outcome(event: engine_events.CommandProgress) -> str:
    if event.killed == "timeout":
        return f"stopped at its time limit after {seconds(event.elapsed_ms)}"
    if event.killed:
        return f"stopped after {seconds(event.elapsed_ms)}"
    return f"exit {event.exit_code} · {seconds(event.elapsed_ms)}"


def result_message(event: engine_events.CommandProgress, *, key: str) -> SlackMessage:
    """The ended command: a heading, the output's last lines in a code block, and Show output."""
    ok = event.exit_code == 0 and not event.killed
    icon = ":white_check_mark:" if ok else ":x:"
    heading = f"{icon} `{escape(_short(event.command))}` in `{escape(event.cwd)}` · {escape(outcome(event))}"
    blocks = [section(heading)]
    if event.tail.strip():
        fence = event.tail.replace("```", "`\u200b``")[-(SECTION_LIMIT - 10):]  # the end matters most
        blocks.append(section("```\n" + fence + "\n```"))
    else:
        blocks.append(context("(no output)"))
    if event.log:
        show = button("Show output", act.action_id(act.ARTIFACT, "command_log"),
                      ButtonValue(s=key, r=event.run_id, f=event.log))
        blocks.append(actions_block([show]))
    return SlackMessage(text=f"{_short(event.command)}: {outcome(event)}", blocks=blocks)
