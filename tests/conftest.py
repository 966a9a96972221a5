"""Test configuration: strict JAX (no silent rank or dtype promotion) and 4 fake CPU devices."""

import os

# Must happen before jax is imported anywhere: multi-worker code is tested on fake CPU devices.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
