"""matplotlib for files only: every plot of headsweep is written to a PNG, never shown."""

from __future__ import annotations


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt
