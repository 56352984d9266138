"""Session outputs → Block Kit messages, built with slack_sdk.models so Slack's limits are checked.

Limits are respected by construction: ≤ 50 blocks per message (long text becomes several
messages), ≤ 25 elements per actions block (longer choice lists become a static select),
75-char button text, 2000-char button values, 3000-char section text.

Each block is serialised (`to_dict()`, which runs slack_sdk's validators) as soon as it is
built, so a message holds the JSON it will send. Serialising costs far more than building
(about 0.1 ms per block, as the validators look up every attribute by name), and many blocks
recur unchanged: the status message's controls and hint on every redraw, agent headers,
footers. Those builders keep the JSON of recent inputs; it is a pure function of the
arguments, so a kept entry can never be out of date.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    Option,
    PlainTextObject,
    StaticSelectElement,
)

from crewagent.core.api.events import RunPhase
from crewagent.core.api.sessions import outputs
from crewagent.core.api.runs import RunSnapshot

from ..base import actions as act
from ..base.actions import ButtonValue, Clicked
from .push_blocks import delivery_blocks
from .next_step_blocks import next_step_blocks
from .feedback_buttons import feedback_block
from .markdown import markdown_messages
from .message import (
    KEPT_BLOCKS,
    MAX_BLOCKS,
    BlockJSON,
    SlackMessage,
    context,
    section,
    serialise,
)
from .mrkdwn import escape, to_mrkdwn, truncate

BUTTON_TEXT_LIMIT = 75
BUTTONS_PER_ACTIONS = 25
SELECT_OPTIONS_LIMIT = 100
OPTION_TEXT_LIMIT = 75
OPTION_VALUE_LIMIT = 150
BLOCK_ID_LIMIT = 255

def actions_block(elements: Sequence[ButtonElement | StaticSelectElement], block_id: str | None = None) -> BlockJSON:
    return serialise(ActionsBlock(block_id=block_id, elements=list(elements)))


def button(label: str, action_id: str, value: ButtonValue, style: str | None = None) -> ButtonElement:
    return ButtonElement(
        text=PlainTextObject(text=truncate(label, BUTTON_TEXT_LIMIT), emoji=True),
        action_id=action_id,
        value=value.encode(),
        style=style,
    )


def choices(
    kind: str,
    labels: Sequence[str],
    values: Sequence[ButtonValue],
    *,
    select_context: ButtonValue,
    option_values: Sequence[str],
    placeholder: str,
) -> list[BlockJSON]:
    """Buttons when they fit in one actions block, else one static select (first 100 options)."""
    if len(labels) <= BUTTONS_PER_ACTIONS:
        elements = [
            button(label, act.action_id(kind, i), value) for i, (label, value) in enumerate(zip(labels, values))
        ]
        return [actions_block(elements)] if elements else []
    options = [
        Option(text=PlainTextObject(text=truncate(label, OPTION_TEXT_LIMIT), emoji=True), value=ov)
        for label, ov in list(zip(labels, option_values))[:SELECT_OPTIONS_LIMIT]
        if len(ov) <= OPTION_VALUE_LIMIT
    ]
    select = StaticSelectElement(
        placeholder=PlainTextObject(text=truncate(placeholder, 150)),
        action_id=act.action_id(f"{kind}_select"),
        options=options,
    )
    block_id = select_context.model_dump_json(exclude_none=True)
    blocks = [actions_block([select], block_id=block_id[:BLOCK_ID_LIMIT])]
    if len(labels) > SELECT_OPTIONS_LIMIT:
        more = f"Showing the first {SELECT_OPTIONS_LIMIT} of {len(labels)}; type a number to pick another."
        blocks.append(context(more))
    return blocks


def agent_label(agent: outputs.AgentCard) -> str:
    return f"{agent.icon} {agent.name}".strip()


# ---- outputs ----------------------------------------------------------------


def agent_header(agent: outputs.AgentCard | None) -> str | None:
    return f"{escape(agent_label(agent))} · {escape(agent.title)}" if agent else None


def reply(text: str, agent: outputs.AgentCard | None = None) -> list[SlackMessage]:
    return markdown_messages(text, header=agent_header(agent))


def notice(text: str, level: str = "info") -> SlackMessage:
    icon = ":warning: " if level == "warning" else ""
    return SlackMessage(text=text, blocks=[context(icon + to_mrkdwn(text))])


def error(message: str, *, retry: ButtonValue | None = None) -> SlackMessage:
    """An error, with a Retry button when asking again may work."""
    if retry is None:
        return SlackMessage(text=message, blocks=[section(":warning: " + to_mrkdwn(message))])
    text = f":warning: {to_mrkdwn(message)}\nPress *Retry* to ask again."
    again = button("Retry", act.action_id(act.CONTROL, "retry"), retry, "primary")
    return SlackMessage(text=message, blocks=[section(text), actions_block([again])])


def agent_picker(text: str, agents: Sequence[outputs.AgentCard], *, key: str, epoch: int) -> list[SlackMessage]:
    labels = [truncate(f"{a.icon} {a.name} — {a.title}".strip(), BUTTON_TEXT_LIMIT) for a in agents]
    values = [ButtonValue(s=key, e=epoch, a=a.id) for a in agents]
    blocks = [section(to_mrkdwn(text))]
    blocks += choices(
        act.AGENT,
        labels,
        values,
        select_context=ButtonValue(s=key, e=epoch),
        option_values=[a.id for a in agents],
        placeholder="Pick an agent",
    )
    return [SlackMessage(text=text, blocks=blocks)]


def menu(
    text: str, items: Sequence[outputs.MenuEntry], *, key: str, epoch: int, agent: outputs.AgentCard | None = None, footer: str = ""
) -> list[SlackMessage]:
    """A persona greeting or clarify question followed by `[n] description` choices."""
    messages = reply(text, agent) if text.strip() else [SlackMessage(text="Menu", blocks=[])]
    last = messages[-1]
    usable = [item for item in items if not item.unavailable]
    labels = [f"[{item.index}] {item.label}" for item in usable]
    values = [ButtonValue(s=key, e=epoch, n=item.index, a=agent.id if agent else None) for item in usable]
    controls = choices(
        act.MENU,
        labels,
        values,
        select_context=ButtonValue(s=key, e=epoch, a=agent.id if agent else None),
        option_values=[str(item.index) for item in usable],
        placeholder="Pick a menu item",
    )
    unavailable = [item for item in items if item.unavailable]
    if unavailable:
        lines = [f"~[{item.index}] {escape(item.label)}~ — {escape(item.unavailable or '')}" for item in unavailable]
        controls.append(context("\n".join(lines)))
    if footer:
        controls.append(context(footer))
    if len(last.blocks) + len(controls) > MAX_BLOCKS:
        messages.append(SlackMessage(text="Menu", blocks=controls))
    else:
        last.blocks.extend(controls)
    return messages


# ---- run status ---------------------------------------------------------------

PHASE_LABELS = {
    RunPhase.RUNNING: ":hourglass_flowing_sand: Running",
    RunPhase.WAITING_USER: ":speech_balloon: Waiting for your reply",
    RunPhase.COMPLETED: ":white_check_mark: Completed",
    RunPhase.FAILED: ":x: Failed",
}


def phase_label(snapshot: RunSnapshot, *, queued: bool = False) -> str:
    if queued:
        return ":clock3: Queued — waiting for a free slot"
    if snapshot.paused and snapshot.phase != RunPhase.RUNNING:
        return ":double_vertical_bar: Paused"
    return PHASE_LABELS.get(snapshot.phase, str(snapshot.phase.value))


def controls_for(snapshot: RunSnapshot, *, queued: bool = False) -> list[str]:
    """The control buttons that make sense in this phase."""
    if queued:
        return []
    if snapshot.phase == RunPhase.RUNNING:
        return ["pause", "stop"]
    if snapshot.phase == RunPhase.FAILED:
        return ["retry"]
    if snapshot.phase == RunPhase.WAITING_USER and snapshot.paused:
        return ["resume"]
    return []


def status_controls(snapshot: RunSnapshot, *, queued: bool = False) -> list[str]:
    """The buttons on the status message: a failed run's Retry is on its one failure message, not here too."""
    return [] if snapshot.phase == RunPhase.FAILED else controls_for(snapshot, queued=queued)


