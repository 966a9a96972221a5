"""Sharded MPI's bytes and memory: ``experiments/distributed/results/*.json`` (``python -m
experiments.distributed.comm_and_memory``, ``.sharded_eval_memory``). Registered in `experiments.tables` when
`experiments.report` imports this module.
"""

from __future__ import annotations

from experiments.tables import cell, headline_row, markdown_table, mib, scalar, span, table

COMM_MEMORY = "experiments/distributed/results/comm_and_memory.json"
SHARDED_EVAL = "experiments/distributed/results/sharded_eval_memory.json"


@table("distributed_comm_memory", COMM_MEMORY)
def _comm_memory(d):
    """Bytes per worker per round (analytic and measured) and each rank's memory, per rank count and mode."""
    rows = [[cell(r["procs"]), r["algorithm"], r["mode"] if r["algorithm"] == "ist" else "replicated (allreduce)",
             f"{mib(r['analytic_received'])} / {mib(r['analytic_sent'])}",
             f"{mib(r['measured_received'])} / {mib(r['measured_sent'])}",
             " ".join(mib(x) for x in r["max_rss"]), " ".join(mib(x) for x in r["largest_array"])]
            for r in d["rows"]]
    return (f"{d['model']} speech MLP, batch {d['batch']}, K = {d['local_steps']}, W = P workers; full model "
            f"{mib(d['rows'][0]['full_model_bytes'])} MiB\n\n" + markdown_table(
                ["P", "algorithm", "mode", "analytic recv/sent per worker per round (MiB)", "measured recv/sent (MiB)",
                 "peak RSS per rank (MiB)", "largest array per rank (MiB)"], rows))


def _largest(d, procs: int, mode: str) -> list[int]:
    return next(r["largest_array"] for r in d["rows"]
                if r["procs"] == procs and r["algorithm"] == "ist" and r["mode"] == mode)


scalar("distributed.server_extra", COMM_MEMORY, lambda d: span(
    [(r["max_rss"][0] - max(r["max_rss"][1:])) / 2 ** 20 for r in d["rows"]
     if r["algorithm"] == "ist" and r["mode"] == "parameter_server"], lambda x: f"{x:.0f}", "-"))
scalar("distributed.sharded_largest", COMM_MEMORY, lambda d: " / ".join(
    f"{max(_largest(d, r['procs'], 'sharded')) / 2 ** 20:.0f}" for r in d["rows"]
    if r["algorithm"] == "ist" and r["mode"] == "sharded"))


def _eval_rss(d, way):
    row = next(r for r in d["rows"] if r["way"] == way)
    return " / ".join(f"{r / 2 ** 20:,.0f}" for r in row["max_rss"])


def _eval_live(d, way):
    row = next(r for r in d["rows"] if r["way"] == way)
    return " / ".join(f"{v / 2 ** 20:,.0f}" for v in row["live_bytes"])


scalar("distributed.eval_gather_live", SHARDED_EVAL, lambda d: _eval_live(d, "gather"))
scalar("distributed.eval_in_place_live", SHARDED_EVAL, lambda d: _eval_live(d, "in_place"))
scalar("distributed.eval_gather_rss", SHARDED_EVAL, lambda d: _eval_rss(d, "gather"))
scalar("distributed.eval_in_place_rss", SHARDED_EVAL, lambda d: _eval_rss(d, "in_place"))


@headline_row("sharded MPI, 2-layer speech MLP (4096-4096-35), one worker per rank: the largest array a rank holds "
              "(`python -m experiments.distributed.comm_and_memory`)", "`docs/distributed.md`", COMM_MEMORY)
def _headline_sharded(d):
    procs = sorted({r["procs"] for r in d["rows"]})
    return "; ".join(f"P = {p}: {max(_largest(d, p, 'sharded')) / 2 ** 20:.0f} MiB sharded, "
                     f"{max(_largest(d, p, 'parameter_server')) / 2 ** 20:.0f} MiB on the parameter server's rank 0"
                     for p in procs) + f" (the full model: {mib(d['rows'][0]['full_model_bytes'])} MiB)"
