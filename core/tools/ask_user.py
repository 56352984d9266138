"""ui_ask_user: a validated widget payload; the engine renders it and the pump stops there."""

from __future__ import annotations

import json

from .args import WidgetPayload
from .base import ToolContext, ToolOutcome, ok


async def ask_user(args: WidgetPayload, ctx: ToolContext) -> ToolOutcome:
    payload = args.payload()
    block = "```widget\n" + json.dumps(payload, ensure_ascii=False) + "\n```"
    return ToolOutcome(ok(widgetId=args.widgetId, widgetBlock=block), widget=payload)
