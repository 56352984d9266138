"""`mcp_servers:` in crewagent.yml: the `mcpServers` shape Claude Desktop, VS Code and Cursor use.

`NAME: {command, args, env, cwd}` is a stdio server, `NAME: {url, headers}` a streamable HTTP one
(`type: sse` for a server that only speaks SSE). `${VAR}` in any value comes from the environment
when the server starts; the expanded values are secrets: they never reach a log, a prompt or Slack.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*(_[A-Za-z0-9-]+)*$")  # no "__": it separates server and tool
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_SERVER_NAME = 24  # leaves 38 characters of the 64 an OpenAI function name may have for the tool
DEFAULT_TIMEOUT_SECONDS = 60.0


class McpServerConfig(BaseModel):
    """One MCP server: `command` (stdio, started by the bot) or `url` (streamable HTTP, or SSE with `type: sse`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)

    type: Literal["stdio", "http", "streamable-http", "streamable_http", "sse"] | None = None
    """The transport when it is not clear from command/url: sse for a server that only speaks SSE."""
    command: str | None = None
    """A stdio server: the program the bot starts (and ends with itself)."""
    args: list[str] = Field(default_factory=list)
    """A stdio server's arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """A stdio server's environment; `${VAR}` is read from the bot's environment."""
    cwd: str | None = None
    """A stdio server's working folder."""
    url: str | None = None
    """An HTTP server's address (http:// or https://)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent to the server; `${VAR}` is read from the bot's environment."""
    timeout_seconds: float = Field(default=DEFAULT_TIMEOUT_SECONDS, gt=0)  # each call; start-up gets at least 10 s
    """Seconds each call may take (start-up gets at least 10)."""
    auto_approve: list[str] = Field(default_factory=list)  # tools that change things but need no approval
    """Tools that may change things but run without asking the run's owner."""
    tools: list[str] | None = None  # only these tools are offered (default: all the server lists)
    """Only these tools are offered (default: every tool the server lists)."""

    @field_validator("command", "url")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give command (a stdio server) or url (an HTTP server), not both")
        if self.command is None and self.type == "stdio":
            raise ValueError("type stdio needs a command")
        if self.url is not None and self.type == "stdio":
            raise ValueError("a url is an HTTP server: leave type out or use http / sse")
        if self.url is not None and not _VAR.sub("x", self.url).startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        return self

    @property
    def transport(self) -> Literal["stdio", "http", "sse"]:
        if self.command is not None:
            return "stdio"
        return "sse" if self.type == "sse" else "http"

    @staticmethod
    def problems_of(servers: Mapping[str, McpServerConfig], environ: Mapping[str, str]) -> list[tuple[str, str]]:
        """(server, what is wrong) for each name that cannot name tools and each `${VAR}` the environment
        does not set; values are never shown."""
        problems = [(name, f"invalid server name: {why}") for name in servers if (why := server_name_problem(name))]
        problems += [
            (name, f"${{{var}}} is not set in the environment")
            for name, cfg in servers.items()
            for var in sorted(cfg.variables())
            if not environ.get(var)
        ]
        return problems

    def variables(self) -> set[str]:
        """The `${VAR}` names this server's settings use."""
        found: set[str] = set()
        for text in self._texts():
            found.update(_VAR.findall(text))
        return found

    def _texts(self) -> list[str]:
        values = [self.command or "", self.url or "", self.cwd or "", *self.args]
        return values + list(self.env.values()) + list(self.headers.values())

    def expanded(self, environ: Mapping[str, str] | None = None) -> tuple[McpServerConfig, tuple[str, ...]]:
        """A copy with `${VAR}` replaced, and the replaced values (secrets, scrubbed from any log)."""
        environ = os.environ if environ is None else environ
        secrets: list[str] = []

        def sub(text: str | None) -> str | None:
            if text is None:
                return None

            def one(match: re.Match[str]) -> str:
                value = environ.get(match.group(1), "")
                if value:
                    secrets.append(value)
                return value

            return _VAR.sub(one, text)

        copy = self.model_copy(
            update={
                "command": sub(self.command),
                "url": sub(self.url),
                "cwd": sub(self.cwd),
                "args": [sub(a) or "" for a in self.args],
                "env": {k: sub(v) or "" for k, v in self.env.items()},
                "headers": {k: sub(v) or "" for k, v in self.headers.items()},
            }
        )
        return copy, tuple(sorted(set(secrets), key=len, reverse=True))


def server_name_problem(name: str) -> str | None:
    """Why `name` cannot name a server (its tools are offered as NAME__TOOL), or None."""
    if not SERVER_NAME.match(name):
        return "use letters, digits, '-' and single '_' (tools are offered as NAME__TOOL)"
    if len(name) > MAX_SERVER_NAME:
        return f"at most {MAX_SERVER_NAME} characters (tools are offered as NAME__TOOL, 64 characters in all)"
    return None


def hide_secrets(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every expanded value replaced, for logs and error messages."""
    for secret in secrets:
        if len(secret) >= 3:
            text = text.replace(secret, "***")
    return text
