"""The inbox on a local SQLite file: kept in arrival order, deduplicated by delivery id at the insert,
a handled row kept for the redelivery window and pruned after it, a waiting one never by age."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.file_inbox import FileInbox
from crewagent.bot.threads.store import open_table

KEY = ThreadKey("T1", "C1", "1700000000.000100")


def message(text: str, ts: str, event_id: str) -> ThreadEvent:
    """A thread reply as the listener makes it: the delivery's event id, then the message's own key."""
    return ThreadEvent(
        kind="text", thread=str(KEY), user="U1", text=text, message_ts=ts, dedupe=[f"ev:{event_id}", f"msg:C1:{ts}"]
    )


def rows(path: Path) -> list[tuple[str, bool]]:
    """(delivery, done) of every row, read the way a new process would (its own connection)."""
    with closing(sqlite3.connect(path)) as db:
        found = db.execute("SELECT delivery, done_at IS NOT NULL FROM crew_inbox ORDER BY seq").fetchall()
    return [(delivery, bool(done)) for delivery, done in found]


async def test_a_redelivered_message_is_queued_once_while_it_waits_and_after_it_was_handled(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = FileInbox(path)
    seq = await inbox.add(message("hello", "1.1", "Ev1"))
    assert seq is not None
    assert await inbox.add(message("hello", "1.1", "Ev1")) is None, "Slack's retry of the same delivery"
    assert await inbox.add(message("<@UBOT> hello", "1.1", "Ev2")) is None, "the app_mention of the same message"
    assert [event.text for _, event, _ in await inbox.waiting()] == ["hello"]

    await inbox.done(None, seq)
    assert await inbox.add(message("hello", "1.1", "Ev1")) is None, "handled, within the redelivery window"
    await inbox.close()
    assert await FileInbox(path).add(message("hello", "1.1", "Ev1")) is None, "after a restart too"
    assert rows(path) == [("msg:C1:1.1", True)]


async def test_a_handled_row_goes_once_its_window_passed_and_a_waiting_one_never_does(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite"
    first = FileInbox(path, redelivery_window=0.0)
    handled = await first.add(message("handled", "1.1", "Ev1"))
    await first.add(message("waiting", "1.2", "Ev2"))
    assert handled is not None
    await first.done(None, handled)
    await first.close()

    later = FileInbox(path, redelivery_window=0.0)  # its first write prunes
    await later.add(message("new", "1.3", "Ev3"))
    assert rows(path) == [("msg:C1:1.2", False), ("msg:C1:1.3", False)]
    assert [event.text for _, event, _ in await later.waiting()] == ["waiting", "new"]
    await later.close()


async def test_a_kept_event_that_cannot_be_read_is_dropped_not_replayed_forever(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = FileInbox(path)
    await inbox.add(message("readable", "1.1", "Ev1"))
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "INSERT INTO crew_inbox (thread_key, delivery, event, queued_at) VALUES (?, 'other', ?, 0)",
            (str(KEY), '{"kind": "unknown"}'),
        )
    kept = await FileInbox(path).waiting()
    assert [event.text for _, event, _ in kept] == ["readable"]
    assert rows(path) == [("msg:C1:1.1", False), ("other", True)]


async def test_events_kept_at_once_get_their_places_in_the_order_they_came(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = FileInbox(path)
    texts = [f"event {n}" for n in range(50)]
    seqs = await asyncio.gather(*(inbox.add(message(text, f"1.{n}", f"Ev{n}")) for n, text in enumerate(texts)))
    assert None not in seqs and seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # type: ignore[type-var]
    await asyncio.gather(*(inbox.done(None, seq) for seq in seqs[::2] if seq is not None))
    assert [event.text for _, event, _ in await inbox.waiting()] == texts[1::2]
    await inbox.close()
    assert [event.text for _, event, _ in await FileInbox(path).waiting()] == texts[1::2]


async def test_what_waits_in_an_earlier_versions_journal_is_taken_over_once(tmp_path: Path) -> None:
    earlier = tmp_path / "pending.sqlite"
    with closing(sqlite3.connect(earlier)) as db, db:
        db.execute("CREATE TABLE journal (seq INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, control TEXT)")
        for n in range(2):
            db.execute("INSERT INTO journal (event) VALUES (?)", (message(f"kept {n}", f"1.{n}", f"Ev{n}").model_dump_json(),))
    seen = open_table(tmp_path / "seen.sqlite", "seen")  # the earlier version had decided "kept 1"
    seen["ev:Ev1"] = 1.0
    seen.close()
    inbox = FileInbox(tmp_path / "inbox.sqlite", earlier=earlier)
    assert [event.text for _, event, _ in await inbox.waiting()] == ["kept 0", "kept 1"]
    assert not earlier.exists()
    assert await inbox.add(message("kept 0", "1.0", "Ev0")) is None, "its redelivery is recognised"
    assert await inbox.seen(["msg:C1:1.1"]) and not await inbox.seen(["ev:Ev0"]), "its claims are carried over"
    await inbox.close()


def claim_rows(path: Path) -> list[tuple[str, bool, bool]]:
    """(delivery, done, claimed) of every row."""
    with closing(sqlite3.connect(path)) as db:
        found = db.execute(
            "SELECT delivery, done_at IS NOT NULL, claimed_at IS NOT NULL FROM crew_inbox ORDER BY seq"
        ).fetchall()
    return [(delivery, bool(done), bool(claimed)) for delivery, done, claimed in found]


async def test_a_claim_finds_its_row_by_any_key_of_the_message_and_holds_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = FileInbox(path)
    assert await inbox.add(message("hello", "1.1", "Ev1")) is not None
    assert await inbox.add(message("<@UBOT> hello", "1.1", "Ev2")) is None  # its mention: one row, one more key
    assert not await inbox.seen(["ev:Ev2"]), "waiting is not decided"
    mention_only = ThreadEvent(kind="text", thread=str(KEY), user="U1", text="hello", dedupe=["ev:Ev2"])
    assert await inbox.claim(mention_only), "the mention's own event id finds the message's row"
    assert not await inbox.claim(message("hello", "1.1", "Ev1")), "decided once, whichever key comes"
    assert await inbox.seen(["ev:Ev1"]) and await inbox.seen(["msg:C1:1.1"])
    await inbox.close()
    again = FileInbox(path)
    assert not await again.claim(message("hello", "1.1", "Ev1")), "a claim here is final: after a restart too"
    await again.close()
    assert claim_rows(path) == [("msg:C1:1.1", False, True)]


async def test_a_claim_lives_while_its_row_waits_and_goes_once_the_window_after_it_is_done_passed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "inbox.sqlite"
    first = FileInbox(path, redelivery_window=0.0)
    kept, handled = message("kept", "1.1", "Ev1"), message("handled", "1.2", "Ev2")
    await first.add(kept)
    handled_seq = await first.add(handled)
    assert handled_seq is not None and await first.claim(kept) and await first.claim(handled)
    await first.done(None, handled_seq)
    await first.close()

    later = FileInbox(path, redelivery_window=0.0)  # its first write prunes
    await later.add(message("new", "1.3", "Ev3"))
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT count(*) FROM crew_inbox_keys WHERE delivery = 'msg:C1:1.2'").fetchone() == (0,)
    assert await later.seen(["ev:Ev1"]), "its event waits: the claim is still found"
    assert not await later.seen(["ev:Ev2"]), "gone with its row"
    await later.close()
    assert claim_rows(path) == [("msg:C1:1.1", False, True), ("msg:C1:1.3", False, False)]


async def test_work_decided_off_the_lane_gets_a_done_row_that_a_redelivery_finds(tmp_path: Path) -> None:
    """A stop of a pumping run is taken at once, never queued: its claim is a row of its own, done."""
    path = tmp_path / "inbox.sqlite"
    inbox = FileInbox(path)
    stop = ThreadEvent(kind="click", thread=str(KEY), user="U1", dedupe=["click:Stop1"])
    assert await inbox.claim(stop, final=True)
    assert not await inbox.claim(stop)
    assert await inbox.add(stop) is None and await inbox.waiting() == []
    await inbox.close()
    assert claim_rows(path) == [("click:Stop1", True, True)]
