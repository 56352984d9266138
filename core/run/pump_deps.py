"""What a pump needs from the process, handed over by the engine: stores, the model client,
settings, caches, tools, and a callback to pump a sub-workflow's run.

The pump never sees the `Engine` itself, so the engine can change without the loop knowing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..base.answers import UserInput
from ..model.client import LLMClient, LLMReply
from ..model.wire import ToolSet
from ..package.models import Package
from ..prompts.composer import PromptComposer
from ..store.protocol import RunStore
from ..store.run_manager import RunManager
from ..store.runs_model import RunRecord
from ..tools.base import ToolContext
from ..tools.off_limits import OffLimits
from ..tools.registry import ToolHost
from .engine_model import EngineSettings, EventSink, Intent, PumpResult
from ..store.history import HistoryCache


@dataclass
class PumpControl:
    """Set by Engine.request_pause / request_stop while the pump runs."""

    pause: bool = False
    stop: bool = False
    llm_task: asyncio.Task[LLMReply] | None = None


ChildPump = Callable[[RunRecord, Package, Intent, "UserInput | None", "EventSink | None", PumpControl], Awaitable[PumpResult]]


@dataclass(frozen=True)
class PumpTools:
    """The tools a run calls: their host, the tool set as the model is offered it, and what they may not touch."""

    host: ToolHost
    prepared: Callable[[ToolContext], Awaitable[ToolSet]]
    off_limits: OffLimits = OffLimits()  # what the run's tools and commands may not touch


@dataclass(frozen=True)
class PumpDeps:
    store: RunStore
    runs: RunManager
    llm: LLMClient
    settings: EngineSettings
    histories: HistoryCache
    composer: Callable[[Package], PromptComposer]
    tools: PumpTools
    run_child: ChildPump  # pumps a sub-workflow's run under the caller's control
