"""``bestk lab bandit``, ``bestk lab digits``, ``bestk lab sparse`` and ``bestk lab kappo``.

Heavy imports stay inside the command bodies so ``bestk --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from bestk._typer import Group, cli_errors, number_list, out_directory

__all__ = ["register"]

lab_app = typer.Typer(
    name="lab",
    help="Fast testbeds with exact answers: softmax bandits, digits and sparse classification.",
    no_args_is_help=True,
    cls=Group,
    rich_markup_mode=None,  # plain click help: typer's rich help costs ~0.3 s
)


def _needs(*modules: str) -> None:
    """The ``lab`` extra's packages this command uses are installed, checked before any work
    (else one line naming the extra, exit 2: :class:`bestk._typer.Group`)."""
    from bestk._optional import require

    for module in modules:
        require(module, extra="lab")


@lab_app.command("bandit")
def bandit_cmd(
    out: Path = typer.Option(Path("runs/lab-bandit"), "--out", "-o", help="Output directory."),
    fast: bool = typer.Option(False, "--fast", help="Seconds-long settings (tests, smoke runs)."),
    ns: str = typer.Option(None, "--ns", help="Group sizes of the exact table, e.g. 4,8."),
    steps: int = typer.Option(None, "--steps", help="Learning-curve steps."),
    seeds: int = typer.Option(None, "--seeds", help="Learning-curve seeds."),
    seed: int = typer.Option(None, "--seed", help="Base RNG seed."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Exact bias / variance of every estimator on softmax bandits + best@k learning curves.

    Writes OUT/results.json, OUT/results.md and OUT/curves.png.
    """
    _needs("scipy", "matplotlib")
    from bestk.lab.bandit import BanditConfig, run_bandit

    with cli_errors():  # a bad setting is refused as it is assigned (the config's schema)
        cfg = BanditConfig.fast() if fast else BanditConfig()
        if ns is not None:
            cfg.ns = number_list(ns, "--ns", int)
        for name, val in (("steps", steps), ("seeds", seeds), ("seed", seed)):
            if val is not None:
                setattr(cfg, name, val)
        out_directory(out, "--out/-o")
        run_bandit(cfg, out, progress=not quiet)
    typer.echo(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'curves.png'}")


