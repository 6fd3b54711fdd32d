"""The one-line install hint an adapter gives when its framework is not installed."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(
    adapter: str, package: str, extra: str, cause: ModuleNotFoundError
) -> ImportError:
    """The ``ImportError`` an adapter module raises when ``package`` cannot be imported.

    Use it around the framework import at the top of the adapter module::

        try:
            import langchain_core
        except ModuleNotFoundError as exc:
            raise missing_extra("langchain", "langchain-core", "langchain", exc) from exc

    The message is one line: which adapter, which package is missing, and the
    ``pip install`` command of the extra that brings it.
    """
    missing = cause.name or package
    return ImportError(
        f"loopobs.adapters.{adapter} needs {package} (module {missing!r} is missing): "
        f"pip install 'loopobs[{extra}]'",
        name=missing,
    )
