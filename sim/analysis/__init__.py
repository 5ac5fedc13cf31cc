"""Analysis of rows: the data schema (``data``), measured against predicted (``compare``),
growth along a run's loop (``growth``), fixes measured on patched burn graded
(``fixes``)."""