CONTROL_LABELS = {"pause": "Pause", "stop": "Stop", "resume": "Resume", "retry": "Retry", "status": "Status"}
CONTROL_STYLES = {"stop": "danger", "resume": "primary", "retry": "primary"}
STATUS_HINT = "Type `*pause` or `*stop` in this thread to interrupt."


@lru_cache(maxsize=KEPT_BLOCKS)
def control_buttons(key: str, run_id: str, names: tuple[str, ...]) -> BlockJSON:
    """The status message's buttons; the same on every redraw of a run in one phase."""
    values = {n: ButtonValue(s=key, r=run_id, x=n) for n in names}
    return actions_block(
        [button(CONTROL_LABELS[n], act.action_id(act.CONTROL, n), values[n], CONTROL_STYLES.get(n)) for n in names]
    )


def nested_line(chain: Sequence[RunSnapshot]) -> str:
    """`Sub-workflow: Plan a Feature › Party Mode — Step: Voices — Winston (Architect) · 1/3`."""
    working = chain[-1]
    names = " › ".join(f"*{escape(s.workflow_name)}*" for s in chain)
    step = f" — Step: *{escape(working.current_node_title)}*" if working.current_node_title else ""
    return (f"Sub-workflow: {names}{step} — {escape(working.agent_name)} · "
            f"{working.progress(unit='')}")


