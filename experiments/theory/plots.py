"""The theory studies: run, compare with the predictions, draw (matplotlib Agg), return the numbers."""

from __future__ import annotations

import os

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from istjax import theory as th  # noqa: E402
from istjax.theory import regression as reg  # noqa: E402


def _mean_dynamics(fp: th.FixedPoint, x0, rounds, step_size, decay, local_steps):
    """Predicted mean iterate ``m_{t+1} = E[A_t] m_t + E[c_t]``: `[T + 1, d]`.

    With decay the step changes every round; for K = 1 a round is affine in γ (``A = I - γ G``, ``c = γ h``), so
    ``E[A](γ_t)`` and ``E[c](γ_t)`` follow from the ones at ``step_size``.
    """
    if decay and local_steps != 1:
        raise ValueError(f"decay={decay} with local_steps={local_steps}: the prediction is exact only for K = 1.")
    d = len(x0)
    G, h = (np.eye(d) - fp.EA) / step_size, fp.Ec / step_size
    m, out = np.asarray(x0, np.float64), [np.asarray(x0, np.float64)]
    for t in range(rounds):
        gamma = step_size / (1.0 + decay * t)
        m = m - gamma * (G @ m) + gamma * h
        out.append(m)
    return np.stack(out)


def quadratic_study(config, workdir):
    problem = th.random_quadratic(config.seed, dim=config.dim, num_workers=config.num_workers,
                                  heterogeneity=config.heterogeneity, b_scale=config.b_scale)
    x_star = problem.minimiser()
    x0 = x_star + np.random.default_rng(config.seed + 1).normal(size=config.dim)
    sweep = [tuple(s) for s in config.sweep]
    ncols = 3
    nrows = -(-(len(sweep) + 1) // ncols)  # one spare cell for the legend
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows), sharey=True, squeeze=False)
    axes = axes.ravel()
    panels = []
    for ax, (K, gamma, decay) in zip(axes, sweep):
        K = int(K)
        fp = th.expected_fixed_point(problem, step_size=gamma, local_steps=K)
        try:
            closed = th.closed_form_fixed_point(problem, step_size=gamma, local_steps=K)
        except ValueError:
            closed = None
        traj = th.simulate(problem, x0, seed=config.seed, rounds=config.rounds, num_runs=config.num_runs,
                           step_size=gamma, local_steps=K, decay=decay)
        t = np.arange(config.rounds + 1)
        mean = traj.x.mean(axis=0)  # [T + 1, d]
        pred = _mean_dynamics(fp, x0, config.rounds, gamma, decay, K)
        se = np.sqrt(np.sum(traj.x[:, -1].var(axis=0, ddof=1)) / config.num_runs)
        z = (mean[-1] - fp.x) / (traj.x[:, -1].std(axis=0, ddof=1) / np.sqrt(config.num_runs))
        bias = np.linalg.norm(fp.x - x_star)
        ax.semilogy(t, np.linalg.norm(traj.x[0] - fp.x, axis=-1), color="C0", alpha=0.25, lw=0.8,
                    label="one run: |x_t - x̂|")
        ax.semilogy(t, np.linalg.norm(mean - fp.x, axis=-1), color="C0", lw=2, label="mean of runs: |x̄_t - x̂|")
        ax.semilogy(t, np.linalg.norm(pred - fp.x, axis=-1), "k--", lw=1.2, label="predicted |E x_t - x̂|")
        ax.semilogy(t, np.linalg.norm(mean - x_star, axis=-1), color="C3", lw=2, label="mean of runs: |x̄_t - x*|")
        ax.semilogy(t, np.linalg.norm(pred - x_star, axis=-1), "--", color="0.4", lw=1.2,
                    label="predicted |E x_t - x*|")
        ax.axhline(bias, color="C3", lw=0.8, ls=":", label="bias |x̂ - x*|")
        ax.axhline(se, color="C0", lw=0.8, ls=":", label="standard error of the mean")
        title = f"K={K}, γ={gamma:g}" + (f", γ_t=γ/(1+{decay:g}t)" if decay else "")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3, which="both")
        panels.append({
            "local_steps": K, "step_size": gamma, "decay": decay, "x_hat_enumerated": fp.x.tolist(),
            "x_hat_closed_form": None if closed is None else closed.tolist(), "x_star": x_star.tolist(),
            "mean_of_runs_final": mean[-1].tolist(), "z_scores_final": z.tolist(), "rate": fp.rate,
            "bias": bias, "standard_error": se, "num_partitions": fp.num_partitions,
            "closed_form_max_abs_diff": None if closed is None else float(np.max(np.abs(closed - fp.x))),
        })
    floor = min(p["standard_error"] for p in panels)
    axes[0].set_ylim(0.1 * floor, 3 * max(np.linalg.norm(x0 - x_star), max(p["bias"] for p in panels)))
    for ax in axes[::ncols]:
        ax.set_ylabel("distance")
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[len(sweep):]:
        ax.axis("off")
    axes[len(sweep)].legend(handles, labels, fontsize=9, loc="center")
    kind = "homogeneous" if problem.homogeneous else "heterogeneous"
    fig.suptitle(f"IST on a {kind} quadratic: d={config.dim}, n={config.num_workers}, {config.num_runs} runs; "
                 f"\nthe mean iterate converges to the expected fixed point x̂ (as predicted), not to x*", fontsize=11)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "quadratic.png"), dpi=110)
    plt.close(fig)
    summary = [{k: p[k] for k in ("local_steps", "step_size", "decay", "x_hat_enumerated", "mean_of_runs_final",
                                  "x_star", "closed_form_max_abs_diff")} for p in panels]
    return {"panels": panels, "summary": summary}


