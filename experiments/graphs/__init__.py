"""GIST studies: ``python -m experiments.graphs.studies STUDY``."""