@lab_app.command("digits")
def digits_cmd(
    out: Path = typer.Option(Path("runs/lab-digits"), "--out", "-o", help="Output directory."),
    fast: bool = typer.Option(False, "--fast", help="Seconds-long settings (tests, smoke runs)."),
    n: int = typer.Option(None, "--n", help="Rollouts per image (group size N)."),
    rewards: str = typer.Option(None, "--rewards", help="binary,graded (or one of them)."),
    learners: str = typer.Option(None, "--learners", help="Comma-separated learner labels."),
    steps: int = typer.Option(None, "--steps", help="Adam steps per run."),
    seeds: int = typer.Option(None, "--seeds", help="Paired test seeds per learner."),
    lr_grid: str = typer.Option(None, "--lr-grid",
                                help="Learning rates of the validation sweep, e.g. 1e-3,3e-3."),
    seed: int = typer.Option(None, "--seed", help="Base RNG seed."),
    resume: bool = typer.Option(True, "--resume/--no-resume",
                                help="Reuse finished settings of an identical earlier run."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """SoftmaxGRPO-style classification on scikit-learn digits: exact ML vs the estimators at
    equal rollouts, learning rate per learner from a validation sweep, exact test metrics.

    Writes OUT/results.json, OUT/testbeds.json (per-seed data), OUT/results.md,
    OUT/digits.png and OUT/config.json.
    """
    _needs("sklearn", "scipy", "matplotlib")
    from bestk.lab.digits import DigitsConfig, run_digits

    with cli_errors():  # a bad setting is refused as it is assigned (the config's schema)
        cfg = DigitsConfig.fast() if fast else DigitsConfig()
        if rewards is not None:
            cfg.rewards = tuple(x.strip() for x in rewards.split(",") if x.strip())
        if learners is not None:
            cfg.learners = tuple(x.strip() for x in learners.split(",") if x.strip())
        if lr_grid is not None:
            cfg.lr_grid = number_list(lr_grid, "--lr-grid")
        for name, val in (("n", n), ("steps", steps), ("seeds", seeds), ("seed", seed)):
            if val is not None:
                setattr(cfg, name, val)
        out_directory(out, "--out/-o")
        run_digits(cfg, out, progress=not quiet, resume=resume)
    typer.echo(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'digits.png'}")


@lab_app.command("kappo")
def kappo_cmd(
    out: Path = typer.Option(Path("runs/lab-kappo"), "--out", "-o", help="Output directory."),
    fast: bool = typer.Option(False, "--fast", help="Seconds-long settings (tests, smoke runs)."),
    ks: str = typer.Option(None, "--ks", help="Objective parameters k, e.g. 1,2,4."),
    methods: str = typer.Option(
        None, "--methods", help="apo,dpo,kappo_grpo,rloo,drgrpo,direct (or a subset)."
    ),
    kinds: str = typer.Option(None, "--kinds", help="binary,winrate (or one of them)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar or table."),
) -> None:
    """KAPPO's @k-A*PO, @k-DPO and @k-GRPO on exact softmax bandits vs the closed-form optimum.

    Trains each method with its exact expected update to convergence and reports the total
    variation to the limit it provably converges to and to the closed form (KAPPO Props.
    4.1/4.2 binary, 4.7 win-rate). Writes OUT/results.json and OUT/results.md.
    """
    from bestk.lab.kappo import KappoLabConfig, rich_table, run_kappo

    with cli_errors():  # a bad setting is refused as it is assigned (the config's schema)
        cfg = KappoLabConfig.fast() if fast else KappoLabConfig()
        if ks is not None:
            cfg.ks = number_list(ks, "--ks", int)
        for name, val in (("methods", methods), ("kinds", kinds)):
            if val is not None:
                setattr(cfg, name, tuple(x.strip() for x in val.split(",") if x.strip()))
        out_directory(out, "--out/-o")
        result = run_kappo(cfg, out, progress=not quiet)
    if not quiet:
        from rich.console import Console

        Console().print(rich_table(result))
    bad = sum(not c["passed"] for c in result["cases"])
    typer.echo(
        f"{len(result['cases']) - bad}/{len(result['cases'])} cases within tolerance; "
        f"wrote {out / 'results.json'}, {out / 'results.md'}"
    )


@lab_app.command("sparse")
def sparse_cmd(
    out: Path = typer.Option(Path("runs/lab-sparse"), "--out", "-o", help="Output directory."),
    fast: bool = typer.Option(False, "--fast", help="Seconds-long settings (tests, smoke runs)."),
    ns: str = typer.Option(None, "--ns", help="Rollouts per example, e.g. 16,64."),
    learners: str = typer.Option(None, "--learners", help="Comma-separated learner labels."),
    steps: int = typer.Option(None, "--steps", help="Adam steps per run."),
    seeds: int = typer.Option(None, "--seeds", help="Paired test seeds per learner."),
    seed: int = typer.Option(None, "--seed", help="Base RNG seed."),
    resume: bool = typer.Option(True, "--resume/--no-resume",
                                help="Reuse finished settings of an identical earlier run."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """SoftmaxGRPO section 6.1 small: 1000-class composite digits (initial pass rate ~0.001),
    REINFORCE / GRPO / SoftmaxGRPO / exact ML at equal rollouts.

    Writes OUT/results.json, OUT/testbeds.json, OUT/results.md, OUT/sparse.png, OUT/config.json.
    """
    _needs("sklearn", "scipy", "matplotlib")
    from bestk.lab.sparse import SparseConfig, run_sparse

    with cli_errors():  # a bad setting is refused as it is assigned (the config's schema)
        cfg = SparseConfig.fast() if fast else SparseConfig()
        if ns is not None:
            cfg.ns = number_list(ns, "--ns", int)
        if learners is not None:
            cfg.learners = tuple(x.strip() for x in learners.split(",") if x.strip())
        for name, val in (("steps", steps), ("seeds", seeds), ("seed", seed)):
            if val is not None:
                setattr(cfg, name, val)
        out_directory(out, "--out/-o")
        run_sparse(cfg, out, progress=not quiet, resume=resume)
    typer.echo(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'sparse.png'}")


def register(app: typer.Typer) -> None:
    """Attach the ``lab`` command group to the ``bestk`` app."""
    app.add_typer(lab_app, name="lab")