def two_by_two_study(config, workdir):
    a, b = config.a, config.b
    thr = th.descent_threshold(a, b)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    summary = {"threshold": thr, "runs": []}
    t = np.arange(config.rounds + 1)
    for i, c in enumerate(config.cs):
        problem = th.two_by_two(a, b, c)
        x0, value = th.ascent_direction(problem)
        traj = th.simulate(problem, x0, seed=config.seed, rounds=config.rounds, step_size=config.step_size)
        scaled, s = th.diag_rescale(problem)
        ytraj = th.simulate(scaled, x0 / s, seed=config.seed, rounds=config.rounds, step_size=config.step_size)
        side = "above" if c > thr else "below"
        f, fy = traj.loss[0] / traj.loss[0, 0], ytraj.loss[0] / ytraj.loss[0, 0]
        ax.semilogy(t, f, color=f"C{i}", lw=2, label=f"c={c:g} ({side} {thr:g}): unscaled")
        ax.semilogy(t, fy, color=f"C{i}", lw=1.5, ls="--", label=f"c={c:g}: Diag(L)^-1/2 rescaled")
        summary["runs"].append({
            "c": c, "side": side, "min_descent_eigenvalue": value, "f_ratio_round1": float(f[1]),
            "rounds_with_f_increase": int(np.sum(np.diff(traj.loss[0]) > 0)),
            "rescaled_rounds_with_f_increase": int(np.sum(np.diff(ytraj.loss[0]) > 0)),
            "final_norm": float(np.linalg.norm(traj.x[0, -1])), "final_f_ratio": float(f[-1]),
            "rescaled_final_f_ratio": float(fy[-1]),
        })
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xlabel("round")
    ax.set_ylabel("f(x_t) / f(x_0)")
    ax.set_title(f"a={a:g}, b={b:g}, γ={config.step_size:g}, start: worst direction (rescaled curves coincide)",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    cs = np.linspace(0.0, np.sqrt(a * b) * 0.999, 200)
    ax2.plot(cs, [th.ascent_direction(th.two_by_two(a, b, c))[1] for c in cs], lw=2, label="unscaled")
    ax2.plot(cs, [th.ascent_direction(th.diag_rescale(th.two_by_two(a, b, c))[0])[1] for c in cs], lw=2,
             ls="--", label="Diag(L)^-1/2 rescaled")
    ax2.axvline(thr, color="k", lw=0.8, ls=":", label=f"2ab/(a+b) = {thr:g}")
    ax2.axhline(0.0, color="k", lw=0.6)
    ax2.set_xlabel("c")
    ax2.set_ylabel("min over unit x of <∇f(x), g(x)>")
    ax2.set_title("descent iff this is positive", fontsize=10)
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    fig.suptitle("The paper's 2x2 example, two workers: IST stops descending above c = 2ab/(a+b), still converges",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "two_by_two.png"), dpi=110)
    plt.close(fig)
    return {"summary": summary}


