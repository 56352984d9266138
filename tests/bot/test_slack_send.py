"""The edit sender while its budget is spent: states put meanwhile still go out once it refills."""

from __future__ import annotations

import asyncio

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
