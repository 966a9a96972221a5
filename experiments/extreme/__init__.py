"""A model no single process can hold (issue 33): runs under an OS-enforced memory limit (`experiments.extreme.limits`),
so that "does not fit" is an observed failure, reported in one line, never a hang."""
