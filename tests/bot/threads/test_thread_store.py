"""How long the embedded bot remembers a handled Slack delivery: as long as a redelivery could arrive,
and as long as the event it guards is still kept to be run again; never cut off by age alone."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from crewagent.bot.threads.store import ThreadStore

LONG_AGO = 7 * 3600.0  # past the window, and past the fixed six hours claims used to live


async def test_a_claim_lives_while_its_event_is_kept_and_while_a_redelivery_could_arrive(tmp_path: Path) -> None:
    store = ThreadStore(tmp_path, redelivery_window=3600)
    await store.open()
    try:
        for key in ("ev:kept", "ev:done", "ev:recent"):
            assert await store.claim([key])
        then = time.time() - LONG_AGO

        def age() -> None:
            for key in ("ev:kept", "ev:done"):
                store.seen_db[key] = then

        await asyncio.to_thread(age)
        assert not await store.claim(["ev:done"]), "age alone never frees a claim"
        assert await store.prune_seen(frozenset({"ev:kept"})) == 1  # the journal still holds ev:kept's event
        assert await store.seen(["ev:kept"]), "its event will run again: the claim must still be found"
        assert await store.seen(["ev:recent"]), "a redelivery of it could still arrive"
        assert not await store.seen(["ev:done"])
    finally:
        await store.close()
