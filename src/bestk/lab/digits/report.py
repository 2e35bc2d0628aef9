"""The digits testbed's report: the markdown of a testbed's data, and its figure.

:func:`render_testbed` (also used for the other testbeds' reports) gives the selected
learning rates, the end metrics, the change from the start and the gradient allocation;
:func:`plot` draws pass@k / best@k against k and pass@1 along training, one colour per
learner (:func:`learner_colour`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bestk._optional import pyplot
from bestk.figures import save_figure
from bestk.lab.common.io import (
    TestbedData,
    alloc_key,
    fmt,
    markdown_table,
    metric_key,
)
from bestk.lab.digits.settings import (
    BIN_LABELS,
    LEARNERS,
    REWARD_KINDS,
)
from bestk.lab.digits.sweep import SettingResult
from bestk.stats import mean_ci


def _cell(values: Sequence[float]) -> str:
    m, h = mean_ci(values)
    return f"{m:.3f} ± {fmt(h)}"


def render_testbed(tb: TestbedData, title: str | None = None,
                   name: str | None = None,
                   measure: str = "test split at the end of training, exact") -> str:
    """Markdown of one testbed's data: selected learning rates, end metrics, change from the
    start, allocation (``name``: ``"pass"`` or ``"best"``; default best@k when measured and
    the rewards are not 0/1; ``measure`` says how the metrics were computed)."""
    ks = tb["ks"]
    m0 = next(iter(tb["methods"].values()))
    if name is None:
        rewards = {m["config"]["reward"] for m in tb["methods"].values()}
        name = "best" if rewards - {"binary", "success", "label"} and \
            metric_key("best", ks[0]) in m0["end"] else "pass"
    lines = [f"## {title}\n"] if title else []
    sw = tb.get("sweep") or {}
    if sw.get("scores"):
        # every rate any learner was tried at (the grid plus the extensions past its edges)
        grid = sorted({r["lr"] for rs in sw["scores"].values() for r in rs})
        rows = []
        for lb, rs in sw["scores"].items():
            got = {r["lr"]: r["score"] for r in rs}
            interior = (sw.get("interior") or {}).get(lb)
            rows.append([lb, *[f"{got[v]:.4f}" if v in got else "–" for v in grid],
                         f"**{tb['methods'][lb]['config']['lr']}**"
                         + ("" if interior is None else " (interior)" if interior
                            else " (EDGE)")])
        lines.append(f"Learning-rate sweep on the validation split ({sw['seeds']} seed(s) per "
                     f"rate; score = {sw['select_by']}; starting grid {sw['grid']}, extended "
                     "past an edge until the chosen rate is interior; – = not tried):\n")
        lines.append(markdown_table(["learner", *[f"lr {v:g}" for v in grid], "selected"],
                                    rows))
        for lb, betas in (sw.get("betas") or {}).items():
            lines.append(f"\n{lb}: KL strength beta swept with the rate (best validation "
                         "score per beta; the best pair is used): "
                         + ", ".join(f"beta {b['beta']:g}: {b['score']:.4f} at lr "
                                     f"{b['lr']:g}" for b in betas)
                         + f"; chosen beta {tb['methods'][lb]['config'].get('kappo_beta')}\n")
    rows, drows = [], []
    for lb, m in tb["methods"].items():
        rows.append([lb, *[_cell(m["end"][metric_key(name, k)]) for k in ks]])
        drows.append([lb, *[_cell(np.subtract(m["end"][metric_key(name, k)],
                                              m["start"][metric_key(name, k)]))
                            for k in ks]])
    lines.append(f"\n{name}@k ({measure}), mean ± 95% t-interval over "
                 f"{len(tb['seeds'])} seeds:\n")
    lines.append(markdown_table(["learner", *[f"{name}@{k}" for k in ks]], rows))
    lines.append("\nChange from the initial policy (end − start, paired by seed):\n")
    lines.append(markdown_table(["learner", *[f"Δ{name}@{k}" for k in ks]], drows))
    arows = [[lb, *[f"{100 * np.mean(m['end'][alloc_key(b)]):.1f}%" for b in BIN_LABELS]]
             for lb, m in tb["methods"].items() if m["config"]["rollouts"] > 0
             and alloc_key(BIN_LABELS[0]) in m["end"]]
    if arows:
        lines.append("\nGradient allocation by exact pass rate (share of Σ|A_i|, SoftmaxGRPO "
                     "Table 3), accumulated over training, mean over seeds:\n")
        lines.append(markdown_table(["learner", *BIN_LABELS], arows))
    return "\n".join(lines) + "\n"


def learner_colour(label: str) -> str:
    """One colour per learner across every panel and run: ``tab10`` colour number
    ``position in LEARNERS`` as a matplotlib colour string (``"C0"``..``"C9"``), then tab20's
    light shades."""
    if label not in LEARNERS:
        raise ValueError(f"unknown learner {label!r}; known: {list(LEARNERS)}")
    i = list(LEARNERS).index(label)
    return f"C{i}" if i < 10 else _EXTRA_COLOURS[(i - 10) % len(_EXTRA_COLOURS)]


#: Colours after tab10's ten (tab20's light shades), so every learner keeps its own.
_EXTRA_COLOURS = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5")


def plot(results: Mapping[str, SettingResult], path: Path) -> None:
    """Per reward: test pass@k / best@k vs k, and test pass@1 along training (mean over seeds).
    Each learner keeps its colour (:func:`learner_colour`) in every panel, and every top panel
    has its own legend (the reward variants train different learners)."""
    plt = pyplot(extra="lab")

    rewards = list(results)
    fig, axes = plt.subplots(2, len(rewards), figsize=(5.5 * len(rewards), 8), squeeze=False)
    for j, reward in enumerate(rewards):
        st = results[reward]
        test, ks = st["test"], st["ks"]
        name = REWARD_KINDS[reward].metric
        ax, ax2 = axes[0][j], axes[1][j]
        for lb in st["learners"]:
            idx = [t for t, s in enumerate(test["slots"]) if s["learner"] == lb]
            ys = [np.mean([test["end"][metric_key(name, k)][t] for t in idx]) for k in ks]
            style = "--" if LEARNERS[lb].control_of else "-"
            ax.plot(ks, ys, style, marker="o", ms=3, label=lb, color=learner_colour(lb))
            curve = np.asarray(test["curve_pass@1"])[idx].mean(0)
            ax2.plot(test["curve_steps"], curve, style, label=lb, color=learner_colour(lb))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel(f"test {name}@k (exact)")
        ax.set_title(f"digits, {reward} rewards, N={st['n']}")
        ax.grid(alpha=0.3)
        ax2.set_xlabel("Adam step")
        ax2.set_ylabel("test pass@1 (exact)")
        ax2.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
