"""Theory studies: runs checked against closed forms. A thin main; the studies live in `istjax.theory`.

Usage (each config's docstring says what its plot should show)::

    python -m experiments.theory.main --config=experiments/theory/configs/quadratic.py --workdir=/tmp/theory_quadratic
    python -m experiments.theory.main --config=experiments/theory/configs/two_by_two.py --workdir=/tmp/theory_2x2
    python -m experiments.theory.main --config=experiments/theory/configs/regression.py --workdir=/tmp/theory_reg

Override any field with ``--config.FIELD=VALUE``. Every study writes a PNG and ``results.json`` (the numbers the
plot shows) into the workdir and prints a summary.
"""

from __future__ import annotations

import json
import os

from absl import app, flags
from ml_collections import config_flags

from experiments.theory import plots
from istjax.launch.provenance import code_version

_CONFIG = config_flags.DEFINE_config_file("config", None, "a configs/*.py file", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "where to write the PNG and results.json")
flags.mark_flags_as_required(["config", "workdir"])

STUDIES = {"quadratic": plots.quadratic_study, "two_by_two": plots.two_by_two_study,
           "regression": plots.regression_study}


def main(argv):
    del argv
    config, workdir = _CONFIG.value, _WORKDIR.value
    if config.study not in STUDIES:
        raise app.UsageError(f"config.study={config.study!r}: choose one of {sorted(STUDIES)}.")
    os.makedirs(workdir, exist_ok=True)
    code = code_version()  # the code measured, taken before it runs
    results = STUDIES[config.study](config, workdir)
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump({"code": code, "config": config.to_dict(), "results": results}, f, indent=1, default=float)
    print(json.dumps(results.get("summary", {}), indent=1, default=float))
    print(f"wrote {workdir}/{config.study}.png and {workdir}/results.json")


if __name__ == "__main__":
    app.run(main)
