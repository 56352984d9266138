"""Who opened the Home tab lately, as the embedded thread store keeps it: the tab is refreshed only for
them. (Handled deliveries are the inbox's claims: tests/bot/inbox.)"""

from __future__ import annotations

import time
from pathlib import Path

from crewagent.bot.threads.store import ThreadStore


async def test_a_home_viewer_is_known_since_they_opened_the_tab_and_after_a_restart(tmp_path: Path) -> None:
    store = ThreadStore(tmp_path)
    await store.open()
    before = time.time()
    await store.home_opened("U1")
    assert await store.home_viewer("U1", before)
    assert not await store.home_viewer("U2", before)
    await store.close()
    again = ThreadStore(tmp_path)
    await again.open()
    try:
        assert await again.home_viewer("U1", before)
        assert not await again.home_viewer("U1", time.time() + 1), "not since a later time"
    finally:
        await again.close()
