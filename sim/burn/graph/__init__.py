"""burn-autodiff ``graph/``: nodes and their ref counts (``node``), steps (``step``), tape
validation (``traversal``), and runs of identical dead nodes (``runs``)."""
