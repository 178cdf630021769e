"""One training run: the Lightning module, its callbacks and checks, the run directory, evaluation."""
