"""Flax models by name, each providing its own partition rules (logical axis name -> neuron group).

A model is an ordinary ``flax.linen`` module with three methods the library reads:

* ``partition_rules(self) -> {logical axis name: neuron group or None}``;
* ``subnet(self, units) -> module``: the same module at one worker's widths (``units[group]`` slots per group);
* ``__call__(self, x, train=True)`` (and ``eval_module(self)`` when the test-time network differs).

`MODELS` maps a config's ``model.name`` to the module class; `build_model` checks the fields against the class
before anything is built, and `register_model` adds a user's module (see ``docs/architecture.md``).

* ``"mlp"``: `MLP`, the IST paper's MLP with batch-statistics BatchNorm (`istjax.models.mlp`).
* ``"cnn"``: `CNN`, a residual CNN with BatchNorm (running or batch statistics), channels partitioned
  (`istjax.models.cnn`).
* ``"resnet"`` / ``"preact_resnet"``: CIFAR-style ResNets with basic blocks and 1x1 projection shortcuts,
  post- and pre-activation, presets ResNet-18/34/20/56/110, a width multiplier (`istjax.models.resnet`).
* ``"vgg"``: a small VGG with BatchNorm and a width multiplier (`istjax.models.vgg`).
* ``"depth_resnet"``: a pre-activation ResNet whose deep blocks are neuron groups, for ResIST
  (`istjax.models.resist`).
* ``"gcn"`` / ``"graphsage"``: graph networks for GIST, hidden features partitioned, reading the dataset's graph as
  the shared input (`istjax.models.gnn`).
* ``"sparse_mlp"``: `SparseMLP`, extreme multi-label classification on sparse ``(id, value)`` rows through an
  embedding bag, hidden units partitioned, a multi-label loss (`istjax.models.sparse_mlp`).
* ``"transformer"``: `Transformer`, a decoder-only character-level language model, its heads and feed-forward units
  (``split="width"``) or its blocks (``split="depth"``) partitioned (`istjax.models.transformer`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any, Optional

import flax.linen as nn

import istjax.models.user as user
from istjax.core import precision
from istjax.core.errors import ArgError, Code
from istjax.core.registry import Registry, close_matches
from istjax.models.cnn import CNN as CNN
from istjax.models.gnn import GCN as GCN
from istjax.models.gnn import GraphSAGE as GraphSAGE
from istjax.models.mlp import MLP as MLP
from istjax.models.mlp import batch_norm as batch_norm
from istjax.models.resist import DepthResNet as DepthResNet
from istjax.models.resnet import PreActResNet as PreActResNet
from istjax.models.resnet import ResNet as ResNet
from istjax.xmc.loss import LabelWeights
from istjax.models.vgg import VGG as VGG
from istjax.models.transformer import Transformer as Transformer
from istjax.models.sparse_mlp import SparseMLP as SparseMLP

__all__ = ["BUILTIN", "CNN", "DepthResNet", "GCN", "GraphSAGE", "MLP", "MODELS", "PreActResNet", "ResNet", "SparseMLP",
           "Transformer", "VGG",
           "batch_norm", "build_model", "model_class", "model_fields", "model_source", "register_model"]

#: The models by config name (``model.name``): shipped ones and those added with `register_model`.
MODELS: Registry[type[nn.Module]] = Registry(
    "model", field="model.name",
    entries={"mlp": MLP, "cnn": CNN, "resnet": ResNet, "preact_resnet": PreActResNet, "vgg": VGG,
             "depth_resnet": DepthResNet, "gcn": GCN, "graphsage": GraphSAGE, "sparse_mlp": SparseMLP,
             "transformer": Transformer},
    hint="A model of your own: the config field model.module='path/to/file.py:ClassName' (istjax eval of a run "
         "that does not record it: --model-module=path/to/file.py:ClassName), or "
         "istjax.models.register_model(name, Class).")

#: The names of the models istjax ships (a model of your own may not take one).
BUILTIN = frozenset(MODELS.names())  # the models istjax ships

# Fields the library fills in from the data, never from the config.
_FROM_DATA = ("num_classes", "label_weights", "dtype")  # dtype: from compute_dtype
_FLAX_FIELDS = ("parent", "name")


def register_model(name: str, module: type[nn.Module]) -> type[nn.Module]:
    """Makes ``module`` available as ``config.model.name = name``; checks it has what the library reads."""
    missing = [m for m in ("partition_rules", "subnet") if not callable(getattr(module, m, None))]
    if missing:
        raise TypeError(f"register_model({name!r}, {module.__name__}): the module lacks {missing}; a model gives "
                        f"partition_rules(self) (logical axis name -> neuron group) and subnet(self, units) (the "
                        f"module at a worker's widths). See istjax.models.MLP.")
    _check_num_classes_field(module, name)
    return MODELS.register(name, module)


def model_class(name: str, module: str = "") -> type[nn.Module]:
    """The module class ``model.name`` names. With ``module`` (``model.module``: ``"path/file.py:Class"`` or
    ``"pkg.mod:Class"``, `istjax.models.user`) the class is loaded from there and registered under ``name``.

    Raises ValueError (an unknown name lists the known ones) naming the field and the fix.
    """
    if module:
        cls = user.load(module)
        if name in BUILTIN and MODELS.get(name) is not cls:
            raise ArgError("name", name, f"model.name={name!r} is a model istjax ships, but model.module={module!r} "
                                         f"names another class ({cls.__name__});",
                           ("give yours its own name, e.g.", {"name": cls.__name__.lower()}, "."))
        MODELS.register(name, cls)  # the contract is checked when the task is built (istjax.classifier)
        return cls
    return MODELS.get(name)


def model_source(name: str, module: str = "") -> str:
    """What a run records as ``model.module`` so that a fresh process finds the class again: ``module`` made
    absolute, the file of a model registered with `register_model`, or ``""`` for a model istjax ships."""
    if module:
        return user.absolute(module)
    if name in BUILTIN or name not in MODELS:
        return ""
    return user.spec_of(MODELS.get(name)) or ""


def model_fields(name: str, module: str = "") -> dict[str, Any]:
    """The config fields of model ``name`` and their defaults (``num_classes`` comes from the data)."""
    return _fields_of(model_class(name, module))


def _fields_of(cls: type[nn.Module]) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.name not in _FLAX_FIELDS + _FROM_DATA and f.init}


def build_model(name: str, fields: Mapping[str, Any], *, num_classes: int, module: str = "",
                num_feature_ids: Optional[int] = None, label_weights: Optional[Any] = None,
                compute_dtype: str = "float32") -> nn.Module:
    """The module ``name`` (loaded from ``module`` when given) with ``fields`` (a config's ``model`` section minus
    ``name`` and ``module``). ``num_feature_ids`` (sparse data's, `istjax.data.Dataset.num_feature_ids`) fills a
    ``num_features`` field the config leaves unset (`SparseMLP`'s embedding-bag rows); ``label_weights`` (sparse
    data's inverse propensities, `istjax.data.Dataset.label_weights`) a ``label_weights`` field (its PSP@k).
    ``compute_dtype`` (``"float32"`` | ``"bfloat16"``, `istjax.core.precision`) fills the module's ``dtype`` field,
    the Flax convention for the dtype a module computes in (its parameters stay float32).

    Raises ValueError naming the field, the value and the fix for an unknown model or fields (every one the model
    lacks, at once), or a value the module itself rejects; nothing is traced.
    """
    cls = model_class(name, module)
    _check_num_classes_field(cls, name)
    known = _fields_of(cls)
    values = {k: tuple(_tuples(v)) if isinstance(v, (list, tuple)) else v for k, v in fields.items()}
    _set_compute_dtype(cls, name, values, compute_dtype)
    unknown = sorted(set(fields) - set(known))
    if unknown:
        stale = ", ".join(f"model.{k}={values[k]!r}{close_matches(k, known)}" for k in unknown)
        remove = (f"Remove {'them' if len(unknown) > 1 else 'it'}: a config that switches model.name keeps the old "
                  f"model's fields, so start its model section afresh (istjax.launch.config.use_model(config, "
                  f"{name!r}, ...) in a config file; on the command line, setting the config field model.name "
                  f"replaces the file's model fields).")
        renamed = {close[0]: values[k] for k in unknown
                   for close in [difflib.get_close_matches(k, sorted(known), n=1)] if close}
        raise ArgError("fields", {k: values[k] for k in unknown},
                       f"model {name!r} ({cls.__name__}) has no field{'s' if len(unknown) > 1 else ''} {stale}; its "
                       f"fields are {sorted(known)}.",
                       Code(remove, ("If misspelt, use", renamed, f"; if left by another model, r{remove[1:]}"))
                       if renamed else remove)
    if num_feature_ids is not None and "num_features" in known and "num_features" not in values:
        values["num_features"] = int(num_feature_ids)
    if label_weights is not None and any(f.name == "label_weights" for f in dataclasses.fields(cls)):
        values["label_weights"] = LabelWeights(label_weights)
    try:
        return cls(**values, num_classes=int(num_classes))
    except ArgError:
        raise  # names the model, its field and the value (``MLP.hidden=(0,): ...``): the field the config sets
    except (TypeError, ValueError) as e:
        raise ValueError(f"model.name={name!r} with fields {values}: {e}") from e


def _set_compute_dtype(cls: type[nn.Module], name: str, values: dict, compute_dtype: Any) -> None:
    """Puts ``compute_dtype`` (checked) in the module's ``dtype`` field; refuses a ``dtype`` given as a model field
    (the compute dtype is set once, for the model, the algorithm and the records alike) and bfloat16 for a module
    without the field."""
    dtype = precision.check_dtype(compute_dtype, "compute_dtype")
    if "dtype" in values:
        raise ArgError("fields", {"dtype": values["dtype"]},
                       f"model {name!r}: dtype={values['dtype']!r} is set as a model field;",
                       (Code("pass", ("Use",)), {"compute_dtype": values["dtype"]},
                        Code("to build_model instead.", ("instead of model.dtype.",))))
    if "dtype" in {f.name for f in dataclasses.fields(cls)}:
        values["dtype"] = dtype
    elif dtype != precision.FLOAT32:
        raise ArgError("compute_dtype", dtype,
                       f"compute_dtype={dtype!r}: model {name!r} ({cls.__name__}) has no field dtype, the Flax "
                       f"convention for the dtype a module computes in, so it would silently compute in float32;",
                       ("add a field `dtype: str = \"float32\"` and pass dtype=self.dtype to its layers (with "
                        "istjax.core.precision.dense_options(self.dtype) for a Dense's fast bfloat16 matmul; "
                        "docs/custom_models.md), or use", {"compute_dtype": "float32"}, "."))


def _check_num_classes_field(cls: type[nn.Module], name: str) -> None:
    """A ValueError naming the fix unless ``cls`` has the field the library fills from the data, ``num_classes``."""
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    if "num_classes" in fields and fields["num_classes"].init:
        return
    ints = [f for f, v in fields.items() if f not in _FLAX_FIELDS and v.type in (int, "int")]
    like = [f for f in ints if any(w in f.lower() for w in ("out", "class", "label", "logit", "target"))]
    raise ArgError(
        "module", cls,
        f"model {name!r} ({cls.__name__}) has no field num_classes: istjax builds the model with num_classes= the "
        f"data's number of classes (its output width, one logit per class), so the module needs a field "
        f"`num_classes: int` for its output width" +
        (f"; rename its output-width field ({', '.join(like)}?) to num_classes" if like else "") + ".",
        "A model built in Python is given its width by you: istjax.classifier(model, data) checks it against "
        "the data's classes.")


def _tuples(v):
    return [tuple(_tuples(x)) if isinstance(x, (list, tuple)) else x for x in v]
