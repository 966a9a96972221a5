"""A finished run's summary: `run_summary` gathers its final metrics, samples seen, times and bytes into the dict
written to ``summary.json`` (and returned by `istjax.launch.driver.train_and_evaluate`); `summary_text` is what the
run prints at its end. A config with a target (``target_accuracy`` or ``target_loss``) adds it under its own field
name and the metric-neutral ``round_to_target``, ``samples_to_target`` and ``time_to_target_s`` (None: not
reached). `step_examples` is the unit ``samples_seen`` counts in: what one local step consumes, and `round_shape`
a round's ``(W, K, B)``. A federated run's summary records its clients (``clients``: the split's and the sampler's
records, E, B and the derived K; `clients_text` is the line the run prints at its start and end).
"""

from __future__ import annotations

import pathlib
from typing import Any, Optional

import ml_collections

from istjax.algorithms.base import Algorithm
from istjax.data.cluster_batches import CLUSTERS
from istjax.launch import provenance
from istjax.launch.config.target import target_of
from istjax.launch.metrics import SPLIT, format_bytes, metrics_text

__all__ = ["clients_text", "round_shape", "run_summary", "runtime_text", "step_examples", "summary_text"]


def step_examples(config: ml_collections.ConfigDict) -> int:
    """What one local step consumes, counted in ``samples_seen``: ``batch_size`` examples, or with
    ``graph_batches="clusters"`` the ``clusters_per_step`` clusters of a Cluster-GCN step."""
    if config.data.graph_batches == CLUSTERS:
        return int(config.data.clusters_per_step)
    return int(config.batch_size)


def round_shape(config: ml_collections.ConfigDict, clients: Optional[dict] = None) -> tuple[int, int, int]:
    """``(W, K, B)`` of one round: the config's, or for a federated run (``clients``, its record) the clients'
    local steps K (``epochs * ceil(largest client / B)``; the config's ``local_steps`` is not used) and B. A federated
    round's ``W * K * B`` counts every position of its client batches, a smaller client's zero-weight fill
    included (the round's ``train_examples`` metric counts the examples trained)."""
    if clients is not None:
        return int(config.num_workers), int(clients["local_steps"]), int(clients["batch_size"])
    return int(config.num_workers), int(config.local_steps), step_examples(config)


def clients_text(clients: dict[str, Any]) -> str:
    """``clients: dirichlet(alpha=0.1, min_size=10), seed 0: 20 clients over 1437 examples, ...; 4 of 20 a round
    (fraction 0.2), 1 epoch(s) at B=10 (largest client 177): K=18 local steps (the config's local_steps is not
    used)``, from a clients record (`istjax.launch.config.federated.Clients.to_record`)."""
    sampler = clients["sampler"]
    given = f"fraction {sampler['fraction']:g}" if sampler.get("fraction") is not None else "num_workers"
    slots = sampler.get("slots", sampler["clients_per_round"])
    pads = f" in {slots} slots" if slots != sampler["clients_per_round"] else ""
    return (f"clients: {clients['describe']}; {sampler['clients_per_round']} of {sampler['num_clients']} a round "
            f"({given}){pads}, {clients['epochs']} epoch(s) at B={clients['batch_size']} (largest client "
            f"{clients['max_client_size']}): K={clients['local_steps']} local steps (the config's local_steps is not "
            f"used)")


