"""The reports read from results/: a sweep's page, the index and site, and the cross-sweep analyses."""
