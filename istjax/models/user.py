"""A researcher's own model class, named by where it lives: ``model.module`` in a config.

``"pkg.mod:Class"`` or ``"path/to/file.py:Class"``, loaded by `istjax.core.user_code` (which also loads
``data.module``): a file needs no ``PYTHONPATH``, a file inside a package is imported as a member of it, and a run
records the spec with the file's absolute path so ``--resume`` and ``istjax eval`` find the class again.

Every failure is a `ValueError` naming ``model.module``, the value and the fix.
"""

from __future__ import annotations

import inspect

import flax.linen as nn

from istjax.core.errors import ArgError
from istjax.core.user_code import Field, absolute, is_file_spec, load_object, spec_of

__all__ = ["load", "is_file_spec", "absolute", "spec_of", "FIELD"]

FIELD = Field("model.module", "ClassName", "flax modules",
              lambda v: inspect.isclass(v) and issubclass(v, nn.Module))


def load(spec: str) -> type[nn.Module]:
    """The ``flax.linen.Module`` subclass ``spec`` names; a ValueError with the fix otherwise (a name the file lacks
    lists the flax modules it defines: `istjax.core.user_code.load_object`)."""
    cls, _ = load_object(spec, FIELD)
    cls_name = spec.rsplit(":", 1)[1]
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise ArgError("module", spec, f"model.module={spec!r}: {cls_name} is a {type(cls).__name__}, not a "
                                       f"flax.linen.Module subclass.", "Name the model's class.")
    return cls
