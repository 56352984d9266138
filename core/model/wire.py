"""The chat-completions request body as JSON, assembled from parts that were encoded once.

A run sends the same system layers, history and tool specs again with every call; encoding the
whole body each time cost 0.2-0.5 ms of CPU per call, growing with the history. Here a message's
JSON is remembered by its content for the conversation it belongs to, and a tool set is encoded
when it is made, so a call encodes only what is new. The JSON is what `openai`'s own encoder produces (compact, non-ASCII kept).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class ToolSet:
    """Tool specs (OpenAI `tools=[...]`) with their JSON, encoded once when the set is made."""

    specs: tuple[dict[str, Any], ...]
    names: tuple[str, ...]
    json: str

    @classmethod
    def of(cls, specs: Sequence[dict[str, Any]]) -> ToolSet:
        names = tuple(s["function"]["name"] for s in specs)
        return cls(tuple(specs), names, _ENCODER.encode(list(specs)))

    def __len__(self) -> int:  # an empty set sends no `tools`, like an empty list
        return len(self.specs)


class MessageJSON:
    """The JSON of one conversation's messages, remembered by content from one call to the next.

    Only messages made of string keys and string (or None) values are remembered: for those, equal
    keys mean byte-identical JSON, so an entry can never be stale. Tool-call messages (nested, and
    cheap to encode next to their lookup) are encoded each time. What a request did not send is
    forgotten once there are more than SPARE such entries: one cache per conversation (a run keeps
    its own in its History) is as large as that conversation and goes away with it.
    """

    SPARE = 16

    def __init__(self) -> None:
        self._known: dict[tuple[tuple[str, str | None], ...], str] = {}

    def __len__(self) -> int:
        return len(self._known)

    def encode_all(self, messages: Sequence[Message]) -> list[str]:
        texts: list[str] = []
        sent: dict[tuple[tuple[str, str | None], ...], str] = {}
        for message in messages:
            if not all(type(k) is str and (type(v) is str or v is None) for k, v in message.items()):
                texts.append(_ENCODER.encode(message))
                continue
            key = tuple(message.items())
            text = self._known.get(key)
            if text is None:
                text = self._known[key] = _ENCODER.encode(message)
            sent[key] = text
            texts.append(text)
        if len(self._known) > len(sent) + self.SPARE:
            self._known = sent
        return texts


def request_body(
    model: str,
    messages: Sequence[Message],
    tools: ToolSet | Sequence[dict[str, Any]] | None,
    temperature: float | None,
    known: MessageJSON | None = None,
    *,
    stream: bool = False,
    stream_usage: bool = True,
) -> bytes:
    """`{"model", "messages", "tools", "tool_choice": "auto", "temperature"}`; no tools, no tool keys.

    `stream` asks for server-sent chunks, with the token usage in a last chunk of its own unless
    `stream_usage` is False (for endpoints that refuse `stream_options`)."""
    texts = known.encode_all(messages) if known is not None else [_ENCODER.encode(m) for m in messages]
    parts = ['{"model":', _ENCODER.encode(model), ',"messages":[', ",".join(texts), "]"]
    if tools:
        tools_json = tools.json if isinstance(tools, ToolSet) else _ENCODER.encode(list(tools))
        parts += [',"tools":', tools_json, ',"tool_choice":"auto"']
    if temperature is not None:
        parts += [',"temperature":', _ENCODER.encode(temperature)]
    if stream:
        parts.append(',"stream":true,"stream_options":{"include_usage":true}' if stream_usage else ',"stream":true')
    parts.append("}")
    return "".join(parts).encode("utf-8")