def run_summary(config, algorithm: Algorithm, records: list[dict], workdir: pathlib.Path, *, compile_time: float,
                wall: float, bytes_total: float, clients: Optional[dict] = None) -> dict[str, Any]:
    last = records[-1]
    rounds = int(last["round"])
    W, K, B = round_shape(config, clients)
    out = {
        "name": config.name, "algorithm": algorithm.name, "dataset": config.data.name, "num_workers": W,
        "local_steps": K, "batch_size": B, "rounds": rounds, "samples_seen": rounds * W * K * B,
        "graph_batches": config.data.graph_batches, "runtime": config.runtime.name,
        "runtime_mode": config.runtime.mode if algorithm.runtime.size > 1 else None,
        "num_processes": int(algorithm.runtime.size),
        **dict.fromkeys(("test_accuracy", "test_loss", "train_loss", "train_accuracy")),
        **{k: v for k, v in last.items() if k.startswith(("test_", "train_"))},  # every metric the evaluation gave
        "wall_time_s": wall, "time_per_round_s": wall / rounds if rounds else float("nan"),
        "compile_time_s": compile_time,
        "bytes_sent_per_worker_per_round": last.get("bytes_sent_per_worker", float(algorithm.comm.sent)),
        "bytes_received_per_worker_per_round": last.get("bytes_received_per_worker",
                                                        float(algorithm.comm.received)),
        **{k: last[k] for k in SPLIT if k in last},  # the last window's loss split
        "bytes_total": bytes_total, "workdir": str(workdir),
        "code": provenance.code_version(), "machine": provenance.machine(),  # what trained it, as it trained
    }
    if clients is not None:  # a federated run: its split and sampler, as drawn
        out["clients"] = clients
    if (target := target_of(config)) is not None:  # only a config that sets a target has one
        hit = next((r for r in records if target.met_by(r) and "wall_time_s" in r), None)
        out.update({target.field: target.value, "round_to_target": hit and hit["round"],
                    "samples_to_target": hit and hit["samples_seen"], "time_to_target_s": hit and hit["wall_time_s"]})
    return out


def runtime_text(s: dict[str, Any]) -> str:
    """``simulate, 1 process`` / ``mpi (sharded), 2 processes``, from a summary (older ones lack the fields)."""
    n = s.get("num_processes", 1)
    mode = f" ({s['runtime_mode']})" if s.get("runtime_mode") else ""
    return f"{s.get('runtime', 'simulate')}{mode}, {n} process{'es' if n != 1 else ''}"


def _who(s: dict[str, Any]) -> str:
    """What a run's worker is, for its byte counts: a federated run's worker is a sampled client's slot."""
    return "client slot" if s.get("clients") else "worker"


def summary_text(s: dict[str, Any]) -> str:
    lines = [
        f"Finished {s['rounds']} rounds of {s['algorithm']} on {s['dataset']} (W={s['num_workers']}, "
        f"K={s['local_steps']}, " + (f"{s['batch_size']} cluster(s) per step)." if s.get("graph_batches") == CLUSTERS
                                      else f"B={s['batch_size']})."),
        f"  runtime {runtime_text(s)}",
        *([f"  {clients_text(s['clients'])}"] if s.get("clients") else []),
        f"  {metrics_text(s)}",
        f"  samples seen {s['samples_seen']:,}; {1000 * s['time_per_round_s']:.1f} ms per round "
        f"(training {s['wall_time_s']:.1f} s, "
        + ("compilation included in the first round" if s["compile_time_s"] is None
           else f"compiling the step {s['compile_time_s']:.1f} s")
        + (f", the evaluation {s['eval_compile_time_s']:.1f} s)" if s.get("eval_compile_time_s") is not None
           else ")"),
        f"  per {_who(s)} per round: received {format_bytes(s['bytes_received_per_worker_per_round'])}, sent "
        f"{format_bytes(s['bytes_sent_per_worker_per_round'])}; all {_who(s)}s so far {format_bytes(s['bytes_total'])}",
    ]
    if (target := target_of(s)) is not None:  # named as the task names its metric (XMC: test P@1; text: nats/char)
        what = target.words(s.get("metric_labels"))
        lines.append(f"  {what} not reached" if s["round_to_target"] is None else
                     f"  reached {what} at round {s['round_to_target']} ({s['samples_to_target']:,} samples, "
                     f"{s['time_to_target_s']:.1f} s of training)")
    if s.get("peak_rss_mib_per_process"):
        per = s["peak_rss_mib_per_process"]
        lines.append(f"  peak resident memory {max(per):,.0f} MiB" + (
            f" (per process, rank 0 first: {', '.join(f'{m:,.0f}' for m in per)})" if len(per) > 1 else ""))
    lines.append(f"  results: {s['workdir']} (metrics.jsonl, summary.json, tensorboard/, checkpoints/); plot with "
                 f"`istjax plot {s['workdir']}`")
    return "\n".join(lines)
