"""Observers that export: JSONL event log, OpenTelemetry tracing and metrics, Prometheus."""

from loopobs.exporters.jsonl import JsonlRecorder, ReplayError, ReplayStats, replay

__all__ = ["JsonlRecorder", "ReplayError", "ReplayStats", "replay"]
