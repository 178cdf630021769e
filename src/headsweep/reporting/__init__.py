"""What the report of a sweep (reports/) and the analysis of a model (analysis/) share: statistics,
markdown and its HTML page, matplotlib. Imports nothing else of headsweep, so both packages import it and
never each other in a loop."""
