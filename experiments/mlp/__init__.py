"""MLP studies on small data sets: ``python -m experiments.mlp.studies STUDY``."""
