"""autodiff-sim: a discrete-event simulator of burn-autodiff 0.22.1's graph bookkeeping."""

__version__ = "0.1.0"
