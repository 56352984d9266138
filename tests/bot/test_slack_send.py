"""The edit sender while its budget is spent: states put meanwhile still go out once it refills."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from crewagent.bot.slack_send import CallBudget, Priority, Send, Sender


async def test_states_put_while_the_budget_is_spent_go_out_when_it_refills_urgent_first() -> None:
    budget = CallBudget(per_minute=1200, burst=3)  # one call every 0.05 s once the burst is spent
    sender = Sender("chat.update", budget=budget, reserve=2)
    sent: list[str] = []
    done = asyncio.Event()

    def call(name: str) -> Send:
        async def send() -> bool:
            sent.append(name)
            if len(sent) == 6:
                done.set()
            return True

        return send

    budget.spend(3)  # spent: nothing goes until it refills
    for name in ("a", "b", "c", "d"):
        sender.put(name, call(name), priority=Priority.BACKGROUND)
    sender.put("later", call("later"), priority=Priority.BACKGROUND, not_before=0.0)
    sender.put("now", call("now"), priority=Priority.URGENT)
    await asyncio.wait_for(done.wait(), 30)
    assert sent[0] == "now" and sorted(sent[1:]) == ["a", "b", "c", "d", "later"]
    assert await sender.idle(5)
    await sender.close()


def _recorder(sent: list[str], wanted: int, done: asyncio.Event) -> Callable[[str], Send]:
    def call(name: str) -> Send:
        async def send() -> bool:
            sent.append(name)
            if len(sent) == wanted:
                done.set()
            return True

        return send

    return call


async def test_each_key_sends_only_its_newest_state_most_urgent_first_and_milestones_in_order() -> None:
    budget = CallBudget(per_minute=1200, burst=3)
    sender = Sender("chat.update", budget=budget)
    sent: list[str] = []
    done = asyncio.Event()
    call = _recorder(sent, 5, done)
    budget.spend(3)  # spent: everything below waits, then goes one call at a time
    sender.put("a", call("a1"))
    sender.put("m", call("m1"), milestone="phase-1")
    sender.put("b", call("b1"), priority=Priority.LIVE)
    sender.put("a", call("a2"))  # replaces a1, keeps a's place in line
    sender.put("m", call("m2"))  # a milestone is never replaced: m2 waits behind m1
    sender.put("c", call("c1"), priority=Priority.URGENT)
    await asyncio.wait_for(done.wait(), 30)
    assert await sender.idle(5)
    assert sent == ["c1", "b1", "a2", "m1", "m2"]
    await sender.close()


class _CountedKey:
    """A thread's key that counts how often the sender looks it up."""

    def __init__(self, name: str) -> None:
        self.name, self.lookups = name, 0

    def __hash__(self) -> int:
        self.lookups += 1
        return hash(self.name)


async def test_a_wake_does_not_weigh_the_keys_still_waiting_for_their_interval() -> None:
    """Hundreds of threads' redraws wait for their interval while a few states go: sending those few must
    not cost a pass over every waiting thread (it was the sender's share of a busy bot's CPU)."""
    sender = Sender("assistant.threads.setStatus", budget=None, interval=60.0)
    sent: list[str] = []
    done = asyncio.Event()
    call = _recorder(sent, 20, done)
    waiting = [_CountedKey(f"thread-{n}") for n in range(300)]
    for key in waiting:
        sender.sent_now(key)  # drawn just now: the next redraw waits a minute
        sender.put(key, call(key.name))
    looked_up = sum(key.lookups for key in waiting)
    for n in range(20):
        sender.put(f"urgent-{n}", call(f"urgent-{n}"), priority=Priority.URGENT)
        await asyncio.sleep(0)  # each its own wake, as puts from different turns are
    await asyncio.wait_for(done.wait(), 30)
    assert sent == [f"urgent-{n}" for n in range(20)]
    assert sum(key.lookups for key in waiting) == looked_up
    await sender.close()
