"""The run index as an appended journal over runs-index.json: what a save costs, and what survives."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from crewagent.core.store.files import RuntimeStore
from crewagent.core.store.run_index import INDEX_FILE, JOURNAL_FILE
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.runs_model import RunRecord

REPO = Path(__file__).resolve().parents[3]

_SAVER = """
import sys
from crewagent.core.store import run_index
from crewagent.core.store.files import RuntimeStore
from crewagent.core.store.runs_model import RunRecord

run_index.COMPACT_AFTER = 1  # compact as often as the index allows: kills land in compactions too
store = RuntimeStore(sys.argv[1])
def record(run_id, n):
    return RunRecord(run_id=run_id, project_id="p", project_root="/p", package_id="k", package_root="/k",
                     workflow_id="w", active_agent_id="a", extra={"n": n})
n = 0
while True:
    store.save_record(record(f"run-{n}", n))
    store.save_record(record("run-0", n))  # an existing run changed: its newest entry must win
    print(n, flush=True)
    n += 1
"""


def _record(run_id: str, **extra: int) -> RunRecord:
    return RunRecord(
        run_id=run_id, project_id="p", project_root="/p", package_id="k", package_root="/k",
        workflow_id="w", active_agent_id="a", extra=extra,
    )


def _bytes_written() -> int:
    """What this process has handed to write calls so far (the kernel's count, whatever the file)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def test_a_save_writes_about_one_entry_however_many_runs_the_home_keeps(tmp_path: Path) -> None:
    """Rewriting the whole index at each save made every save cost more as runs were kept (0.5 ms
    with 200 runs, on the bot's event loop)."""
    store = RuntimeStore(tmp_path / "home")
    for n in range(200):
        store.save_record(_record(f"run-{n}"))
    entry = len(_record("run-199", n=399).model_dump_json())
    before = _bytes_written()
    for n in range(400):
        store.save_record(_record(f"run-{n % 200}", n=n))
    per_save = (_bytes_written() - before) / 400
    assert per_save < 4 * entry  # a line each, and the index folded up once per 256 saves: not 200 entries
    assert RuntimeStore(tmp_path / "home").read_record("run-199").extra == {"n": 399}  # type: ignore[union-attr]


def test_runs_saved_before_a_kill_9_are_all_listed_with_their_newest_entry(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _saver_env()
    for _ in range(3):  # the kill lands somewhere else each time: an append, a compaction, between them
        done = _saves_then_kill_9(_SAVER, home, env, 150)
        records = RuntimeStore(home).read_index()
        assert {f"run-{n}" for n in done} <= records.keys()
        assert records["run-0"].extra["n"] >= done[-1]
    store = RuntimeStore(home)
    store.save_record(_record("after"))  # and saves go on where the killed writer stopped
    assert "after" in RuntimeStore(home).read_index()


def test_an_index_an_earlier_release_wrote_is_read_and_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    old = [_record("old-1"), _record("old-2")]
    lines = [item.model_dump_json() for item in old]
    (home / INDEX_FILE).write_text('{"version": 1, "runs": [\n' + ",\n".join(lines) + "\n]}\n")
    (home / f".{INDEX_FILE}.lock").write_bytes((7).to_bytes(8, "little"))  # its write generation only
    runs = RunManager(RuntimeStore(home))
    assert {r.run_id for r in runs.list()} == {"old-1", "old-2"}

    runs.store.save_record(_record("new"))
    runs.store.save_record(_record("old-1", n=1))
    elsewhere = RunManager(RuntimeStore(home))  # another process on the same home
    assert {r.run_id for r in elsewhere.list()} == {"old-1", "old-2", "new"}
    assert elsewhere.get("old-1").extra == {"n": 1}

    runs.store.save_record(_record("newer"))  # the other process catches up with what was appended
    assert elsewhere.store.read_record("newer") is not None
    runs.store.index.fold()
    assert (home / JOURNAL_FILE).read_text() == ""
    assert {r.run_id for r in elsewhere.list()} == {"old-1", "old-2", "new", "newer"}
    assert elsewhere.get("old-1").extra == {"n": 1}


def test_a_journal_line_cut_short_is_not_a_run_and_is_cut_off_by_the_next_save(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = RuntimeStore(home)
    store.save_record(_record("first"))
    store.save_record(_record("second"))
    with open(home / JOURNAL_FILE, "a") as journal:
        journal.write(_record("torn").model_dump_json()[:40])  # a write that failed half-way
    assert set(RuntimeStore(home).read_index()) == {"first", "second"}
    RuntimeStore(home).save_record(_record("third"))
    assert set(RuntimeStore(home).read_index()) == {"first", "second", "third"}
    assert all(line.endswith("}") for line in (home / JOURNAL_FILE).read_text().splitlines())


def _index_an_earlier_release_reads(home: Path) -> dict[str, dict[str, object]]:
    """runs-index.json alone, parsed whole: all an earlier release (and nothing of the journal) sees."""
    runs = json.loads((home / INDEX_FILE).read_text())["runs"]
    return {item["run_id"]: item for item in runs}


def test_a_clean_close_leaves_every_run_in_runs_index_json_and_an_empty_journal(tmp_path: Path) -> None:
    """An earlier release reads runs-index.json only: runs saved since the last fold were lost to it."""
    home = tmp_path / "home"
    store = RuntimeStore(home)
    for n in range(5):  # far fewer than a fold by the saves themselves needs
        store.save_record(_record(f"run-{n}"))
    store.save_record(_record("run-0", n=1))
    store.close()
    assert (home / JOURNAL_FILE).read_text() == ""
    index = _index_an_earlier_release_reads(home)
    assert set(index) == {f"run-{n}" for n in range(5)}
    assert index["run-0"]["extra"] == {"n": 1}
    RuntimeStore(home).close()  # nothing left to fold: the index is not rewritten
    assert _index_an_earlier_release_reads(home) == index


def test_a_fold_that_fails_at_the_stop_is_logged_and_leaves_the_journal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stop runs after the error a person must see (in `finally`): a fold that cannot be written must not
    take that error's place."""
    home = tmp_path / "home"
    store = RuntimeStore(home)
    store.save_record(_record("run-0"))
    store.save_record(_record("run-1"))
    journal = (home / JOURNAL_FILE).read_text()
    (home / INDEX_FILE).unlink()
    (home / INDEX_FILE).mkdir()  # runs-index.json cannot be read or replaced
    with caplog.at_level(logging.WARNING, logger="crewagent.core.store.files"):
        store.close()
    assert "the run index was not folded at the stop" in caplog.text
    assert (home / JOURNAL_FILE).read_text() == journal


def test_runs_fold_makes_the_index_whole_after_a_kill_9(tmp_path: Path) -> None:
    """No clean stop after a kill -9: the operator's `crewagent runs fold` folds what the journal holds."""
    home = tmp_path / "home"
    env = {**_saver_env(), "CREWAGENT_HOME": str(home)}
    saver_code = _SAVER.replace("run_index.COMPACT_AFTER = 1", "run_index.COMPACT_AFTER = 10_000")
    done = _saves_then_kill_9(saver_code, home, env, 50)
    assert len(_index_an_earlier_release_reads(home)) < len(done)  # the journal holds the rest
    folded = subprocess.run(
        [sys.executable, "-m", "crewagent.cli", "runs", "fold"], env=env, capture_output=True, text=True,
        timeout=120, check=True, start_new_session=True,
    )
    assert "Folded" in folded.stdout
    assert (home / JOURNAL_FILE).read_text() == ""
    index = _index_an_earlier_release_reads(home)
    assert {f"run-{n}" for n in done} <= set(index)
    assert index["run-0"]["extra"]["n"] >= done[-1]


def _saver_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO)]))}


def _saves_then_kill_9(code: str, home: Path, env: dict[str, str], count: int) -> list[int]:
    """Run the saver until it reported `count` saves, then kill -9 its whole group mid-write; what it reported."""
    with subprocess.Popen(
        [sys.executable, "-c", code, str(home)], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,
    ) as saver:
        try:
            assert saver.stdout is not None
            return [int(saver.stdout.readline()) for _ in range(count)]
        finally:
            os.killpg(saver.pid, signal.SIGKILL)
            saver.wait(timeout=60)