def regression_study(config, workdir):
    data = reg.regression_data(config.seed, num_points=config.num_points, dim=config.dim)
    common = dict(width=config.width, step_size=config.step_size, seed=config.seed, init_scale=config.init_scale)
    ist, masks, curves = {}, {}, {}
    for K in config.local_steps:
        rounds = config.total_steps // K
        for W in config.workers:
            curve = reg.train_curve(data, num_workers=W, local_steps=K, rounds=rounds, **common)
            ist[(W, K)] = reg.loss_floor(curve)
            if K == config.local_steps[0]:
                curves[W] = curve.loss
            print(f"IST W={W} K={K}: floor {ist[(W, K)]:.3e}", flush=True)
        for p in config.subnetworks:
            curve = reg.train_curve(data, num_workers=p, local_steps=K, rounds=rounds, keep_prob=config.keep_prob,
                                    **common)
            masks[(p, K)] = reg.loss_floor(curve)
            print(f"masks p={p} xi={config.keep_prob} K={K}: floor {masks[(p, K)]:.3e}", flush=True)
    fig, (ax, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.2))
    K0 = config.local_steps[0]
    for i, (W, loss) in enumerate(curves.items()):
        ax.semilogy(np.arange(len(loss)) * K0, loss, color=f"C{i}", label=f"W={W}")
    ax.set_xlabel("gradient steps")
    ax.set_ylabel("full-network training loss")
    ax.set_title(f"IST, K={K0}, width {config.width}", fontsize=10)
    ax.legend(fontsize=8)
    for i, K in enumerate(config.local_steps):
        ax2.loglog(config.workers, [ist[(W, K)] for W in config.workers], "o-", color=f"C{i}", label=f"K={K}")
        ax3.loglog(config.subnetworks, [masks[(p, K)] for p in config.subnetworks], "o-", color=f"C{i}",
                   label=f"K={K}")
    ax2.set_xlabel("sub-networks W (disjoint, ξ = 1/W)")
    ax2.set_ylabel("loss floor")
    ax2.set_title("IST: floor vs W (W=1 is GD: its floor is 0, shown at the last step)", fontsize=10)
    ax3.set_xlabel(f"sub-networks p (Bernoulli masks, ξ = {config.keep_prob:g})")
    ax3.set_title("fixed ξ (the paper's theorem): floor vs p", fontsize=10)
    for a_ in (ax, ax2, ax3):
        a_.grid(alpha=0.3, which="both")
    for a_, xs in ((ax2, config.workers), (ax3, config.subnetworks)):
        a_.set_xticks(list(xs), [str(v) for v in xs])
        a_.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax2.legend(fontsize=8)
    ax3.legend(fontsize=8)
    fig.suptitle(f"Masked-neuron regression (Liao & Kyrillidis): {config.num_points} points, d={config.dim}, "
                 f"{config.total_steps} gradient steps per run, lr {config.step_size:g}", fontsize=11)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "regression.png"), dpi=110)
    plt.close(fig)
    table = {"ist_floor": {f"W={W},K={K}": v for (W, K), v in ist.items()},
             "mask_floor": {f"p={p},K={K},xi={config.keep_prob}": v for (p, K), v in masks.items()}}
    return {**table, "summary": table}
