"""Each model call's tokens, written to the operator log for whoever the call was made for.

A `CallWatcher` on the model client: it reads the attribution (core.base.attribution) when the call
starts, so a call made for a Slack user in a channel, for a run, is booked to all three. The
tokens are the endpoint's own `usage` (streamed calls ask for it with `stream_options`); an
endpoint that reports none books zero tokens, marked `estimated`.
"""

from __future__ import annotations

from ..base.attribution import current
from ..model.api import CallEnded, LLMReply
from ..store.operator_log import OperatorLog, UsageEntry


class UsageMeter:
    def __init__(self, log: OperatorLog) -> None:
        self.operator_log = log

    def __call__(self, model: str) -> CallEnded:
        who = current()

        def ended(reply: LLMReply | None, error: BaseException | None) -> None:
            if reply is None:
                return  # a call that failed or was cancelled returned no usage to book
            usage = reply.usage or {}
            entry = UsageEntry(
                person=who.person,
                channel=who.channel,
                run_id=who.run_id,
                model=model,
                input_tokens=usage.get("prompt_tokens", 0),
                output_tokens=usage.get("completion_tokens", 0),
                cached_tokens=usage.get("cached_tokens", 0),
                estimated=reply.usage is None,
            )
            self.operator_log.add_usage(entry)  # queued: the store writes it off the event loop

        return ended