def status(
    snapshot: RunSnapshot, *, key: str, queued: bool = False, working: bool = False, note: str | None = None
) -> SlackMessage:
    """The one run status message of a thread, redrawn in place as the run moves."""
    head = f"*{escape(snapshot.workflow_name)}* · {phase_label(snapshot, queued=queued)}"
    if working and snapshot.phase == RunPhase.RUNNING and not queued:
        head += " _(working…)_"
    lines = [head]
    chain = snapshot.chain()
    if len(chain) > 1:
        lines.append(nested_line(chain))
    elif snapshot.current_node_title:
        lines.append(f"Step: *{escape(snapshot.current_node_title)}* — {escape(snapshot.agent_name)}")
    lines.append(f"Progress: {snapshot.progress()}")
    if snapshot.artifacts and snapshot.phase != RunPhase.COMPLETED:
        shown = ", ".join(f"`{escape(a)}`" for a in snapshot.artifacts[:10])
        more = f" and {len(snapshot.artifacts) - 10} more" if len(snapshot.artifacts) > 10 else ""
        lines.append(f"Artifacts: {shown}{more}")
    if note and snapshot.phase == RunPhase.RUNNING:
        lines.append(f":repeat: {escape(note)}")
    if snapshot.phase == RunPhase.FAILED:
        lines.append("What happened, and a Retry button, are in the newest message of this thread.")
    elif snapshot.error and snapshot.error.code == "RUN_TOKEN_BUDGET":
        lines.append(f"Reason: {to_mrkdwn(snapshot.error.message)}")
    blocks = [section("\n".join(lines))]
    names = status_controls(snapshot, queued=queued)
    if names:
        blocks.append(control_buttons(key, snapshot.run_id, tuple(names)))
    if snapshot.phase == RunPhase.RUNNING and not queued:
        blocks.append(context(STATUS_HINT))
    fallback = f"{snapshot.workflow_name}: {phase_label(snapshot, queued=queued)}"
    return SlackMessage(text=fallback, blocks=blocks)


def completion(snapshot: RunSnapshot, *, key: str) -> SlackMessage:
    """Posted once when a run completes: its artifacts, listed once, and a way to post one here."""
    blocks: list[BlockJSON] = [section(f":white_check_mark: *{escape(snapshot.workflow_name)}* completed.")]
    blocks += artifact_blocks(snapshot, key=key)
    blocks += usage_blocks(snapshot)
    blocks.extend(delivery_blocks(snapshot, key=key))
    blocks.extend(next_step_blocks(snapshot, key=key))
    blocks.append(feedback_block(key, snapshot.run_id))
    blocks.append(
        context("You can keep chatting in this thread; changes to the finished run ask for confirmation first.")
    )
    return SlackMessage(text=f"{snapshot.workflow_name} completed", blocks=blocks)


def usage_blocks(snapshot: RunSnapshot) -> list[BlockJSON]:
    """"N model calls · T tokens" under a completed run (nothing when the run made no call)."""
    if not snapshot.usage.llm_calls:
        return []
    return [context(snapshot.usage.line())]


ARTIFACT_FOLDERS_SHOWN = 12  # folder sections in the completion message
ARTIFACT_NAMES_PER_FOLDER = 12


