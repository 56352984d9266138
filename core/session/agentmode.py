"""AgentMode: carry out what the CommandRouter resolved, for one agent of one package."""

from __future__ import annotations

from ..base.errors import CrewError
from .outputs import Clarify, Dismissed, ErrorOutput, Notice, ShowMenu
from ..package.models import Agent, Package
from ..tools.policy import effective_policy
from .router import ResolvedCommand, menu_entries
from . import runmode
from .context import Deps, OutputStream, card
from .data import load_data
from .exec_script import script_message
from .model import Session
from .precheck import precheck
from .talk import talk


def menu_output(deps: Deps, agent: Agent, text: str) -> ShowMenu:
    return ShowMenu(agent=card(agent), text=text, items=menu_entries(agent, deps.surface))


def greeting(agent: Agent) -> str:
    """One line in the persona's voice: who this is and what to type next."""
    meta = agent.metadata
    identity = agent.persona.identity.strip().split(". ")[0].rstrip(".")
    if len(identity) > 160:
        identity = identity[:157].rstrip() + "..."
    hint = "Pick a menu item by number or trigger, or just ask me something." if agent.menu else "Ask me anything."
    return f"{meta.icon} {meta.name}, {meta.title}. {identity}. {hint}"


async def dispatch(
    deps: Deps, session: Session, package: Package, agent: Agent, cmd: ResolvedCommand, text: str, out: OutputStream
) -> None:
    """Run one resolved command; expected failures become ErrorOutputs and leave the session as it was."""
    session.clarify = cmd.candidates if cmd.kind == "ClarifyChoice" else []
    try:
        await _dispatch(deps, session, package, agent, cmd, text, out)
    except CrewError as exc:
        await out.put(failed_answer(session, text, exc))


def failed_answer(session: Session, text: str, exc: CrewError) -> ErrorOutput:
    """The error shown for a failed command; a model failure can be retried with the same text."""
    retry = exc.code.startswith("LLM_")
    if retry:
        session.retry_text = text
    return ErrorOutput(code=exc.code, message=exc.message, retry=retry)


async def _dispatch(
    deps: Deps, session: Session, package: Package, agent: Agent, cmd: ResolvedCommand, text: str, out: OutputStream
) -> None:
    kind = cmd.kind
    if kind == "ShowMenu":
        await out.put(menu_output(deps, agent, f"{agent.metadata.icon} {agent.metadata.name}'s menu:"))
    elif kind == "ClarifyChoice":
        await out.put(Clarify(text=_clarify_text(cmd), candidates=cmd.candidates))
    elif kind == "Refused":
        message = cmd.message or "That menu item cannot run."
        await out.put(ErrorOutput(code=cmd.error_code or "UNKNOWN", message=message))
    elif kind == "DismissAgent":
        runmode.leave(session)
        await out.put(Dismissed(text=f"{agent.metadata.name} is dismissed. {deps.pick_again}"))
    elif kind == "ResumeRun":
        await resume_latest(deps, session, package, out)
    elif kind == "StartWorkflow":
        await _start_workflow(deps, session, package, agent, cmd, out)
    elif kind == "ExecScript":
        extra = await _data_messages(deps, package, agent, cmd)
        policy = effective_policy(deps.engine.settings.system_policy, agent)
        script = await script_message(cmd.md_path or "", deps.mounts(package), max_read_bytes=policy.max_read_bytes)
        request = _request(cmd, text)
        await talk(deps, session, package, agent, request, out, mode="script", extra_context=[*extra, script])
    elif kind == "RunAction":
        await _run_action(deps, session, package, agent, cmd, text, out)
    else:  # Chat
        await talk(deps, session, package, agent, text, out, mode="agent")


def _clarify_text(cmd: ResolvedCommand) -> str:
    return f"{cmd.reason}. Which one did you mean? Type its number."


def _request(cmd: ResolvedCommand, text: str) -> str:
    """What the user asked for, as the conversation's USER_INPUT: the extra lines, else the first line."""
    return cmd.details or text.strip().split("\n", 1)[0]


async def _data_messages(deps: Deps, package: Package, agent: Agent, cmd: ResolvedCommand) -> list[str]:
    """A menu item's `data` file is loaded before its handler runs; a failure to load it stops the command."""
    if cmd.data is None:
        return []
    policy = effective_policy(deps.engine.settings.system_policy, agent)
    loaded = await load_data(cmd.data, deps.mounts(package), max_read_bytes=policy.max_read_bytes)
    return [loaded.message()]


async def _start_workflow(
    deps: Deps, session: Session, package: Package, agent: Agent, cmd: ResolvedCommand, out: OutputStream
) -> None:
    workflow_id = cmd.workflow_id or ""
    if cmd.validate_workflow is not None:
        await precheck(package, workflow_id, cmd.validate_workflow, deps.mounts(package))
    extra = await _data_messages(deps, package, agent, cmd)
    await runmode.start_run(
        deps,
        session,
        package,
        agent,
        workflow_id,
        out,
        data_message=extra[0] if extra else None,
        user_input=cmd.details or None,
    )


async def _run_action(
    deps: Deps, session: Session, package: Package, agent: Agent, cmd: ResolvedCommand, text: str, out: OutputStream
) -> None:
    extra = await _data_messages(deps, package, agent, cmd)
    action = cmd.action
    if action is None:  # the router always sets it for RunAction
        raise CrewError("UNKNOWN", "This menu item has no action to run.")
    if action.type == "promptId":
        prompt = agent.prompt(action.value)
        if prompt is None:
            raise CrewError("UNKNOWN_PROMPT_ID", f"{agent.metadata.name} has no prompt '{action.value}'.")
        instruction = f"AGENT_PROMPT #{prompt.id} (menu item: {cmd.item_label})\n{prompt.content}"
    else:
        instruction = (
            f"MENU_ACTION (menu item: {cmd.item_label})\n{action.value}\n"
            "Answer from what you can read; do not change any file."
        )
    request = _request(cmd, text)
    await talk(deps, session, package, agent, request, out, mode="agent", extra_context=[*extra, instruction])


async def resume_latest(deps: Deps, session: Session, package: Package, out: OutputStream) -> None:
    """`run.resume` / `*resume` outside a run: this conversation's last run, else the project's latest."""
    record = None
    if session.last_run_id:
        try:
            record = deps.runs.get(session.last_run_id)
        except CrewError:
            record = None
    if record is None:
        record = deps.runs.latest(deps.project_root, package.id)
    if record is None:
        await out.put(Notice(text="There is no saved run of this package to resume.", level="info"))
        return
    run_package = deps.catalog.package(record.package_id) or package
    await runmode.resume(deps, session, run_package, record, out)
