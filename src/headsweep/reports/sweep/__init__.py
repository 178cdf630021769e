"""A sweep's page (`make report`): page.py builds reports/<sweep>.md/.html from its runs (cells.py) and its
sections: the table, the figures, the significance tests, stuck runs, convergence, the learning-rate grid, the
protocol and what is complete."""
