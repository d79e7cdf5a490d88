"""Throughput plots: updates/s and match deltas/s by batch size, per query, ours vs baselines.

One PNG per graph (its plain and labelled workloads together), drawn with matplotlib's Agg
backend. Without matplotlib (the ``bench`` extra not installed) no plot is drawn and the report
says so.
"""

from __future__ import annotations

from pathlib import Path

from bench.results import Results, rates, recompute_rate


def plot_throughput(results: Results, directory: Path, limit: float) -> list[Path]:
    """Draw one figure per graph into ``directory``; returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    by_graph: dict[str, list[tuple[str, str]]] = {}
    for workload in results.workloads:
        for query in results.queries(workload):
            by_graph.setdefault(results.graph_of(workload), []).append((workload, query))
    written = []
    sizes = results.batch_sizes()
    for graph, panels in by_graph.items():
        fig, axes = plt.subplots(
            2, len(panels), figsize=(3.2 * len(panels), 6.0), squeeze=False, sharex=True
        )
        for column, (workload, query) in enumerate(panels):
            top, bottom = axes[0][column], axes[1][column]
            for engine, style in (("ours", "o-"), ("binary", "s--")):
                points = [(b, rates(results.run(workload, query, engine, b))) for b in sizes]
                kept = [(b, r) for b, r in points if r is not None]
                label = "ours" if engine == "ours" else "binary join"
                if kept:
                    top.plot(
                        [b for b, _ in kept], [r.updates_per_s for _, r in kept], style, label=label
                    )
                    bottom.plot(
                        [b for b, _ in kept], [r.deltas_per_s for _, r in kept], style, label=label
                    )
            record = results.recomputes.get((workload, query))
            again = [(b, recompute_rate(record, b, limit)) for b in sizes]
            measured = [(b, r) for b, r in again if r is not None and not r.lower_bound]
            bounds = [(b, r) for b, r in again if r is not None and r.lower_bound]
            if measured:
                top.plot(
                    [b for b, _ in measured],
                    [r.updates_per_s for _, r in measured],
                    "^:",
                    color="tab:green",
                    label="recompute",
                )
            if bounds:
                top.plot(
                    [b for b, _ in bounds],
                    [r.updates_per_s for _, r in bounds],
                    "v:",
                    color="tab:green",
                    markerfacecolor="none",
                    label="recompute (at most)",
                )
            top.set_title(query if workload == graph else f"{query} ({workload})", fontsize=9)
            bottom.set_xlabel("batch size (updates per epoch)")
            for ax in (top, bottom):
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.grid(True, which="both", alpha=0.3)
        axes[0][0].set_ylabel("updates/s")
        axes[1][0].set_ylabel("match deltas/s")
        for ax in axes[0]:
            ax.legend(fontsize=7)
        fig.suptitle(f"{graph}: throughput by batch size (one core)")
        fig.tight_layout()
        path = directory / f"throughput-{graph}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
