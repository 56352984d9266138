"""Loopback fakes of the LLM API and Slack used by the test suite.

Each fake is a real aiohttp server on 127.0.0.1 with an ephemeral port, used
as an async context manager, so tests exercise the real SDKs end to end.
"""

from .bolt_http import BoltHTTPServer
from .llm_server import Delay, ErrorReply, Reply, ScriptedLLM
from .slack_api import APP_TOKEN, BOT_TOKEN, FakeSlack, RecordedRequest, SlackCall, UploadedFile
from .socket_mode import SocketModeServer

__all__ = [
    "APP_TOKEN",
    "BOT_TOKEN",
    "BoltHTTPServer",
    "Delay",
    "ErrorReply",
    "FakeSlack",
    "RecordedRequest",
    "Reply",
    "ScriptedLLM",
    "SlackCall",
    "SocketModeServer",
    "UploadedFile",
]
