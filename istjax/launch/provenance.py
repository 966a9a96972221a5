"""Which code made a result, and on what machine.

`code_version` asks ``git`` about the repository the ``istjax`` package is imported from: its HEAD and whether any
tracked file differs from it. The driver records it in each run's ``summary.json`` when the run finishes training
(``code``), so a study that reuses a run months later still says which commit trained it; a run trained from a tree
with uncommitted changes reads ``"clean": false``, one trained outside a git checkout ``"commit": null``.
`experiments.report --check` refuses numbers that rest on either.
"""

from __future__ import annotations

import os
import pathlib
import platform
import subprocess
from typing import Any, Optional

__all__ = ["code_version", "machine", "PACKAGE_DIR"]

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]  # the istjax package: its repository is the code's
# What a study writes, not code: a results file or page rewritten by an earlier study of the same session does not
# make the code that trains the next run dirty (git pathspecs, from the repository's root).
RESULTS_NOT_CODE = (":(top,exclude,glob)experiments/**/*.json", ":(top,exclude,glob)experiments/**/*.md",
                    ":(top,exclude,glob)experiments/**/*.png", ":(top,exclude,glob)*.md",
                    ":(top,exclude,glob)docs/**")


def _git(folder: pathlib.Path, *args: str) -> Optional[str]:
    """``git -C folder ARGS``'s stripped output; None when git is missing or fails (not a checkout)."""
    try:
        out = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(folder), *args],  # root in a namespace too
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version(folder: Optional[os.PathLike] = None) -> dict[str, Any]:
    """``{"commit": HEAD's sha or None, "clean": no tracked file differs from HEAD}`` of the git repository holding
    ``folder`` (default: the ``istjax`` package, `PACKAGE_DIR`). Outside a checkout: ``{"commit": None, "clean":
    False}``. Untracked files do not make a tree dirty (run directories, caches), nor edits of what studies write
    (results files, their pages, the docs: `RESULTS_NOT_CODE`); an edit of any other tracked file does."""
    folder = pathlib.Path(folder) if folder is not None else PACKAGE_DIR
    head = _git(folder, "rev-parse", "HEAD")
    if not head:
        return {"commit": None, "clean": False}
    status = _git(folder, "status", "--porcelain", "--untracked-files=no", "--", ".", *RESULTS_NOT_CODE)
    return {"commit": head, "clean": status == ""}


def _cpu() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine() -> dict[str, Any]:
    """What the numbers were measured on: CPU, cores, platform, Python, and (where jax imports) its backend, device
    and version."""
    found = {"cpu": _cpu(), "cores": os.cpu_count(), "platform": platform.platform(),
             "python": platform.python_version()}
    try:
        import jax

        device = jax.devices()[0]
        found.update(backend=device.platform, device=device.device_kind, jax=jax.__version__)
    except Exception:  # noqa: BLE001 -- what the numbers ran on is a note; never fail a run over it
        pass
    return found
