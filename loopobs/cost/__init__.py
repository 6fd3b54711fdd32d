"""Cost and budgets: prices of model calls (:mod:`.pricing`), budget limits and what
was spent (:mod:`.budget`), and the per-run accounting the loop drives
(:mod:`.spending`).

Sits on the contract only; the loop and the adapters use it.
"""
