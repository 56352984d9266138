"""The cyclic GC policy of a serving process (see SERVER_GC_THRESHOLDS for the measured reason)."""

from __future__ import annotations

import gc

from crewagent.bot.serve.heap import SERVER_GC_THRESHOLDS, freeze_startup_heap


def test_a_serving_process_keeps_its_start_up_heap_out_of_gc_and_collects_young_objects_less_often() -> None:
    before = gc.get_threshold()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == SERVER_GC_THRESHOLDS and SERVER_GC_THRESHOLDS[0] > before[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
