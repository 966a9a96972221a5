"""istjax benchmark suite: ``python -m experiments.benchmarks.run [--quick]`` (see docs/benchmarks.md)."""
