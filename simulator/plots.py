"""The report's figures (PNG): utilisation against offered load, wait CDFs per tier, per-department fairness."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from engine.types import TIERS

from . import policies


def plots(results, agg, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    scens = sorted({k[0] for k in agg})
    pols = [p for p in policies.REGISTRY if any(k[2] == p for k in agg)]
    for scen in scens:
        loads = sorted({k[1] for k in agg if k[0] == scen})
        made.append(_utilisation_plot(plt, agg, scen, loads, pols, out))
        # wait CDFs per tier at the load closest to 0.9
        ld = min(loads, key=lambda x: abs(x - 0.9))
        made.extend(_wait_cdf_plot(plt, results, scen, ld, pols, out))
        made.extend(_fairness_plot(plt, agg, scen, ld, pols, out))
    return made


def _save(plt, fig, f: Path) -> Path:
    fig.tight_layout()
    fig.savefig(f, dpi=110)
    plt.close(fig)
    return f


def _utilisation_plot(plt, agg, scen, loads, pols, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in pols:
        xs = [agg[(scen, ld, p)]["rho"] for ld in loads if (scen, ld, p) in agg]
        ys = [agg[(scen, ld, p)]["utilisation"] for ld in loads if (scen, ld, p) in agg]
        ax.plot(xs, ys, marker="o", label=p, lw=2.5 if p == "portal" else 1.2)
    if loads:
        rhos = [agg[(scen, ld, pols[0])]["rho"] for ld in loads if (scen, ld, pols[0]) in agg]
        ax.plot(rhos, [min(1, r) for r in rhos], "k--", lw=1, label="min(1, rho)")
    ax.set_xlabel("offered load rho")
    ax.set_ylabel("GPU utilisation")
    ax.set_title(f"{scen}: utilisation vs offered load")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(plt, fig, out / f"{scen}_utilisation.png")


def _wait_cdf_plot(plt, results, scen, ld, pols, out: Path) -> list[Path]:
    samples = defaultdict(lambda: defaultdict(list))
    for m in results:
        if m.get("scenario") == scen and m.get("load") == ld and "samples" in m:
            for t, xs in m["samples"].items():
                samples[t][m["policy"]].extend(xs)
    tiers = [t for t in TIERS if t in samples]
    if not tiers:
        return []
    fig, axes = plt.subplots(1, len(tiers), figsize=(5 * len(tiers), 4.2), squeeze=False)
    for ax, t in zip(axes[0], tiers, strict=True):
        for p in pols:
            xs = sorted(samples[t].get(p, []))
            if not xs:
                continue
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.plot([max(x, 1.0) for x in xs], ys, label=p, lw=2.5 if p == "portal" else 1.2)
        ax.set_xscale("log")
        ax.axvline(300, color="k", ls=":", lw=1)
        ax.set_xlabel("wait (s, log; dotted = 5 min)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"{scen} load {ld}: {t}")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return [_save(plt, fig, out / f"{scen}_wait_cdf.png")]


def _fairness_plot(plt, agg, scen, ld, pols, out: Path) -> list[Path]:
    """Per-department fairness: received / min(demand, quota) while backlogged."""
    depts = sorted({d for (s, lv, p), a in agg.items() if s == scen and lv == ld for d in a["dept_share_ratio"]})
    if not depts:
        return []
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(depts) * len(pols) / 3), 4.5))
    width = 0.8 / max(len(pols), 1)
    for i, p in enumerate(pols):
        a = agg.get((scen, ld, p))
        if not a:
            continue
        ys = [a["dept_share_ratio"].get(d, float("nan")) for d in depts]
        ax.bar([k + i * width for k in range(len(depts))], ys, width, label=p)
    ax.axhline(1.0, color="k", ls="--", lw=1)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(depts))])
    ax.set_xticklabels(depts, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("received / min(demand, quota) share\n(time-average while backlogged)")
    ax.set_title(f"{scen} load {ld}: per-department fairness (1 = fair share)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, axis="y")
    return [_save(plt, fig, out / f"{scen}_fairness.png")]
