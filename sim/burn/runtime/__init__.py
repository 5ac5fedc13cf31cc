"""burn-autodiff ``runtime/``: the locator and client (``graph``), the per-graph server
(``server``), node liveness (``memory_management``)."""
