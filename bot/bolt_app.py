"""The Bolt app, with the bot's own message edits dropped at the door.

Every chat.update and finished stream the bot makes comes back as a `message_changed` event. Bolt
would authorize it (a token lookup) and run every listener's matchers before ignoring it; with a
run's plan edited every second or two that is most of the events a busy bot receives. They are
recognised by the app id on the changed message and answered with 200 before any of that.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import AsyncSingleTeamAuthorization
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

EDIT_SUBTYPES = frozenset({"message_changed", "message_deleted"})


def is_own_edit(body: dict[str, Any]) -> bool:
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, dict) or event.get("type") != "message":
        return False
    if event.get("subtype") not in EDIT_SUBTYPES:
        return False
    app_id = body.get("api_app_id")
    message = event.get("message") or event.get("previous_message") or {}
    return bool(app_id) and isinstance(message, dict) and message.get("app_id") == app_id


class CrewBoltApp(AsyncApp):
    own_edits_dropped = 0  # for the log and the benchmarks

    async def async_dispatch(self, req: AsyncBoltRequest) -> BoltResponse:
        if isinstance(req.body, dict) and is_own_edit(req.body):
            self.own_edits_dropped += 1
            return BoltResponse(status=200, body="")
        return await super().async_dispatch(req)

    def remember_identity(self, auth_test: Any) -> None:
        """Hand Bolt the bot's auth.test answer from start-up. Bolt otherwise asks Slack on the first
        event, and if the Web API is down just then it answers that event with a 200 and drops it."""
        for middleware in self._async_middleware_list:
            if isinstance(middleware, AsyncSingleTeamAuthorization) and middleware.auth_test_result is None:
                middleware.auth_test_result = auth_test
