"""Long-lived conversations: :class:`~loopobs.sessions.session.AgentSession` drives
``AgentLoop`` runs from a bounded queue (:mod:`.session`) and persists them in a
:class:`~loopobs.sessions.stores.SessionStore` (:mod:`.stores`).

Sits above the loop.
"""
