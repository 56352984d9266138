"""Runs: the engine, its settings, the run manager and records, histories and the model client; who work is
attributed to, what model calls cost (usage, daily budgets) and how they are watched (traces)."""

from __future__ import annotations

from ..base.attribution import TERMINAL_CHANNEL, attributed
from ..base.tracing import tracing_from_env
from ..model.api import CallEnded
from ..model.choice import ModelChoice
from ..model.client import LLMClient, LLMReply, LLMSettings
from ..run.budgets import BudgetCheck, Budgets, stamp
from ..run.engine import Engine, EngineSettings, PumpResult
from ..store.history import History
from ..store.run_manager import RunManager
from ..run.usage_meter import UsageMeter
from ..store.runs_model import ModelSpan, RunRecord, RunSnapshot

__all__ = [
    "Engine", "EngineSettings", "History", "LLMClient", "LLMSettings", "ModelChoice", "ModelSpan", "PumpResult",
    "RunManager", "RunRecord", "RunSnapshot",
    # usage, budgets, attribution, traces
    "TERMINAL_CHANNEL", "BudgetCheck", "Budgets", "CallEnded", "LLMReply", "UsageMeter", "attributed", "stamp",
    "tracing_from_env",
]
