"""Draw docs/images/thread.png: a real create-story run in a Slack thread, the plan and the question.

The run goes through the real bot (Bolt, the thread work, the renderers) against the repository's fake
Slack Web API and scripted model, the same harness as the tests; the Block Kit the bot posted is then
drawn as HTML and photographed with headless Chromium. Run from the repository root, with the test
extra installed and Chromium on PATH (Debian: `apt-get install chromium`):

    python docs/images/render_thread.py
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "images" / "thread.png"
WIDTH, HEIGHT = 760, 760
WAIT = 60

sys.path.insert(0, str(REPO))


async def record_thread(scratch: Path) -> list[dict[str, Any]]:
    """Mention the bot, pick Bob, start Create Story, wait for its question; the thread's messages."""
    from tests.support.paths import EXAMPLES
    from tests.support.scripts import script_create_story
    from tests.support.bot_harness import bot_harness

    project = scratch / "project"
    shutil.copytree(EXAMPLES / "sample-project", project)
    async with bot_harness(project) as h:
        script_create_story(h.llm)
        top = await h.mention("")
        await h.posted_text("These agents are available")
        bob, picker = h.button(top, "Bob")
        mark = h.mark()
        await h.click(bob, picker)
        await h.posted_text("[1] Create the next story", since=mark)
        item, menu = h.button(top, "[1] Create the next story")
        mark = h.mark()
        await h.click(item, menu)
        await h.posted_text("1-2-user-authentication", since=mark)
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        return h.thread(top)


# ---- Block Kit as HTML (only what this thread uses) -------------------------------------------------

STATUS_ICON = {"complete": "✅", "in_progress": "◐", "pending": "○", "error": "⚠", "skipped": "–"}


def mrkdwn(text: str) -> str:
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"(?<![\w*])\*([^*]+)\*(?![\w*])", r"<b>\1</b>", out)
    return out.replace("\n", "<br>")


def block_html(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "context":
        return '<div class="context">' + " ".join(mrkdwn(e.get("text", "")) for e in block["elements"]) + "</div>"
    if kind == "markdown":
        return f'<div class="text">{mrkdwn(block["text"])}</div>'
    if kind == "section":
        return f'<div class="text">{mrkdwn(block.get("text", {}).get("text", ""))}</div>'
    if kind == "actions":
        buttons = "".join(f'<span class="button">{html.escape(e["text"]["text"])}</span>'
                          for e in block["elements"] if e.get("type") == "button")
        return f'<div class="actions">{buttons}</div>'
    if kind == "plan":
        rows = []
        for task in block["tasks"]:
            details = "".join(el.get("text", "") for part in task.get("details", {}).get("elements", [])
                              for el in part.get("elements", []))
            rows.append(
                f'<div class="task {task["status"]}"><span class="icon">{STATUS_ICON.get(task["status"], "○")}</span>'
                f'<div><div class="task-title">{html.escape(task["title"])}</div>'
                + (f'<div class="details">{mrkdwn(details)}</div>' if details else "") + "</div></div>"
            )
        return f'<div class="plan"><div class="plan-title">{html.escape(block["title"])}</div>{"".join(rows)}</div>'
    return ""


def message_html(name: str, avatar: str, when: str, body: str, app: bool = True) -> str:
    badge = '<span class="app">APP</span>' if app else ""
    return (f'<div class="message"><div class="avatar">{avatar}</div><div class="content">'
            f'<div class="meta"><b>{name}</b>{badge}<span class="time">{when}</span></div>{body}</div></div>')


def page(thread: list[dict[str, Any]]) -> str:
    menu, plan, question = thread[1], thread[2], thread[3]
    parts = [message_html("Ada", "A", "10:02", '<div class="text"><span class="mention">@crew</span></div>', app=False)]
    parts.append(message_html("crew", "🤖", "10:02", "".join(block_html(b) for b in menu["blocks"])))
    parts.append(message_html("crew", "🤖", "10:02", "".join(block_html(b) for b in plan["blocks"])))
    footer = "".join(block_html(b) for b in question["blocks"])
    parts.append(message_html("crew", "🤖", "10:03", f'<div class="text">{mrkdwn(question["text"])}</div>' + footer))
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; font: 15px/1.45 "DejaVu Sans", sans-serif; color: #1d1c1d; background: #fff; }}
.pane {{ width: {WIDTH - 40}px; padding: 14px 20px; }}
.header {{ font-weight: bold; font-size: 17px; padding-bottom: 10px; border-bottom: 1px solid #ddd; margin-bottom: 8px; }}
.header span {{ font-weight: normal; color: #616061; font-size: 14px; margin-left: 6px; }}
.message {{ display: flex; gap: 10px; padding: 8px 0; }}
.avatar {{ width: 36px; height: 36px; border-radius: 6px; background: #4a154b; color: #fff; display: flex;
  align-items: center; justify-content: center; font-size: 18px; flex: none; }}
.content {{ flex: 1; min-width: 0; }}
.meta b {{ margin-right: 6px; }} .time {{ color: #616061; font-size: 12px; margin-left: 6px; }}
.app {{ background: #e8e8e8; color: #616061; font-size: 10px; font-weight: bold; padding: 1px 4px; border-radius: 3px; }}
.context {{ color: #616061; font-size: 12.5px; margin: 3px 0; }}
.text {{ margin: 3px 0; }}
code {{ background: #f6f6f6; border: 1px solid #e0e0e0; border-radius: 3px; padding: 0 3px; color: #c01343; font-size: 13px; }}
.mention {{ background: #e8f5fa; color: #1264a3; padding: 0 2px; border-radius: 3px; }}
.actions {{ margin: 6px 0; display: flex; flex-wrap: wrap; gap: 8px; }}
.button {{ border: 1px solid #bbb; border-radius: 4px; padding: 3px 12px; font-weight: bold; font-size: 13.5px; }}
.plan {{ border: 1px solid #ddd; border-radius: 8px; padding: 10px 14px; margin-top: 4px; }}
.plan-title {{ font-weight: bold; margin-bottom: 6px; }}
.task {{ display: flex; gap: 10px; padding: 5px 0; border-top: 1px solid #f0f0f0; }}
.task .icon {{ width: 18px; text-align: center; color: #1264a3; }}
.task.pending {{ color: #616061; }}
.task-title {{ font-size: 14.5px; }}
.details {{ color: #616061; font-size: 12.5px; }}
</style></head><body><div class="pane"><div class="header">Thread <span>#team-app</span></div>
{"".join(parts)}</div></body></html>"""


def photograph(page_html: str, scratch: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("Chromium is not on PATH (Debian: apt-get install chromium)")
    source = scratch / "thread.html"
    source.write_text(page_html, encoding="utf-8")
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", f"--user-data-dir={scratch / 'profile'}",
        "--hide-scrollbars", "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}",
        f"--screenshot={OUT}", source.as_uri(),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=WAIT)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # Chromium's helpers, if any are left
        except ProcessLookupError:
            pass


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="crewagent-thread-") as scratch_text:
        scratch = Path(scratch_text)
        os.environ["CREWAGENT_HOME"] = str(scratch / "home")
        thread = asyncio.run(record_thread(scratch))
        photograph(page(thread), scratch)
    print(f"{OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