def artifact_blocks(snapshot: RunSnapshot, *, key: str) -> list[BlockJSON]:
    """The run's artifacts grouped by folder, with "and N more" instead of a silent cut, and a select
    that posts the chosen file into the thread (options are indices into the run's artifact list)."""
    paths = snapshot.artifacts
    if not paths:
        return [context("No artifacts were recorded.")]
    folders: dict[str, list[str]] = {}
    grouped: dict[str, list[int]] = {}  # indices into `paths`, folder by folder: the menu's order
    for index, path in enumerate(paths):
        folder, _, name = path.rpartition("/")
        folders.setdefault(folder, []).append(name)
        grouped.setdefault(folder, []).append(index)
    count = len(paths)
    blocks = [context(f"{count} artifact{'s' if count != 1 else ''} written in the project:")]
    shown_folders = list(folders.items())[:ARTIFACT_FOLDERS_SHOWN]
    for folder, names in shown_folders:
        listed = ", ".join(f"`{escape(n)}`" for n in names[:ARTIFACT_NAMES_PER_FOLDER])
        if len(names) > ARTIFACT_NAMES_PER_FOLDER:
            listed += f" and {len(names) - ARTIFACT_NAMES_PER_FOLDER} more"
        blocks.append(section(f"*{escape(folder or '(project root)')}/*\n{listed}"))
    hidden = sum(len(names) for _, names in list(folders.items())[ARTIFACT_FOLDERS_SHOWN:])
    if hidden:
        others = len(folders) - ARTIFACT_FOLDERS_SHOWN
        blocks.append(context(f"… and {hidden} more in {others} other folder{'s' if others != 1 else ''}."))
    order = [index for indices in grouped.values() for index in indices][:SELECT_OPTIONS_LIMIT]
    options = [Option(text=PlainTextObject(text=_tail(paths[i], OPTION_TEXT_LIMIT)), value=str(i)) for i in order]
    select = StaticSelectElement(
        placeholder=PlainTextObject(text="Post a file in this thread…"),
        action_id=act.action_id(act.ARTIFACT_SELECT),
        options=options,
    )
    block_id = ButtonValue(s=key, r=snapshot.run_id).model_dump_json(exclude_none=True)
    if len(block_id) <= BLOCK_ID_LIMIT:
        blocks.append(actions_block([select], block_id=block_id))
    if count > SELECT_OPTIONS_LIMIT:
        blocks.append(context(f"The menu offers the first {SELECT_OPTIONS_LIMIT}; open the others in the project."))
    return blocks


def _tail(path: str, limit: int) -> str:
    """A path that fits `limit` characters, keeping its end (the file name) readable."""
    return path if len(path) <= limit else "…" + path[-(limit - 1):]


def settled(clicked: Clicked, outcome: str) -> SlackMessage:
    """A clicked message with its buttons and selects removed and the outcome said in their place."""
    kept: list[BlockJSON] = []
    for block in clicked.blocks:
        if block.get("type") == "actions":
            continue
        if isinstance(block.get("accessory"), dict):
            block = {k: v for k, v in block.items() if k != "accessory"}
        kept.append(block)
    kept = kept[: MAX_BLOCKS - 1]
    kept.append(context(f":white_check_mark: {outcome}"))
    return SlackMessage(text=clicked.text or outcome, blocks=kept)


def resume_offer(*, key: str, run_id: str, taken_over: bool = False) -> SlackMessage:
    """After a restart (or a takeover from another replica), when runs are not resumed automatically."""
    why = "This run stopped while it was working" if taken_over else "The bot restarted while this run was working"
    text = f"{why}. Press *Resume* to continue where it stopped."
    resume = button("Resume", act.action_id(act.CONTROL, "resume"), ButtonValue(s=key, r=run_id, x="resume"), "primary")
    return SlackMessage(text=text, blocks=[section(text), actions_block([resume])])


def failure(snapshot: RunSnapshot, *, key: str, message: str | None = None) -> SlackMessage:
    """Posted once when a run fails: what happened (the session's own wording if given) and a Retry button."""
    reason = message or (snapshot.error.message if snapshot.error else "The run stopped unexpectedly.")
    text = f":x: *{escape(snapshot.workflow_name)}* failed: {to_mrkdwn(reason)}"
    if message is None:
        text += "\nPress *Retry* to continue from where it stopped."
    value = ButtonValue(s=key, r=snapshot.run_id, x="retry")
    retry = button("Retry", act.action_id(act.CONTROL, "retry"), value, "primary")
    return SlackMessage(text=f"{snapshot.workflow_name} failed", blocks=[section(text), actions_block([retry])])
