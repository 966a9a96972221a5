"""Algorithms: factories returning an `Algorithm` of pure pieces (see `istjax.algorithms.base`).

* `istjax.algorithms.ist`: Independent Subnetwork Training (arXiv 1910.02120).
* `istjax.algorithms.replicated`: the data-parallel, local-SGD and DiLoCo baselines.
* `istjax.algorithms.federated`: FedSGD, FedAvg and its server optimizers (FedAvgM, FedAdam), FedProx, over sampled
  clients (McMahan et al. 2017; Reddi et al. 2021), and IST on sampled clients (fedist).
* `istjax.algorithms.dynamic`: dynamic model averaging, replicas that average only when their models drift apart.
* `istjax.algorithms.codistill`: codistillation, groups that learn from each other's predictions.
* `istjax.algorithms.consensus`: consensus ADMM, replicas held to one model by a penalty and a dual per worker.
* `istjax.algorithms.tensor`: tensor (model) parallelism, every layer split across MPI processes (Megatron).
* `istjax.algorithms.resist`: ResIST, IST over the depth of a ResNet (arXiv 2107.00961).
* `istjax.algorithms.reference`: the plain Python-loop rounds every runtime is tested against.
"""

from typing import NamedTuple

from istjax.algorithms.base import Algorithm as Algorithm
from istjax.algorithms.base import Exchange as Exchange
from istjax.algorithms.base import apply_update as apply_update
from istjax.algorithms.base import local_train as local_train
from istjax.algorithms.codistill import codistillation as codistillation
from istjax.algorithms.consensus import admm as admm
from istjax.algorithms.dynamic import dynamic_averaging as dynamic_averaging
from istjax.algorithms.federated import fedavg as fedavg
from istjax.algorithms.federated import fedist as fedist
from istjax.algorithms.federated import fedsgd as fedsgd
from istjax.algorithms.ist import ist as ist
from istjax.algorithms.replicated import data_parallel as data_parallel
from istjax.algorithms.replicated import diloco as diloco
from istjax.algorithms.replicated import local_sgd as local_sgd
from istjax.algorithms.resist import resist as resist
from istjax.algorithms.tensor import tensor_parallel as tensor_parallel

from istjax.core.registry import Registry


class AlgorithmEntry(NamedTuple):
    """A registered algorithm: its factory ``(task, optimizer, *, num_workers, local_steps, backend, **options)``
    and the keyword options it takes beyond those (a config supplies each by that name: ``sampler``,
    ``optimizer_state``, ``model_state``, ``min_depth``, ``test_scale``, ``num_owners``). What it can run with is
    the factory's to say: it refuses anything else with an `istjax.ArgError` naming the option."""

    factory: object
    options: tuple[str, ...]
    description: str = ""
    #: every optimizer step averages the gradients of all W workers' batches (one step reads ``W * B`` examples: the
    #: batch of the linear scaling rule, `istjax.launch.config.parts.scaled_learning_rate`).
    averages_steps: bool = False


#: Every algorithm but tensor parallel takes the exchange dtype and what a worker sends back (`istjax.core.precision`).
_WIRE = ("exchange_dtype", "exchange_values")

#: What an algorithm whose exchange can be compressed reads (`istjax.core.compress`).
_COMPRESSION = ("compression", "compression_rank", "compression_fraction", "compression_start")

#: What a federated algorithm reads beyond the wire (`istjax.algorithms.federated`); ``clients`` is the run's sampler.
_FEDERATED = ("clients", "server_optimizer", "server_learning_rate", "server_momentum", "prox_mu", "model_state",
              "recompute_batches", *_WIRE)

#: The algorithms by config name (``algorithm.name``): each entry builds one from a task, an optimizer and options.
ALGORITHMS: Registry[AlgorithmEntry] = Registry("algorithm", field="algorithm", entries={
    "ist": AlgorithmEntry(ist, ("sampler", "optimizer_state", "model_state", "recompute_batches", *_WIRE),
                          "Independent Subnetwork Training: neurons split among workers every round"),
    "data_parallel": AlgorithmEntry(data_parallel, ("model_state", "recompute_batches", *_WIRE, *_COMPRESSION),
                                    "gradients averaged every step", averages_steps=True),
    "local_sgd": AlgorithmEntry(local_sgd, ("optimizer_state", "model_state", "recompute_batches", *_WIRE,
                                            *_COMPRESSION),
                                "whole replicas trained K steps, then averaged"),
    "diloco": AlgorithmEntry(diloco, ("outer_learning_rate", "outer_momentum", "optimizer_state", "model_state",
                                     "recompute_batches", *_WIRE, *_COMPRESSION),
                             "DiLoCo: whole replicas trained K steps, their average change applied by an outer "
                             "Nesterov step"),
    "admm": AlgorithmEntry(admm, ("rho", "model_state", "recompute_batches", *_WIRE),
                           "consensus ADMM: whole replicas trained K steps on their loss plus rho/2 ||x - z + u_i||^2, "
                           "z the mean of x_i + u_i, each worker's dual u_i kept between rounds"),
    "dynamic_averaging": AlgorithmEntry(dynamic_averaging, ("delta",),
                                        "dynamic model averaging: each replica keeps its model; models move only when "
                                        "one drifts further than delta from the last average (Kamp et al. 2018)"),
    "codistillation": AlgorithmEntry(codistillation, ("groups", "distill_weight", "teacher_every", "burn_in"),
                                     "codistillation: groups of replicas, each group's loss plus distill_weight x "
                                     "KL(the other groups' stale predictions || its own) (Anil et al. 2018)"),
    "fedavg": AlgorithmEntry(fedavg, _FEDERATED, "federated averaging over the round's sampled clients, their "
                             "models weighted by example counts, the server optimizer on the pseudo-gradient "
                             "(sgd: FedAvg, with momentum FedAvgM; adam: FedAdam); prox_mu: FedProx"),
    "fedsgd": AlgorithmEntry(fedsgd, _FEDERATED, "FedSGD: one full-batch gradient per sampled client, weighted by "
                             "example counts"),
    "fedist": AlgorithmEntry(fedist, ("clients", "sampler", "server_optimizer", "server_learning_rate",
                                      "server_momentum", "optimizer_state", "model_state", "recompute_batches",
                                      *_WIRE),
                             "IST on the round's sampled clients: neurons split among them, the merge weighted by "
                             "example counts, the server optimizer on the pseudo-gradient (as fedavg)"),
    "resist": AlgorithmEntry(resist, ("optimizer_state", "model_state", "recompute_batches", "min_depth",
                                      "test_scale", "num_owners", *_WIRE),
                             "ResIST: residual blocks split among workers (model.name='depth_resnet')"),
    "tensor_parallel": AlgorithmEntry(tensor_parallel, ("batch_size", "exchange_dtype"),
                                      "every layer split across the MPI processes, activations exchanged every step "
                                      "(runtime.name='mpi'; models giving their tensor split: mlp, sparse_mlp, transformer)"),
}, hint="Add one with istjax.algorithms.ALGORITHMS.register(name, AlgorithmEntry(factory, options)).")

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmEntry", "Exchange", "admm", "apply_update", "codistillation",
           "data_parallel", "diloco", "dynamic_averaging", "fedavg", "fedist", "fedsgd", "ist", "local_sgd",
           "local_train", "resist", "tensor_parallel"]
