"""Image studies (channel IST, ResIST): ``python -m experiments.images.studies STUDY``."""
