"""Runs: the engine, its settings, the run manager and records, histories and the model client."""

from __future__ import annotations

from ..model.choice import ModelChoice
from ..model.client import LLMClient, LLMSettings
from ..run.engine import Engine, EngineSettings, PumpResult
from ..store.history import History
from ..store.run_manager import RunManager
from ..store.runs_model import ModelSpan, RunRecord, RunSnapshot

__all__ = [
    "Engine", "EngineSettings", "History", "LLMClient", "LLMSettings", "ModelChoice", "ModelSpan", "PumpResult",
    "RunManager", "RunRecord", "RunSnapshot",
]
