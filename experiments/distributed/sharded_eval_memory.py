"""Peak resident memory per rank of a sharded run that evaluates, with the model gathered to rank 0 for evaluation
and evaluated in place (each rank its slice of the forward pass, the partial sums of each layer all-reduced).

The IST paper's 3-layer speech MLP (4096 -> 8192 -> 8192 -> 35, BatchNorm; about 101 M parameters, 404 MB in
float32) on 2 MPI processes in the sharded mode, W = 2 workers, K = 2 local steps of batch 64: init, one round, then
one evaluation of 1,024 test examples, either way. Each way is its own ``mpiexec -n 2`` launch (``ru_maxrss`` is a
process's peak over its life, which the round's temporaries set); the bytes of the arrays each rank holds after the
evaluation show the gathered model. Rank 0's test loss must be the same both ways.

Command (launches both runs itself and writes ``experiments/distributed/results/sharded_eval_memory.json``, which
`experiments.report` renders into docs/distributed.md):

    .venv/bin/python -m experiments.distributed.sharded_eval_memory
"""

import argparse
import json
import pathlib
import resource
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve()
REPO = HERE.parents[2]
D, HIDDEN, C, B, K, EVAL = 4096, (8192, 8192), 35, 64, 2, 1024
WAYS = ("gather", "in_place")


def child(way: str) -> None:
    import jax
    import jax.numpy as jnp
    import optax

    import istjax
    from istjax.models.mlp import MLP
    from istjax.runtimes import mpi as M

    n = M.size()
    task = istjax.classifier(MLP(hidden=HIDDEN, num_classes=C), jnp.zeros((B, D)), num_classes=C)
    alg = istjax.ist(task, optax.sgd(0.01), num_workers=n, local_steps=K, sampler=istjax.stratified(num_owners=n),
                     backend="mpi", mode="sharded")
    state = alg.init(jax.random.key(0))
    kx, ky = jax.random.split(jax.random.key(1))
    batches = {"x": jax.random.normal(kx, (1, K, B, D), jnp.float32),  # this rank's worker only
               "y": jax.random.randint(ky, (1, K, B), 0, C, jnp.int32)}
    state, _ = alg.round(state, batches)
    test = {"x": jax.random.normal(kx, (EVAL, D), jnp.float32), "y": jax.random.randint(ky, (EVAL,), 0, C, jnp.int32)}
    if way == "in_place":
        loss, aux = jax.jit(alg.runtime.evaluate)(state.params, state.model_state, test)
    else:
        whole = alg.runtime.gather(state)
        loss = task.evaluate(whole.params, whole.model_state, test)[0] if whole is not None else jnp.zeros(())
    jax.block_until_ready(loss)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    live = sum(x.nbytes for x in jax.live_arrays())  # what the rank holds after evaluating (the gathered model too)
    everyone = M._world().gather((rss, live), root=0)
    if M.is_primary():
        print(json.dumps({"way": way, "max_rss": [r for r, _ in everyone], "live_bytes": [v for _, v in everyone],
                          "test_loss": float(loss)}), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE.parent / "results" / "sharded_eval_memory.json")
    args = parser.parse_args(argv)
    mpiexec = pathlib.Path(sys.executable).with_name("mpiexec")
    rows = []
    for way in WAYS:
        out = subprocess.run([str(mpiexec), "-n", "2", sys.executable, "-m", "experiments.distributed.sharded_eval_memory", "--child",
                              way],
                             capture_output=True, text=True, cwd=REPO, check=False)
        if out.returncode:
            sys.stderr.write(out.stdout[-2000:] + out.stderr[-4000:])
            return 1
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{way:9s} peak RSS per rank (MiB): {[round(r / 2 ** 20) for r in row['max_rss']]}; arrays held after "
              f"the evaluation (MiB): {[round(v / 2 ** 20) for v in row['live_bytes']]}; test loss "
              f"{row['test_loss']:.6f}", flush=True)
    losses = {r["way"]: r["test_loss"] for r in rows}
    from istjax.launch.provenance import code_version

    result = {"command": "python -m experiments.distributed.sharded_eval_memory", "code": code_version(),
              "model": {"input": D, "hidden": list(HIDDEN), "classes": C}, "ranks": 2, "batch": B, "local_steps": K,
              "eval_examples": EVAL, "rows": rows,
              "same_loss": abs(losses["gather"] - losses["in_place"]) <= 1e-4 * abs(losses["gather"])}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["same_loss"] else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        sys.exit(main())
