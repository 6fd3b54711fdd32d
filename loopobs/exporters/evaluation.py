"""Evaluation results: attach a score (LLM-as-judge, a test, a human) to a run's trace.

:func:`record_evaluation` emits the GenAI conventions' ``gen_ai.evaluation.result``
event — a log record through the OpenTelemetry logs API, in the span context of
what was evaluated, so a trace backend shows it on that span — and records the
score in the ``loopobs.evaluation.score`` histogram. The target is a run id (its
``invoke_agent`` span, found through :mod:`loopobs.contract.trace_links`, also after
the run ended and for runs restored from a checkpoint) or a span (a ``chat``
span, or a span of your own).
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from opentelemetry import _logs as otel_logs
from opentelemetry import metrics, trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

from loopobs.contract import trace_links
from loopobs.exporters import catalog as c
from loopobs.exporters.redaction import Redactor

__all__ = ["record_evaluation"]


def _span_of(target: UUID | Span) -> Span | None:
    if isinstance(target, UUID):
        pair = trace_links.resolve(target)
        if pair is None:
            return None
        return NonRecordingSpan(
            SpanContext(
                int(pair[0], 16),
                int(pair[1], 16),
                is_remote=False,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
        )
    return target if target.get_span_context().is_valid else None


def record_evaluation(
    target: UUID | Span,
    *,
    name: str,
    score: float | None = None,
    label: str | None = None,
    explanation: str | None = None,
    response_id: str | None = None,
    error_type: str | None = None,
    logger_provider: otel_logs.LoggerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    redact: Redactor | None = None,
) -> bool:
    """Emit ``gen_ai.evaluation.result`` for ``target`` and record its score.

    Args:
        target: a run id (the run's ``invoke_agent`` span) or a span.
        name: the evaluation's name (``gen_ai.evaluation.name``, required).
        score: its numeric score, if any (``gen_ai.evaluation.score.value``).
        label: its verdict, if any (``gen_ai.evaluation.score.label``: ``pass``, ``relevant``…).
        explanation: why, in words (may quote content: ``redact`` applies to it).
        response_id: the evaluated model response (``gen_ai.response.id``), when known.
        error_type: set when the evaluation itself failed (``error.type``).
        logger_provider: where the event goes; ``None`` uses the global provider (a
            no-op until the application installs one).
        meter_provider: where the score goes; ``None`` uses the global provider.
        redact: applied to ``explanation`` before it is exported.

    Returns:
        Whether the target's span was found; when not, the event is still emitted,
        without a span context, and the score still recorded.

    Raises:
        ValueError: ``name`` is empty, or neither ``score`` nor ``label`` is given.
    """
    from loopobs._version import __version__

    if not name:
        raise ValueError("an evaluation needs a name")
    if score is None and label is None:
        raise ValueError("an evaluation needs a score or a label")
    span = _span_of(target)
    attributes: dict[str, Any] = {c.GEN_AI_EVALUATION_NAME: name}
    if score is not None:
        attributes[c.GEN_AI_EVALUATION_SCORE_VALUE] = float(score)
    if label is not None:
        attributes[c.GEN_AI_EVALUATION_SCORE_LABEL] = label
    if explanation is not None:
        attributes[c.GEN_AI_EVALUATION_EXPLANATION] = (
            explanation if redact is None else redact(explanation)
        )
    if response_id is not None:
        attributes[c.GEN_AI_RESPONSE_ID] = response_id
    if error_type is not None:
        attributes[c.ERROR_TYPE] = error_type
    logs = logger_provider if logger_provider is not None else otel_logs.get_logger_provider()
    logger = logs.get_logger(c.SCOPE_NAME, __version__, schema_url=c.SCHEMA_URL)
    context = trace.set_span_in_context(span) if span is not None else None
    logger.emit(
        timestamp=time.time_ns(),
        context=context,
        event_name=c.EVENT_EVALUATION_RESULT,
        attributes=attributes,
    )
    if score is not None:
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter(c.SCOPE_NAME, __version__, schema_url=c.SCHEMA_URL)
        spec = c.EVALUATION_SCORE
        histogram = meter.create_histogram(
            spec.name,
            unit=spec.unit,
            description=spec.description,
            explicit_bucket_boundaries_advisory=list(spec.buckets or ()),
        )
        labels = {c.GEN_AI_EVALUATION_NAME: name}
        if label is not None:
            labels[c.GEN_AI_EVALUATION_SCORE_LABEL] = label
        histogram.record(float(score), labels, context=context)
    return span is not None
