"""Surface-neutral outputs of a session: what any surface (terminal, Slack) renders."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field

from ..base.events import EngineEvent
from ..store.runs_model import RunSnapshot


class AgentCard(BaseModel):
    id: str
    name: str
    title: str
    icon: str


class MenuEntry(BaseModel):
    index: int  # 1-based over visible items
    label: str  # the item's description
    trigger: str | None = None
    unavailable: str | None = None  # why this item cannot be used here, in words for users (None: it can)


class ShowAgents(BaseModel):
    kind: Literal["show_agents"] = "show_agents"
    text: str
    agents: list[AgentCard]


class ShowMenu(BaseModel):
    kind: Literal["show_menu"] = "show_menu"
    agent: AgentCard
    text: str  # greeting or heading
    items: list[MenuEntry]


class Clarify(BaseModel):
    kind: Literal["clarify"] = "clarify"
    text: str
    candidates: list[MenuEntry]


class Reply(BaseModel):
    """Assistant text (agent persona, plain chat, or a run's assistant message)."""

    kind: Literal["reply"] = "reply"
    text: str
    agent: AgentCard | None = None
    run_id: str | None = None


class ReplyDelta(BaseModel):
    """A piece of a Reply while the model is still writing it; the Reply itself follows."""

    kind: Literal["reply_delta"] = "reply_delta"
    text: str
    turn: int  # pieces of one model call share it; a new turn starts a new message
    agent: AgentCard | None = None
    run_id: str | None = None
    restart: bool = False  # the answer so far was cut off and is asked for again: drop what was shown


class RunStarted(BaseModel):
    kind: Literal["run_started"] = "run_started"
    snapshot: RunSnapshot


class RunProgress(BaseModel):
    """An engine event, plus the run snapshot after it, so a status message can be redrawn."""

    kind: Literal["run_progress"] = "run_progress"
    event: EngineEvent
    snapshot: RunSnapshot


class RunStatus(BaseModel):
    kind: Literal["run_status"] = "run_status"
    snapshot: RunSnapshot


class WidgetRequest(BaseModel):
    kind: Literal["widget"] = "widget"
    widget: dict[str, Any]  # ui_ask_user payload: widgetId, type, message, options/actions/schema...
    run_id: str | None = None


class Notice(BaseModel):
    kind: Literal["notice"] = "notice"
    text: str
    level: Literal["info", "warning"] = "info"


class ErrorOutput(BaseModel):
    kind: Literal["error"] = "error"
    code: str
    message: str  # what happened and what to do; no server paths
    retry: bool = False  # asking again may work: a surface offers Retry (agent/chat answers; runs have their own)


class Dismissed(BaseModel):
    kind: Literal["dismissed"] = "dismissed"
    text: str


Output = Annotated[
    Union[
        ShowAgents,
        ShowMenu,
        Clarify,
        Reply,
        ReplyDelta,
        RunStarted,
        RunProgress,
        RunStatus,
        WidgetRequest,
        Notice,
        ErrorOutput,
        Dismissed,
    ],
    Field(discriminator="kind"),
]
