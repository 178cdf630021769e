"""The W&B dashboard a user lands in: every stored run as an offline W&B run (export.py), and one W&B report per
question plus a workspace view (views.py), saved where a key and a server are reachable (save.py)."""
