"""``istjax sample``: text from a trained character-level language model.

::

    istjax sample --workdir=RUN --prompt=TEXT --length=N [--seed=S] [--temperature=T] [--checkpoint=STEP]

Loads the run in ``RUN`` as ``istjax eval`` does (`istjax.launch.restore.restore_run`: the run's own config, its
newest checkpoint that verifies, or ``--checkpoint``), rebuilds the vocabulary from the run's config (its data set's
characters, `istjax.data.text`) and prints the prompt followed by exactly N characters. Each character is drawn from
the softmax of the test-time network's logits over T (default 0.8), the network reading the last ``context``
characters, the window length the run trained on (`istjax.models.transformer.generate`: one jitted step, logits and
draw, over a fixed window). The same seed gives the same text; the checkpoint read goes to stderr, the text alone to
stdout.

Refused in one line, exit code 2, before any text is drawn: N < 1, T not > 0, an empty prompt, a workdir without a
run or a checkpoint that verifies, a run that is not a character-level language model (a transformer on text data:
``data.name='shakespeare'`` or ``'text'``), and a prompt with a character outside the run's vocabulary (naming it).

Example::

    istjax train --config=experiments/configs/shakespeare_transformer.py --workdir=runs/shakespeare
    istjax sample --workdir=runs/shakespeare --prompt=$'ROMEO:\\n' --length=200 --seed=1
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, Optional

from istjax.core.errors import ArgError

__all__ = ["main", "sample_run"]


def _check_request(prompt: str, length: int, temperature: float) -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ArgError("length", length, f"--length={length!r}: the number of characters to generate must be at "
                                         f"least 1;", "e.g. --length=200.")
    if not isinstance(temperature, (int, float)) or not (0 < temperature < math.inf):
        raise ArgError("temperature", temperature, f"--temperature={temperature!r}: must be a number > 0;",
                       "e.g. --temperature=0.8 (lower: likelier characters, higher: more varied).")
    if not isinstance(prompt, str) or not prompt:
        raise ArgError("prompt", prompt, f"--prompt={prompt!r}: the model continues a prompt of at least one "
                                         f"character;", "e.g. --prompt=$'\\n' (a new line) or --prompt='ROMEO:'.")


def sample_run(workdir: str | pathlib.Path, prompt: str, length: int, *, seed: int = 0, temperature: float = 0.8,
               checkpoint: Optional[int] = None) -> tuple[str, dict[str, Any]]:
    """``length`` characters continuing ``prompt`` from the language model trained in ``workdir`` (module
    docstring), and what was read: ``{"checkpoint", "round", "context", "vocabulary"}``.

    Raises:
      ArgError: a bad request (length, temperature, prompt), or a prompt character outside the run's vocabulary.
      ConfigError: no run or no usable checkpoint in ``workdir``, or a run that is not a character-level language
        model.
    """
    import jax

    from istjax.data.text import vocabulary_of
    from istjax.launch.config import ConfigError
    from istjax.launch.restore import restore_run
    from istjax.models.transformer import Transformer, generate

    _check_request(prompt, length, temperature)
    workdir = pathlib.Path(workdir).absolute()
    config, experiment, state, step = restore_run(workdir, checkpoint=checkpoint)
    vocab, model = vocabulary_of(experiment.dataset), experiment.algorithm.task.eval_module
    if vocab is None or not isinstance(model, Transformer):
        raise ConfigError([f"workdir={str(workdir)!r} holds a run of model.name={config.model.name!r} on data.name="
                           f"{config.data.name!r}, not a character-level language model; sample from a run of "
                           f"model.name='transformer' on text (data.name='shakespeare' or 'text')."])
    prompt_ids = vocab.encode(prompt, "--prompt", arg="prompt", vocabulary="run's vocabulary",
                              fix=f"use only the run's characters: {vocab.chars!r}.")
    context = int(experiment.dataset.train_x.shape[1])  # the windows it trained on (at most model.context)
    ids = generate(model, state.params, prompt_ids, length, jax.random.key(int(seed)), float(temperature), context)
    info = {"checkpoint": str(workdir / "checkpoints" / str(step)), "round": int(jax.device_get(state.round)),
            "context": min(context, model.context), "vocabulary": len(vocab)}
    return vocab.decode(ids), info


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="istjax sample", description="Text from a trained character-level language model: prints the prompt and "
        "exactly --length characters after it, drawn from the run's newest checkpoint that verifies (or --checkpoint); "
        "the same --seed gives the same text.",
        epilog="Refused in one line, exit code 2: --length < 1, --temperature not > 0, an empty prompt, a run that is "
               "not a transformer on text, a prompt character outside the run's vocabulary. Example: istjax sample "
               "--workdir=runs/shakespeare --prompt='ROMEO:' --length=200 --seed=1")
    p.add_argument("--workdir", required=True, help="the run directory of an `istjax train` run of a transformer on "
                                                    "text (data.name=shakespeare or text)")
    p.add_argument("--prompt", required=True, help="the text to continue (characters of the run's vocabulary)")
    p.add_argument("--length", type=int, required=True, help="characters to generate after the prompt (>= 1)")
    p.add_argument("--seed", type=int, default=0, help="the draw's seed (default 0): the same seed, the same text")
    p.add_argument("--temperature", type=float, default=0.8,
                   help="softmax temperature (default 0.8): lower draws likelier characters")
    p.add_argument("--checkpoint", type=int, default=None, help="the step to read (default: newest that verifies)")
    return p


def main(argv: Sequence[str]) -> int:
    """``istjax sample`` (``argv`` without the program and subcommand names); returns the exit code."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as e:  # argparse has printed usage or help
        return int(e.code or 0)
    from absl import logging as absl_logging

    from istjax.launch.config import ConfigError

    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        text, info = sample_run(args.workdir, args.prompt, args.length, seed=args.seed,
                                temperature=args.temperature, checkpoint=args.checkpoint)
    except ConfigError as e:
        print(f"istjax sample: {'; '.join(e.problems)}", file=sys.stderr)
        return 2
    except ArgError as e:
        print(f"istjax sample: {e}", file=sys.stderr)
        return 2
    print(f"istjax sample: {args.length} characters from {info['checkpoint']} (round {info['round']}), seed "
          f"{args.seed}, temperature {args.temperature:g}, window {info['context']}", file=sys.stderr)
    sys.stdout.write(args.prompt + text + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
