"""`--config crewagent.yml` for `crewagent run` and `chat`: model, tool policy and MCP servers, as `serve` reads them."""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Iterator
from contextlib import contextmanager

from crewagent.bot.config import FileConfig, terminal_config, tool_policy_of
from crewagent.core.api.runs import TERMINAL_CHANNEL, EngineSettings, LLMClient, LLMSettings, UsageMeter, attributed, tracing_from_env
from crewagent.core.api.stores import RuntimeStore
from crewagent.core.api.tools import ToolHost

from .paths import existing_path


def file_config(args: argparse.Namespace) -> FileConfig:
    """The file `--config` names (checked, MCP keys included), or the defaults without one."""
    path = getattr(args, "config", None)
    return terminal_config(existing_path(path, option="--config")) if path else FileConfig()


def llm_settings(cfg: FileConfig) -> LLMSettings:
    return LLMSettings.from_env(
        model=cfg.models.default if cfg.models else cfg.model,  # `*model` may pick another of `models.allowed`
        timeout=cfg.llm.timeout_seconds, max_retries=cfg.llm.max_retries, stream=cfg.llm.stream,
        operator_reads_errors=True,  # the person at the terminal runs it and can fix the settings
    )


def with_tool_policy(settings: EngineSettings, cfg: FileConfig) -> EngineSettings:
    return settings.model_copy(update={"system_policy": tool_policy_of(cfg)})


def tool_host(cfg: FileConfig, store: RuntimeStore) -> ToolHost:
    """The tools of this terminal session: built-in ones and the configured MCP servers (ended by close())."""
    return ToolHost.with_servers(cfg.mcp_servers, store.home)


def metered(llm: LLMClient, store: RuntimeStore) -> LLMClient:
    """The client with each call's usage booked in the store's operator log (`crewagent usage`), and traced
    when an OTLP endpoint is configured."""
    llm.watchers.append(UsageMeter(store.operator_log))
    tracing = tracing_from_env()  # OTEL_EXPORTER_OTLP_ENDPOINT: model and tool calls as spans
    if tracing is not None:
        llm.watchers.append(tracing.model_call)
        store.audit_listeners.append(tracing.audited)
    return llm


@contextmanager
def as_terminal_user() -> Iterator[None]:
    """What this terminal session spends and decides is booked to its login name, in the channel `terminal`."""
    try:
        person = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        person = "terminal"
    with attributed(person=person, channel=TERMINAL_CHANNEL):
        yield
