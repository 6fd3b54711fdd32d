"""Cost and budgets: prices of model calls (:mod:`.pricing`), budget limits and what
was spent (:mod:`.budget`), and the one budget path every loop runs on
(:mod:`.spending`: ``RunSpending``, and ``BudgetGuard``, which feeds it from events).

Sits on the contract only; the loop and the adapters use it.
"""
