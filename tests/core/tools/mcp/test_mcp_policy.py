"""Who gets which MCP servers, and how results become text (pure functions, no server needed)."""

from __future__ import annotations

import base64

from mcp import types

from crewagent.core.package.models import Agent
from crewagent.core.tools.policy import SystemToolPolicy, effective_policy
from crewagent.core.prompts.composer import render_tool_policy
from crewagent.core.tools.mcp.adapter import result_text
from crewagent.core.tools.mcp.server_config import McpServerConfig, hide_secrets


def _agent(mcp: dict | None) -> Agent:
    data = {"id": "a", "metadata": {"name": "A", "title": "T", "icon": "x"}, "menu": [],
            "persona": {"role": "r", "identity": "i", "communication_style": "c", "principles": ["p"]}}
    if mcp is not None:
        data["tools"] = {"mcp": mcp}
    return Agent.model_validate(data)


def test_listing_servers_turns_mcp_on_and_agents_can_only_narrow_it() -> None:
    servers = ("tracker", "time")
    on = SystemToolPolicy(servers=servers)
    assert effective_policy(on, _agent(None)).mcp_servers == servers
    assert effective_policy(on, None).mcp_servers == servers
    assert effective_policy(on, _agent({"allowedServers": ["time", "unknown"]})).mcp_servers == ("time",)
    assert effective_policy(on, _agent({"enabled": False})).mcp_servers == ()
    off = SystemToolPolicy(servers=servers, mcp_enabled=False)
    assert effective_policy(off, _agent({"enabled": True})).mcp_servers == ()
    assert effective_policy(SystemToolPolicy(), _agent(None)).mcp_servers == ()
    assert "servers" not in SystemToolPolicy(servers=servers).model_dump()  # not a crewagent.yml key


def test_the_tool_policy_text_names_the_servers() -> None:
    policy = effective_policy(SystemToolPolicy(servers=("tracker",)), None)
    assert "- mcp: servers tracker" in render_tool_policy(policy, ["fs_read", "tracker__get"], "run")
    assert "read-only tools only here" in render_tool_policy(policy, ["fs_read"], "agent")
    assert "- mcp: disabled" in render_tool_policy(effective_policy(SystemToolPolicy(), None), [], "run")


def test_results_are_text_with_media_summarised_and_size_capped() -> None:
    image = types.ImageContent(type="image", data=base64.b64encode(b"x" * 300).decode(), mime_type="image/png")
    link = types.ResourceLink(type="resource_link", name="report", uri="file:///r.pdf")
    blob = types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
        uri="file:///b.bin", blob=base64.b64encode(b"\0\1").decode(), mime_type="application/octet-stream"))
    result = types.CallToolResult(content=[types.TextContent(type="text", text="hello"), image, link, blob],
                                  structured_content={"answer": 42})
    text, structured, truncated = result_text(result, 10_000)
    assert text.splitlines()[0] == "hello"
    assert "[image: image/png, 300 bytes, not shown]" in text and "[resource link: report file:///r.pdf]" in text
    assert "[resource file:///b.bin: application/octet-stream, not shown]" in text
    assert structured == {"answer": 42} and not truncated
    big = types.CallToolResult(content=[types.TextContent(type="text", text="é" * 5_000)])
    text, _, truncated = result_text(big, 1_000)
    assert truncated and len(text.encode()) <= 1_000
    echo = types.CallToolResult(content=[types.TextContent(type="text", text="x")], structured_content={"result": "x"})
    assert result_text(echo, 100)[1] is None  # the same thing twice is sent once


def test_variables_come_from_the_environment_and_are_masked() -> None:
    config = McpServerConfig(url="https://h/${PATH_PART}", headers={"Authorization": "Bearer ${TOKEN}"})
    expanded, secrets = config.expanded({"TOKEN": "abc123", "PATH_PART": "mcp"})
    assert expanded.headers["Authorization"] == "Bearer abc123" and expanded.url == "https://h/mcp"
    assert config.headers["Authorization"] == "Bearer ${TOKEN}"  # the configured value keeps the reference
    assert hide_secrets("token abc123 at https://h/mcp", secrets) == "token *** at https://h/***"
