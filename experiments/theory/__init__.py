"""Theory studies: ``python -m experiments.theory.main --config=...``."""
