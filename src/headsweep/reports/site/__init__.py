"""The site around the pages: the index (index.py) with its table of every experiment (experiments.py), the
questions every page answers (questions.py), and the browser check of every page (check.py, `make report-check`)."""
