"""`ArgError`: a refusal that names its argument, the value and the fix in the words of the interface called.

A library function refuses bad input with the fix in the Python API's words (``istjax.uniform(pad=True)``); where a
config field sets the same thing, the refusal also carries the command line's (``--config.sampler.name=uniform_pad``),
and the config check reports that one (`ArgError.in_config_terms`), so a researcher is never told to call a Python
function from the command line.
"""

from __future__ import annotations

from typing import Any, Optional, Union

__all__ = ["ArgError", "config_terms"]


class ArgError(ValueError):
    """A `ValueError` whose message is ``problem`` followed by ``fix``.

    Attributes:
      arg: the argument refused (``"num_workers"``, ``"sampler"``), or a tuple of the arguments refused together
        (``("group_sizes", "num_workers", "sampler")``: a width that W does not divide under this sampler). A key of
        a dict argument is ``"samplers.hidden_0"``.
      value: its value.
      problem: what is wrong, in words that hold for every interface.
      fix: how to fix it in the Python API.
      config_fix: how to fix it on the command line (``--config....``), when a config field sets it.
    """

    def __init__(self, arg: Union[str, tuple[str, ...]], value: Any, problem: str, fix: str,
                 config_fix: Optional[str] = None):
        self.arg, self.value, self.problem, self.fix, self.config_fix = arg, value, problem, fix, config_fix
        super().__init__(f"{problem} {fix}".strip())

    @property
    def args_named(self) -> tuple[str, ...]:
        """The arguments refused, first the one the message leads with."""
        return (self.arg,) if isinstance(self.arg, str) else tuple(self.arg)

    def in_config_terms(self) -> str:
        """The message with the command line's fix (the Python one when none was given)."""
        return f"{self.problem} {self.config_fix or self.fix}".strip()


def config_terms(error: BaseException) -> str:
    """``error``'s message in the command line's words: `ArgError.in_config_terms`, else ``str(error)``."""
    return error.in_config_terms() if isinstance(error, ArgError) else str(error)
