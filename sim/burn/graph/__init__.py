"""burn-autodiff ``graph/``: nodes and their ref counts (``node``), steps (``step``), tape
validation (``traversal``), runs of identical dead nodes (``runs``) and the nodes a graph's
last backward found useful (``settled``)."""
