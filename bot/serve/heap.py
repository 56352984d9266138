"""The heap of a serving process: what cyclic GC walks, how often, and what goes back to the OS."""

from __future__ import annotations

import gc

SERVER_GC_THRESHOLDS = (50_000, 50, 100)
"""Cyclic GC thresholds of a serving process: young objects allocated before a collection, then young
collections per middle one and middle collections per full one. With Python's defaults (700, 10, 10)
a busy bot (200 runs at once) collected about 770 times in 15 s, some 2 s of its event loop's CPU,
since each turn allocates thousands of short-lived objects (requests, chunks, payloads) and most
young collections found them still alive and carried them along into the older generations. Waiting
for 50,000 lets most die first: fewer than 10 collections in the same load, about 0.5 s. What is
garbage only through a reference cycle waits longer to be freed: a few MiB at most."""


def freeze_startup_heap() -> None:
    """Keep the start-up heap (modules, SDKs, loaded packages) out of cyclic GC for the process's life,
    and collect the rest less often (SERVER_GC_THRESHOLDS).

    A full collection otherwise walks every one of those objects and pauses both loops for ~100 ms,
    which is most of the ack latency budget. For a long-running server process only (`serve`).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVER_GC_THRESHOLDS)
    _give_back_free_heap()


def _give_back_free_heap() -> None:
    """Return the heap start-up freed (package validation, schema compilation) to the OS, where glibc
    keeps it otherwise: a few MiB of a small process's resident memory. Elsewhere nothing happens."""
    import ctypes  # only for this one call

    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the process's own symbols: libc's with glibc
    except OSError:
        return
    if trim is not None:
        trim(0)
