"""Speed measurements (python -m headsweep.bench): training, the attention layer, decoding, each against its
baseline timed in the same run."""
