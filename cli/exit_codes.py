"""The exit codes every `crewagent` command uses, and their table (printed once, by `crewagent --help`)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the work failed: a run failed, or a package or configuration has problems
EXIT_USAGE = 2  # bad input: a wrong option, a path that is not there, a missing setting
EXIT_WAITING = 3  # input ended, or the token budget was reached, while the run is not done
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for any tool whose reader went away

TABLE = """\
exit codes:
  0    done (or left on purpose)
  1    the work failed: the run failed, or the package or configuration has problems
       (validate, pack, import)
  2    usage or bad input: a wrong option, a path that is not there, an output that
       exists (without --force), a package that run or chat cannot use, a run id that
       matches nothing, a missing setting (no model configured, no Slack tokens)
  3    input ended, or the token budget was reached, while the run is not done
  130  stopped with Ctrl-C (the run is saved and can be resumed)
  141  the reader of the output went away (crewagent ... | head)"""

SEE_TABLE = "exit codes: see crewagent --help"
