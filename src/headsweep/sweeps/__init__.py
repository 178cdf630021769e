"""Sweeps: the specs in sweeps/, the jobs they plan, and launching, resuming and syncing them."""
