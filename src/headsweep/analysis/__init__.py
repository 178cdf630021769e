"""Head analysis of a trained model: importance, pruning, roles, attention maps and their pages."""
