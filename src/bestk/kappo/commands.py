"""``bestk calibrate`` and ``bestk plot weights``.

Heavy imports (numpy math, matplotlib) stay inside the command bodies so ``bestk --help`` stays
fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from bestk._typer import (
    Group,
    fail,
    number_list,
    os_error_message,
    out_directory,
    out_file,
)

__all__ = ["register", "plot_app"]

plot_app = typer.Typer(
    name="plot",
    help="Figures of the closed-form theory (prompt weights, KAPPO pressure, win-rate transform).",
    no_args_is_help=True,
    cls=Group,
    rich_markup_mode=None,  # plain click help: typer's rich help costs ~0.3 s
)


def calibrate_cmd(
    bank: Path = typer.Argument(
        ..., help='Reference bank: JSONL rows {"prompt_id", "reward"|"rewards"} or parquet.'
    ),
    k: int = typer.Option(..., "--k", help="The @k objective parameter (integer >= 1)."),
    beta: float = typer.Option(..., "--beta", help="KL strength beta > 0."),
    kind: str = typer.Option("binary", "--kind", help="binary (pass@k) or winrate (max@k)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the calibration JSON."),
) -> None:
    """Calibrate KAPPO from a reference bank (Algorithm 1 / 2) and save it as versioned JSON."""
    import time

    from rich.console import Console
    from rich.table import Table

    from bestk.kappo.calibration import calibrate, check_calibration_args

    t0 = time.perf_counter()
    try:
        check_calibration_args(k, beta, kind, names=("--k", "--beta", "--kind"))
        if bank.is_dir():
            raise ValueError(f"bank {str(bank)!r} is a directory; give a JSONL or parquet file")
        out_file(out, "--out", [("the bank file it calibrates from", bank)])
        cal = calibrate(bank, k, beta, kind)
        cal.save(out)
    except ValueError as e:
        fail(e)
    except OSError as e:
        fail(os_error_message(e))
    elapsed = time.perf_counter() - t0

    table = Table(title=f"KAPPO calibration ({kind}, k={k}, beta={beta})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("prompts", f"{cal.num_prompts:,}")
    table.add_row("bank size M", str(cal.M))
    table.add_row("reference rewards", f"{int(cal.bank_sizes.sum()):,}")
    for quantity, value in cal.kind_spec.summary_rows(cal):
        table.add_row(quantity, value)
    table.add_row("bank checksum", cal.checksum[:23] + "...")
    table.add_row("written to", str(out))
    table.add_row("time", f"{elapsed:.2f} s")
    Console().print(table)


#: The largest group size ``bestk plot weights`` draws (its exact SoftmaxGRPO weights hold a few
#: float64 matrices of 499 x M: 40 MB each here; larger groups are near their large-M limit).
MAX_GROUP_SIZE = 10_000


@plot_app.command("weights")
def plot_weights_cmd(
    out: Path = typer.Option(
        Path("."), "--out", "-o", help="Output directory (default: the current directory; "
        "the project's figures: -o docs/img)."
    ),
    group_size: int = typer.Option(8, "--group-size", "-M",
                                   help=f"Group size M (2 to {MAX_GROUP_SIZE:,})."),
    taus: str = typer.Option("0.1,0.3,1.0,3.0", "--taus", help="SoftmaxGRPO temperatures."),
    beta: float = typer.Option(0.1, "--beta", help="KL strength for the KAPPO panels."),
) -> None:
    """Draw prompt weights omega(p), KAPPO beta_eff(p_ref) and the win-rate transform T(q):
    OUT/weights.png, OUT/kappo_beta_eff.png, OUT/kappo_winrate_T.png."""
    import math

    from bestk._optional import pyplot

    try:  # bad values: one ``error:`` line (the group's), not click's usage block
        tau_list = list(number_list(taus, "--taus", positive=True))
    except typer.BadParameter as e:
        raise ValueError(e.message) from None
    if not all(math.isfinite(t) for t in tau_list):
        raise ValueError(f"--taus must be finite numbers, got {taus!r}")
    if not 2 <= group_size <= MAX_GROUP_SIZE:  # (499, M) float64 matrices, a few of them
        raise ValueError(f"--group-size must be an integer in [2, {MAX_GROUP_SIZE}], got "
                         f"{group_size}")
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"--beta must be a finite number > 0, got {beta}")
    out_directory(out, "--out/-o")
    plt = pyplot(extra="plot")
    import numpy as np

    from bestk import theory
    from bestk.kappo import binary_calibration, winrate_T

    out.mkdir(parents=True, exist_ok=True)
    p = np.linspace(0.002, 0.998, 499)
    M = group_size
    written = []

    # 1. Prompt weights (SoftmaxGRPO Fig. 1 / Table 1), each normalised to 1 at p = 0.5.
    fig, ax = plt.subplots(figsize=(6.4, 4.4))

    def norm(w: np.ndarray) -> np.ndarray:
        mid = np.interp(0.5, p, w)
        return w / mid

    ax.plot(p, norm(theory.reinforce_weight(p)), "k-", label="REINFORCE: 1")
    ax.plot(p, norm(theory.ml_weight(p)), "k--", label="ML: 1/p")
    ax.plot(p, norm(theory.grpo_weight(p)), "r-", label="GRPO: 1/sqrt(p(1-p))")
    ax.plot(p, norm(theory.maxrl_weight(p, M - 1)), "b--", label=f"MaxRL(T={M - 1})")
    for tau in tau_list:
        w = theory.softmax_grpo_weight(p, M, tau)
        ax.plot(p, norm(w), label=f"SoftmaxGRPO M={M}, tau={tau}")
    ax.set_yscale("log")
    written.append(_save(fig, out / "weights.png", "pass rate p",
                         "prompt weight omega(p) / omega(0.5)",
                         "Prompt weighting of binary-reward objectives", legend_size=7))

    # 2. KAPPO effective regularisation (KAPPO Fig. 1a).
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for k in (1, 2, 4):
        cal = binary_calibration(p, k, beta)
        ax.plot(p, cal.beta_eff, label=f"k={k}")
    ax.set_yscale("log")
    written.append(_save(fig, out / "kappo_beta_eff.png", "reference pass rate p_ref",
                         "beta_eff = beta / (k (1-p*)^(k-1))",
                         f"KAPPO prompt-adaptive regularisation (beta={beta})"))

    # 3. Win-rate transform T(q) (Prop. 4.7).
    q = np.linspace(0.0, 1.0, 401)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for k in (1, 2, 4, 8):
        ax.plot(q, winrate_T(q, k, beta), label=f"k={k}")
    written.append(_save(fig, out / "kappo_winrate_T.png", "reference win rate q = F_ref(r)",
                         "T(q) = beta log(C + G(q)^k / beta)",
                         f"KAPPO win-rate transform (beta={beta})"))
    for path in written:
        typer.echo(f"wrote {path}")


def _save(fig, path: Path, xlabel: str, ylabel: str, title: str, *,
          legend_size: float | None = None) -> Path:
    """Label the figure's one panel (legend, light grid), lay out, write as a 120-dpi PNG
    (atomically; a failed write names ``path``) and close ``fig``; return ``path``."""
    from bestk.figures import save_figure

    ax = fig.axes[0]
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=legend_size)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    return path


def register(app: typer.Typer) -> None:
    """Attach ``calibrate`` and the ``plot`` group to the ``bestk`` app."""
    app.command("calibrate")(calibrate_cmd)
    app.add_typer(plot_app, name="plot")
