"""Prove the loopback fakes work through the real openai / slack_sdk / Bolt stacks."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest
import pytest_asyncio
from openai import AsyncOpenAI
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler

from tests.support.fakes import APP_TOKEN, BoltHTTPServer, ErrorReply, FakeSlack, Reply, ScriptedLLM, SocketModeServer
from tests.support.fakes.fixtures import fake_slack, scripted_llm  # noqa: F401  (fixtures)
from tests.support.fakes.slack_events import (
    app_mention_event,
    block_actions_payload,
    deliver_event,
    deliver_interaction,
    message_event,
    sign,
    url_verification_body,
    view_submission_payload,
)

SECRET = "test-signing-secret"
TS_PATTERN = re.compile(r"^\d{10}\.\d{6}$")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "fs_read",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]

def _client(llm: ScriptedLLM, **kwargs: Any) -> AsyncOpenAI:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 5.0)
    return AsyncOpenAI(base_url=llm.base_url, api_key="sk-test", **kwargs)


async def _ask(client: AsyncOpenAI, text: str = "hi") -> Any:
    return await client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": text}], tools=TOOLS
    )


# ---- ScriptedLLM ----------------------------------------------------------------


async def test_openai_sdk_receives_scripted_tool_calls_then_text(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.add_reply(tool_calls=[("fs_read", {"path": "docs/a.md"}), ("fs_read", {"path": "b.md"})])
    scripted_llm.add_reply(content="all done")
    async with _client(scripted_llm) as client:
        first = await _ask(client, "read the docs")
        second = await _ask(client, "continue")

    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls or []
    assert [c.id for c in calls] == ["call_1", "call_2"]
    assert all(c.type == "function" and c.function.name == "fs_read" for c in calls)
    assert json.loads(calls[0].function.arguments) == {"path": "docs/a.md"}
    assert first.object == "chat.completion" and first.model == "gpt-test"
    assert first.usage is not None and first.usage.total_tokens > 0

    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "all done"
    assert second.choices[0].message.tool_calls is None

    assert [r["messages"][-1]["content"] for r in scripted_llm.requests] == ["read the docs", "continue"]
    assert scripted_llm.requests[0]["tools"][0]["function"]["name"] == "fs_read"
    scripted_llm.assert_consumed()


async def test_malformed_tool_arguments_arrive_verbatim(scripted_llm: ScriptedLLM) -> None:
    broken = '{"path": "a.md"'
    scripted_llm.add_reply(tool_calls=[("fs_read", broken)])
    async with _client(scripted_llm) as client:
        result = await _ask(client)
    calls = result.choices[0].message.tool_calls or []
    assert calls[0].function.arguments == broken


async def test_sdk_retries_500_then_succeeds(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.add_error(status=500, body="upstream exploded")
    scripted_llm.add_reply(content="recovered")
    started = time.monotonic()
    async with _client(scripted_llm, max_retries=2) as client:
        result = await _ask(client)
    assert result.choices[0].message.content == "recovered"
    assert len(scripted_llm.requests) == 2
    assert time.monotonic() - started < 2.0
    scripted_llm.assert_consumed()


async def test_sdk_retries_429_quickly(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.add_error(status=429)
    scripted_llm.add_error(status=429)
    scripted_llm.add_reply(content="ok")
    started = time.monotonic()
    async with _client(scripted_llm, max_retries=3) as client:
        result = await _ask(client)
    assert result.choices[0].message.content == "ok"
    # retry-after-ms makes the SDK skip its ~0.5s exponential backoff.
    assert time.monotonic() - started < 0.5
    assert len(scripted_llm.requests) == 3


async def test_error_without_retries_surfaces_status_and_body(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.add_error(status=429, body={"error": {"message": "slow down", "type": "rate_limit", "code": "x"}})
    async with _client(scripted_llm) as client:
        with pytest.raises(openai.RateLimitError) as info:
            await _ask(client)
    assert info.value.status_code == 429
    assert "slow down" in str(info.value)


async def test_exhausted_script_fails_loudly_without_retries(scripted_llm: ScriptedLLM) -> None:
    async with _client(scripted_llm, max_retries=3) as client:
        with pytest.raises(openai.InternalServerError, match="script exhausted"):
            await _ask(client)
    assert len(scripted_llm.requests) == 1
    assert len(scripted_llm.exhausted) == 1
    with pytest.raises(AssertionError, match="exhausted"):
        scripted_llm.assert_consumed()


async def test_delay_makes_sdk_time_out_and_retry(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.add_delay(1.5)
    scripted_llm.add_reply(content="too late")
    scripted_llm.add_reply(content="on time")
    async with _client(scripted_llm, max_retries=1, timeout=0.3) as client:
        result = await _ask(client)
    assert result.choices[0].message.content == "on time"
    assert len(scripted_llm.requests) == 2


async def test_responder_default_reply_and_latency() -> None:
    def echo(body: dict[str, Any]) -> Reply:
        return Reply(content="echo: " + body["messages"][-1]["content"])

    async with ScriptedLLM(latency=0.05, default_reply="default") as llm:
        llm.add_responder(echo)
        llm.add_responder(lambda body: ErrorReply(status=503))
        async with _client(llm, max_retries=1) as client:
            started = time.monotonic()
            assert (await _ask(client, "ping")).choices[0].message.content == "echo: ping"
            assert time.monotonic() - started >= 0.05
            # the 503 step is retried and then the script is empty -> default_reply
            assert (await _ask(client)).choices[0].message.content == "default"
            assert (await _ask(client)).choices[0].message.content == "default"
        assert len(llm.requests) == 4
        assert llm.exhausted == []

    async with ScriptedLLM(responder=lambda body: f"n={len(body['messages'])}") as llm:
        async with _client(llm) as client:
            assert (await _ask(client)).choices[0].message.content == "n=1"
            await llm.wait_for_requests(1, timeout=30)


# ---- FakeSlack Web API ------------------------------------------------------------


async def test_web_client_posts_updates_and_deletes_messages(fake_slack: FakeSlack) -> None:
    client = fake_slack.client()
    auth = await client.auth_test()
    assert (auth["user_id"], auth["team_id"], auth["bot_id"]) == ("UBOT", "T1", "BBOT")

    posted = await client.chat_postMessage(
        channel="C1", text="working…", thread_ts="1700000000.000001", blocks=[{"type": "divider"}]
    )
    assert posted["ok"] and posted["channel"] == "C1"
    assert TS_PATTERN.match(posted["ts"])
    assert posted["message"]["thread_ts"] == "1700000000.000001"
    second = await client.chat_postMessage(channel="C1", text="second")
    assert float(second["ts"]) > float(posted["ts"])

    updated = await client.chat_update(channel="C1", ts=posted["ts"], text="done")
    assert updated["text"] == "done" and updated["ts"] == posted["ts"]
    assert fake_slack.messages[("C1", posted["ts"])]["text"] == "done"

    await client.reactions_add(channel="C1", timestamp=posted["ts"], name="eyes")
    with pytest.raises(SlackApiError) as dup:
        await client.reactions_add(channel="C1", timestamp=posted["ts"], name="eyes")
    assert dup.value.response["error"] == "already_reacted"
    await client.reactions_remove(channel="C1", timestamp=posted["ts"], name="eyes")
    assert fake_slack.reactions == set()

    ephemeral = await client.chat_postEphemeral(channel="C1", user="U1", text="psst")
    assert TS_PATTERN.match(ephemeral["message_ts"])
    await client.chat_delete(channel="C1", ts=second["ts"])
    assert ("C1", second["ts"]) not in fake_slack.messages

    post_params = fake_slack.calls_to("chat.postMessage")[0]
    assert post_params["blocks"] == [{"type": "divider"}]
    assert [c.method for c in fake_slack.calls][:3] == ["auth.test", "chat.postMessage", "chat.postMessage"]
    assert all(r.token == "xoxb-fake-bot-token" for r in fake_slack.requests)
    method, params = fake_slack.calls[-1]
    assert (method, params["ts"]) == ("chat.delete", second["ts"])


async def test_web_client_reads_and_misc_methods(fake_slack: FakeSlack) -> None:
    client = fake_slack.client()
    with pytest.raises(SlackApiError) as refused:
        await client.team_info()  # the manifest does not ask for team:read
    assert refused.value.response["error"] == "missing_scope" and refused.value.response["needed"] == "team:read"
    fake_slack.scopes |= {"users:read", "im:read", "channels:history", "team:read"}
    fake_slack.users["U9"] = {"real_name": "Nine", "tz": "Europe/Paris"}
    info = await client.users_info(user="U9")
    assert info["user"]["real_name"] == "Nine" and info["user"]["tz"] == "Europe/Paris"
    channel = await client.conversations_info(channel="D123")
    assert channel["channel"]["is_im"] is True

    view = await client.views_open(trigger_id="123.456", view={"type": "modal", "callback_id": "cfg", "blocks": []})
    assert view["view"]["callback_id"] == "cfg" and view["view"]["id"].startswith("V")
    await client.assistant_threads_setStatus(channel_id="D123", thread_ts="1700000000.000001", status="thinking…")
    assert fake_slack.calls_to("assistant.threads.setStatus")[0]["status"] == "thinking…"

    parent = fake_slack.add_message("C1", "run it")
    await client.chat_postMessage(channel="C1", thread_ts=parent["ts"], text="on it")
    replies = await client.conversations_replies(channel="C1", ts=parent["ts"])
    assert [m["text"] for m in replies["messages"]] == ["run it", "on it"]

    with pytest.raises(SlackApiError) as unknown:
        await client.api_call("chat.teleport")
    assert unknown.value.response["error"] == "unknown_method"

    fake_slack.set_response("team.info", {"ok": True, "team": {"id": "T1"}})
    assert (await client.team_info())["team"]["id"] == "T1"


async def test_files_upload_v2_end_to_end(fake_slack: FakeSlack) -> None:
    client = fake_slack.client()
    result = await client.files_upload_v2(
        channel="C1",
        thread_ts="1700000000.000001",
        content="# report\n",
        filename="report.md",
        title="Report",
        initial_comment="here you go",
    )
    file_id = result["file"]["id"]
    assert result["file"]["title"] == "Report"
    upload = fake_slack.files[file_id]
    assert upload.content == b"# report\n" and upload.completed
    assert (upload.channel, upload.thread_ts, upload.initial_comment) == ("C1", "1700000000.000001", "here you go")
    assert [c.method for c in fake_slack.calls] == [
        "files.getUploadURLExternal",
        "upload",
        "files.completeUploadExternal",
    ]


async def test_injected_failures_and_rate_limit_retry(fake_slack: FakeSlack) -> None:
    plain = fake_slack.client()
    fake_slack.fail_next("chat.postMessage", error="ratelimited", status=429)
    with pytest.raises(SlackApiError) as info:
        await plain.chat_postMessage(channel="C1", text="x")
    assert info.value.response.status_code == 429
    assert info.value.response["error"] == "ratelimited"

    fake_slack.fail_next("chat.update", error="msg_too_long")
    with pytest.raises(SlackApiError) as info2:
        await plain.chat_update(channel="C1", ts="1.1", text="x")
    assert info2.value.response.status_code == 200 and info2.value.response["error"] == "msg_too_long"

    retrying = fake_slack.client(retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=2)])
    fake_slack.fail_next("chat.postMessage", error="ratelimited", status=429)
    posted = await retrying.chat_postMessage(channel="C1", text="eventually")
    assert posted["ok"]
    assert len(fake_slack.calls_to("chat.postMessage")) == 3


async def test_tokens_are_checked(fake_slack: FakeSlack) -> None:
    with pytest.raises(SlackApiError) as wrong:
        await fake_slack.client().apps_connections_open(app_token="xoxb-not-an-app-token")
    assert wrong.value.response["error"] == "not_allowed_token_type"
    opened = await fake_slack.client().apps_connections_open(app_token=APP_TOKEN)
    assert opened["url"].startswith(f"ws://127.0.0.1:{fake_slack.port}/link/?ticket=")
    with pytest.raises(SlackApiError) as missing:
        await fake_slack.client(token=None).chat_postMessage(channel="C1", text="x")  # type: ignore[arg-type]
    assert missing.value.response["error"] == "not_authed"


async def test_wait_for_waits_and_times_out(fake_slack: FakeSlack) -> None:
    client = fake_slack.client()

    async def later() -> None:
        await asyncio.sleep(0.1)
        await client.chat_postMessage(channel="C1", text="first")
        await client.chat_postMessage(channel="C2", text="second")

    task = asyncio.create_task(later())
    params = await fake_slack.wait_for("chat.postMessage", lambda p: p["channel"] == "C2", timeout=3)
    assert params["text"] == "second"
    await task
    with pytest.raises(AssertionError, match="no matching chat.postMessage"):
        await fake_slack.wait_for("chat.postMessage", timeout=0.2, since=len(fake_slack.calls))


async def test_a_held_call_waits_unanswered_until_released_and_is_answered_even_if_its_caller_left(
    fake_slack: FakeSlack,
) -> None:
    client = fake_slack.client()
    held = fake_slack.hold("chat.postMessage", lambda p: p["channel"] == "C2")
    assert (await client.chat_postMessage(channel="C1", text="not held"))["ok"]
    waiting = asyncio.create_task(client.chat_postMessage(channel="C2", text="held"))
    await held.reached.wait()
    assert held.params["text"] == "held" and not waiting.done()
    waiting.cancel()  # the caller gives up while Slack holds its call
    held.release()
    assert (await client.chat_postMessage(channel="C2", text="after"))["ok"]  # a hold is used once
    assert {m["text"] for (channel, _), m in fake_slack.messages.items() if channel == "C2"} == {"held", "after"}


# ---- Bolt over HTTP ---------------------------------------------------------------


def _bolt_app(slack: FakeSlack) -> AsyncApp:
    app = AsyncApp(client=slack.client(), signing_secret=SECRET)

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: Any) -> None:
        await say(text=f"got: {event['text']}", thread_ts=event.get("thread_ts") or event["ts"])

    @app.event("message")
    async def on_message() -> None:
        return None

    @app.action("approve")
    async def on_approve(ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
        await ack()
        await client.chat_postMessage(
            channel=body["channel"]["id"], thread_ts=body["container"].get("thread_ts"), text="approved"
        )
        await respond(text="thanks")

    @app.view("answer")
    async def on_answer(ack: Any, view: dict[str, Any]) -> None:
        value = view["state"]["values"]["q"]["a"]["value"]
        await ack(response_action="errors", errors={"q": f"bad {value} for {view['private_metadata']}"})

    return app


@pytest_asyncio.fixture
async def bolt_http(fake_slack: FakeSlack) -> AsyncIterator[tuple[BoltHTTPServer, aiohttp.ClientSession]]:
    async with BoltHTTPServer(_bolt_app(fake_slack)) as server, aiohttp.ClientSession() as session:
        yield server, session


async def test_bolt_http_signed_app_mention_replies_through_fake(
    fake_slack: FakeSlack, bolt_http: tuple[BoltHTTPServer, aiohttp.ClientSession]
) -> None:
    server, session = bolt_http
    envelope = app_mention_event("<@UBOT> run intake", channel="C7", ts="1700000123.000100")
    status, _ = await deliver_event(session, server.events_url, SECRET, envelope)
    assert status == 200
    reply = await fake_slack.wait_for("chat.postMessage", timeout=3)
    assert reply == {
        "channel": "C7",
        "text": "got: <@UBOT> run intake",
        "thread_ts": "1700000123.000100",
        "team_id": "T1",  # Bolt's per-request client adds the event's team_id
    }
    assert fake_slack.calls_to("auth.test"), "Bolt authorizes through the fake's auth.test"

    status, _ = await deliver_event(session, server.events_url, SECRET, message_event("hi", channel_type="im"))
    assert status == 200


async def test_bolt_http_rejects_unsigned_and_stale_requests(
    fake_slack: FakeSlack, bolt_http: tuple[BoltHTTPServer, aiohttp.ClientSession]
) -> None:
    server, session = bolt_http
    envelope = app_mention_event("<@UBOT> hi")
    status, _ = await deliver_event(session, server.events_url, SECRET, envelope, signed=False)
    assert status == 401
    status, _ = await deliver_event(session, server.events_url, "wrong-secret", envelope)
    assert status == 401
    status, _ = await deliver_event(session, server.events_url, SECRET, envelope, timestamp=int(time.time()) - 600)
    assert status == 401
    await asyncio.sleep(0.1)
    assert fake_slack.calls_to("chat.postMessage") == []


async def test_bolt_http_url_verification_and_retries(
    fake_slack: FakeSlack, bolt_http: tuple[BoltHTTPServer, aiohttp.ClientSession]
) -> None:
    server, session = bolt_http
    status, body = await deliver_event(session, server.events_url, SECRET, url_verification_body("abc"))
    assert (status, json.loads(body)) == (200, {"challenge": "abc"})
    status, _ = await deliver_event(
        session, server.events_url, SECRET, app_mention_event("<@UBOT> again"), retry_num=1
    )
    assert status == 200
    await fake_slack.wait_for("chat.postMessage", timeout=3)


async def test_bolt_http_interactions(
    fake_slack: FakeSlack, bolt_http: tuple[BoltHTTPServer, aiohttp.ClientSession]
) -> None:
    server, session = bolt_http
    payload = block_actions_payload(
        "approve", "yes", channel="C3", thread_ts="1700000000.000001", response_url=fake_slack.response_url()
    )
    status, _ = await deliver_interaction(session, server.events_url, SECRET, payload)
    assert status == 200
    posted = await fake_slack.wait_for("chat.postMessage", timeout=3)
    assert (posted["channel"], posted["thread_ts"], posted["text"]) == ("C3", "1700000000.000001", "approved")
    responded = await fake_slack.wait_for("response_url", timeout=3)
    assert responded["text"] == "thanks"

    submission = view_submission_payload(
        "answer", private_metadata="run-1", values={"q": {"a": {"type": "plain_text_input", "value": "42"}}}
    )
    status, body = await deliver_interaction(session, server.events_url, SECRET, submission)
    assert status == 200
    assert json.loads(body) == {"response_action": "errors", "errors": {"q": "bad 42 for run-1"}}


def test_sign_matches_slack_sdk_verifier() -> None:
    from slack_sdk.signature import SignatureVerifier

    headers = sign(SECRET, '{"a":1}', 1700000000)
    verifier = SignatureVerifier(SECRET, clock=type("C", (), {"now": staticmethod(lambda: 1700000000.0)})())
    assert verifier.is_valid('{"a":1}', headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"])


# ---- Bolt over Socket Mode ---------------------------------------------------------


async def test_socket_mode_handler_receives_acks_and_replies(fake_slack: FakeSlack) -> None:
    app = _bolt_app(fake_slack)
    sm = fake_slack.socket_mode
    handler = AsyncSocketModeHandler(app, app_token=APP_TOKEN)
    try:
        await asyncio.wait_for(handler.connect_async(), timeout=5)
        await sm.wait_connected(timeout=5)
        opened = [r for r in fake_slack.requests if r.method == "apps.connections.open"]
        assert [r.token for r in opened] == [APP_TOKEN]

        envelope = app_mention_event("<@UBOT> via socket", channel="C9", ts="1700000999.000100")
        envelope_id = await sm.send_envelope(type="events_api", payload=envelope)
        assert await sm.wait_ack(envelope_id, timeout=5) == {"envelope_id": envelope_id}
        reply = await fake_slack.wait_for("chat.postMessage", timeout=5)
        assert (reply["channel"], reply["text"]) == ("C9", "got: <@UBOT> via socket")

        submission = view_submission_payload(
            "answer", private_metadata="m", values={"q": {"a": {"type": "plain_text_input", "value": "7"}}}
        )
        envelope_id = await sm.send_envelope(type="interactive", payload=submission)
        ack = await sm.wait_ack(envelope_id, timeout=5)
        assert ack["payload"] == {"response_action": "errors", "errors": {"q": "bad 7 for m"}}

        # Slack periodically asks clients to reconnect; the SDK opens a new URL.
        await sm.send_disconnect()
        await fake_slack.wait_for("apps.connections.open", since=len(fake_slack.calls), timeout=5)
        async with asyncio.timeout(5):
            while sm.connection_count < 2 or not sm.connected:
                await asyncio.sleep(0.02)
        envelope_id = await sm.send_envelope("events_api", app_mention_event("<@UBOT> after reconnect"))
        assert await sm.wait_ack(envelope_id, timeout=5) == {"envelope_id": envelope_id}
    finally:
        await handler.close_async()


async def test_standalone_socket_mode_server_with_raw_websocket() -> None:
    async with SocketModeServer() as sm, aiohttp.ClientSession() as session:
        async with session.ws_connect(sm.issue_url()) as ws:
            hello = await ws.receive_json(timeout=2)
            assert hello["type"] == "hello"
            payload = block_actions_payload("approve", "yes")
            sent = asyncio.create_task(sm.send_envelope("interactive", payload))
            envelope = await ws.receive_json(timeout=2)
            envelope_id = await sent
            assert envelope == {
                "envelope_id": envelope_id,
                "payload": payload,
                "type": "interactive",
                "accepts_response_payload": False,
            }
            await ws.send_json({"envelope_id": envelope_id})
            assert await sm.wait_ack(envelope_id, timeout=2) == {"envelope_id": envelope_id}
        with pytest.raises(TimeoutError):
            await sm.wait_ack("never-sent", timeout=0.1)


async def test_streams_follow_slacks_argument_rules(fake_slack: FakeSlack) -> None:
    client = fake_slack.client()
    parent = fake_slack.add_message("C1", "go")
    with pytest.raises(SlackApiError) as no_recipient:
        await client.chat_startStream(channel="C1", thread_ts=parent["ts"], markdown_text="hi")
    assert no_recipient.value.response["error"] == "missing_recipient_user_id"
    with pytest.raises(SlackApiError) as top_level:
        await client.api_call("chat.startStream", json={"channel": "D1", "markdown_text": "hi"})
    assert top_level.value.response["error"] == "invalid_arguments"

    stream = await client.chat_stream(
        channel="C1", thread_ts=parent["ts"], recipient_user_id="U1", recipient_team_id="T1", buffer_size=1
    )
    await stream.append(markdown_text="**Hel")
    await stream.append(markdown_text="lo**")
    await stream.stop(blocks=[{"type": "divider"}])
    streamed = await fake_slack.wait_for("streamed")
    assert streamed["text"] == "**Hello**" and streamed["blocks"] == [{"type": "divider"}]
    with pytest.raises(SlackApiError) as finished:
        await client.chat_appendStream(channel="C1", ts=streamed["ts"], markdown_text="more")
    assert finished.value.response["error"] == "message_not_in_streaming_state"

    second = await client.chat_startStream(channel="D1", thread_ts=parent["ts"], markdown_text="a")
    fake_slack.stop_stream_by_user("D1", second["ts"])
    with pytest.raises(SlackApiError) as stopped:
        await client.chat_appendStream(channel="D1", ts=second["ts"], markdown_text="b")
    assert stopped.value.response["error"] == "stopped_by_user"


async def test_streams_are_held_to_slacks_length_limits(fake_slack: FakeSlack) -> None:
    """12,000 characters of markdown_text per call, and as many in one streamed message in all (msg_too_long)."""
    client = fake_slack.client()
    parent = fake_slack.add_message("D1", "go")
    with pytest.raises(SlackApiError) as too_long:
        await client.chat_startStream(channel="D1", thread_ts=parent["ts"], markdown_text="x" * 12_001)
    assert too_long.value.response["error"] == "msg_too_long"
    started = await client.chat_startStream(channel="D1", thread_ts=parent["ts"], markdown_text="x" * 8_000)
    await client.chat_appendStream(channel="D1", ts=started["ts"], markdown_text="y" * 4_000)  # 12,000 in all
    for call in (client.chat_appendStream, client.chat_stopStream):
        with pytest.raises(SlackApiError) as past_the_total:
            await call(channel="D1", ts=started["ts"], markdown_text="z")
        assert past_the_total.value.response["error"] == "msg_too_long"
    assert [(c.method, c.params["error"]) for c in fake_slack.refusals] == [
        ("chat.startStream", "msg_too_long"), ("chat.appendStream", "msg_too_long"), ("chat.stopStream", "msg_too_long")
    ]
    await client.chat_stopStream(channel="D1", ts=started["ts"])
    assert fake_slack.streams[("D1", started["ts"])] == "done"


async def test_status_lines_and_prompts_are_checked_and_remembered(fake_slack: FakeSlack) -> None:
    client = fake_slack.client()
    await client.assistant_threads_setStatus(
        channel_id="C1", thread_ts="1.1", status="is working…", loading_messages=["Reading a.md"]
    )
    assert fake_slack.statuses[("C1", "1.1")]["loading_messages"] == ["Reading a.md"]
    await client.assistant_threads_setStatus(channel_id="C1", thread_ts="1.1", status="")
    assert ("C1", "1.1") not in fake_slack.statuses
    with pytest.raises(SlackApiError):
        await client.assistant_threads_setStatus(
            channel_id="C1", thread_ts="1.1", status="x", loading_messages=[str(n) for n in range(11)]
        )
    with pytest.raises(SlackApiError):
        await client.assistant_threads_setSuggestedPrompts(
            channel_id="D1", prompts=[{"title": str(n), "message": "m"} for n in range(5)]
        )
    await client.assistant_threads_setSuggestedPrompts(channel_id="D1", prompts=[{"title": "t", "message": "m"}])


async def test_a_method_the_manifest_does_not_grant_is_refused() -> None:
    async with FakeSlack(scopes={"chat:write"}) as slack:
        client = slack.client()
        await client.chat_postMessage(channel="C1", text="ok")
        with pytest.raises(SlackApiError) as refused:
            await client.assistant_threads_setTitle(channel_id="D1", thread_ts="1.1", title="t")
    assert refused.value.response["error"] == "missing_scope"


async def test_agent_sessions_are_created_named_checked_and_refused_on_demand() -> None:
    async with FakeSlack() as slack:
        client = slack.client()
        await client.agents_sessions_setStatus(channel_id="C1", thread_ts="1.1", status="processing", title="Start")
        await client.agents_sessions_rename(channel_id="C1", thread_ts="1.1", title="Bob — Create Story")
        await client.agents_sessions_setStatus(channel_id="C1", thread_ts="1.1", status="active")
        assert slack.sessions[("C1", "1.1")] == {"title": "Bob — Create Story", "status": "active"}
        with pytest.raises(SlackApiError) as wrong:
            await client.agents_sessions_setStatus(channel_id="C1", thread_ts="1.1", status="is thinking…")
        assert wrong.value.response["error"] == "invalid_arguments"  # an enum, not a status line's prose
        slack.sessions_refused = "not_allowed"
        with pytest.raises(SlackApiError) as refused:
            await client.agents_sessions_rename(channel_id="C1", thread_ts="1.1", title="x")
        assert refused.value.response["error"] == "not_allowed"
        recorded = [method.split(".")[-1] for method, _ in slack.calls if method.startswith("agents.")]
        assert recorded == ["setStatus", "rename", "setStatus", "setStatus", "rename"]  # refused ones too
