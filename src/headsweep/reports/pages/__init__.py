"""The pages across sweeps, each its own command: Table 3 beside the paper (table3*.py, verdicts.py), explain,
lengths, budget, budgets, and the head analyses compared cell by cell (compare.py)."""
