"""The embedded training loop: optional SFT warm-up, in-run KAPPO calibration, then RL.

:class:`Trainer` holds the run state -- config, task, policy (and frozen reference), optimizer,
run directory, checkpoints, evaluation, logging -- and drives the run:

1. SFT warm-up on the task's reference answers (``sft.steps``; skipped on resume);
2. for a run that needs a KAPPO calibration (``algorithm: apo`` / ``dpo``, or ``pg`` with
   ``kappo_grpo``) and has none from ``estimator_options``: the reference bank and its
   calibration, as planned before any work (:mod:`bestk.train.reference.plan`), saved to
   ``calibration.json``;
3. the step-0 evaluation and checkpoint;
4. ``max_steps`` RL steps of the configured algorithm (:mod:`bestk.train.algorithms`: ``pg``
   PPO-clip with any estimator, ``apo`` @k-A*PO, ``dpo`` @k-DPO), each logged to
   ``metrics.jsonl``, with evaluations every ``eval.every`` and checkpoints every
   ``checkpoint_every`` steps;
5. ``final/`` (HF model + tokenizer) and ``report.md``.

The algorithms use the run through :class:`~bestk.train.algorithms.RunContext` (the Trainer
is one). The prompts and the sampling noise of step ``s`` depend only on ``(seed, s)`` (the
algorithms draw them through :meth:`Trainer.prompt_rng`, :meth:`Trainer.draw_prompts` and
:meth:`Trainer.sample_completions`), so a run resumed from a checkpoint continues exactly as
the uninterrupted run would have. The SFT loop is :mod:`bestk.train.sft`, the task and policy
set-up :mod:`bestk.train.setup`, the progress bar and Ctrl-C :mod:`bestk.train.run.console`.

Run directory: ``config.yaml``, ``metrics.jsonl``, ``checkpoints/``, ``final/`` (HF model +
tokenizer), ``report.md`` + PNG plots, and for KAPPO runs ``calibration.json`` and the bank
(``bank.jsonl``, ``bank_tokens.safetensors``). A :class:`Trainer` holds the directory's lock
from its construction to the end of :meth:`Trainer.run` and continues a run already there when
the config allows it (see :mod:`bestk.train.run.directory`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from bestk._atomic import respect_umask, write_text_atomic
from bestk._seeds import EVAL_SAMPLING, PROMPTS, SAMPLING
from bestk.train.algorithms import ALGORITHMS
from bestk.train.algorithms.update import backward
from bestk.train.config import (
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
)
from bestk.train.model.hf import autocast, save_model
from bestk.train.model.lora import reference_policy
from bestk.train.model.policy import count_parameters
from bestk.train.optim import make_optimizer
from bestk.train.reference.bank import save_reference
from bestk.train.reference.plan import ReferencePlan, plan_reference, restrict_prompts
from bestk.train.rollout.batch import Rollout
from bestk.train.rollout.evaluate import evaluate
from bestk.train.rollout.sample_log import (
    SAMPLES_FILE,
    append_samples,
    drop_samples_after,
    eval_samples,
)
from bestk.train.rollout.sampler import sample
from bestk.train.rollout.scoring import score_batch
from bestk.train.rollout.settings import sampling_options
from bestk.train.run.checkpoint import (
    as_os_error,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from bestk.train.run.console import Stopped, StopRequest, progress_bar, transformers_progress
from bestk.train.run.directory import (
    PREVIOUS_ATTEMPT,
    RunLock,
    RunState,
    clean_temporaries,
    drop_metrics_after,
    inspect_run,
    keep_previous_attempt,
    mark_finished,
    prepare_directory,
    read_metrics,
    read_run_config,
    set_aside,
    write_run_config,
)
from bestk.train.run.guards import check_update
from bestk.train.run.report import write_report
from bestk.train.run.reporters import Reporters, resolve_report_to
from bestk.train.setup import load_run_policy, load_run_task, max_new_tokens, run_header
from bestk.train.sft import sft_warmup
from bestk.train.validation import check_reward_domain, resolve_defaults, validate

__all__ = ["Trainer", "train", "save_final", "append_record"]

_MODES = {True: "resume", False: "new", "auto": "auto", "resume": "resume", "new": "new"}


class Trainer:
    """State of one run: config, task, policy, optimizer, run directory.

    Build with ``Trainer(cfg)`` for a new run in ``cfg.out`` or ``Trainer.resume(dir)``;
    then :meth:`run`. ``on_step`` (if given) is called after each finished RL step with
    ``(step, train_metrics)`` — tests use it to simulate a crash. ``warm_start`` (a state
    dict, or a file of one) is the policy after an SFT warm-up made elsewhere: a new run
    starts from it and skips its own SFT (``bestk compare`` shares one per seed). ``cfg`` is
    validated and copied with its ``None`` = "the algorithm's default" fields filled in
    (:func:`~bestk.train.validation.resolve_defaults`); :attr:`cfg` is that copy.

    The algorithm object (:attr:`algo`, from :data:`bestk.train.algorithms.ALGORITHMS`) does
    the RL steps through this run's :class:`~bestk.train.algorithms.RunContext` members; RL
    draws its prompts from :attr:`rl_prompts` (the task's training prompts, or the calibrated
    ones of :attr:`plan`, the KAPPO reference plan).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        resume: bool | str = "auto",
        on_step: Callable | None = None,
        stored: TrainConfig | None = None,
        warm_start: Mapping[str, torch.Tensor] | str | Path | None = None,
    ):
        if resume not in _MODES:
            raise ValueError(
                f"resume must be True, False, 'auto', 'resume' or 'new', got {resume!r}"
            )
        validate(cfg)  # every value, before the directory is touched or anything is built
        cfg = resolve_defaults(cfg)
        self.cfg, self.on_step, self.warm_start = cfg, on_step, warm_start
        self.out = Path(str(cfg.out))  # resolve_defaults filled it
        self.ckpt_dir = self.out / "checkpoints"
        self.sampling_seed = cfg.seed if cfg.sampling_seed is None else cfg.sampling_seed
        self.notes: list[str] = []
        self.stop = StopRequest()  # Ctrl-C while running
        self.interrupted = False
        self.step_rewards: Any = None  # the rewards of the RL step in progress
        self._load_task()  # task options and sizes are checked here, still before any write
        created = not self.out.exists()
        self._lock = RunLock(prepare_directory(self.out))
        try:
            self._lock.acquire()
            removed = clean_temporaries(self.out)
            if removed:
                self.say("note", f"removed {len(removed)} temporary file(s) left by an "
                         f"interrupted write: {', '.join(p.name for p in removed[:4])}")
            self.state: RunState = inspect_run(cfg, _MODES[resume], stored)
            for msg in self.state.warnings:
                self.say("warning", msg)
            for msg in self.state.notes:
                self.say("note", msg)
            self._build()
        except BaseException:
            if created and self._lock.held and {p.name for p in self.out.iterdir()} <= {".lock"}:
                shutil.rmtree(self.out, ignore_errors=True)  # no trace of a run never started
            self.close()
            raise

    def _load_task(self) -> None:
        cfg = self.cfg
        self.task, self.device = load_run_task(cfg)
        self.max_new_tokens = max_new_tokens(cfg, self.task)
        self.eval_examples = self.task.eval[: cfg.eval.num_prompts or len(self.task.eval)]
        if not self.eval_examples:
            raise ValueError(f"task {self.task.name!r} has no held-out prompts to evaluate on")
        self.spec = ALGORITHMS[cfg.algorithm]
        self.plan: ReferencePlan | None = (
            plan_reference(cfg, self.spec, self.task) if self.spec.calibrated(cfg) else None)
        self.uses_kappo = self.plan is not None
        self.rl_prompts: list[dict[str, Any]] = (
            list(self.task.train) if self.plan is None else self.plan.prompts)
        self.calibration: Any = None
        self.bank: Any = None
        self._given_bank: Any = None  # kappo.bank, loaded when a new run starts
        self.algo = self.spec.make(self)  # pg loads an estimator_options calibration here
        check_reward_domain(cfg, self.task, getattr(
            self.estimator_options.get("calibration"), "kind", self.kappo_kind))
        if len(self.rl_prompts) < cfg.rollout.prompts_per_step and not self.spec.bank_completions:
            where = (f"the {len(self.rl_prompts)} calibrated prompts" if
                     len(self.rl_prompts) < len(self.task.train) else
                     f"the {len(self.task.train)} training prompts")
            raise ValueError(
                f"rollout.prompts_per_step ({cfg.rollout.prompts_per_step}) exceeds {where} of "
                f"task {self.task.name!r}"
                + (" (raise kappo.bank_prompts)" if self._samples_bank else "")
            )

    @property
    def _samples_bank(self) -> bool:
        return self.plan is not None and self.plan.bank_examples is not None

    @property
    def kappo_kind(self) -> str | None:
        """The kind of the run's KAPPO calibration (``None`` when it needs none)."""
        return None if self.plan is None else self.plan.kind

    def restrict_prompts(self, ids: set[Any], source: str) -> None:
        """Let RL draw only the training prompts whose id is in ``ids`` (a calibration's)."""
        self.rl_prompts = restrict_prompts(self.rl_prompts, ids, source, self.task)

    def _build(self) -> None:
        cfg = self.cfg
        self.model, self.tokenizer = load_run_policy(cfg, self.task, self.device)
        self.ref_model: torch.nn.Module | None = None
        self.optimizer = make_optimizer(self.model, cfg, cfg.optim.lr)
        self.step = 0
        self.opt_steps = 0
        self.sft_done = cfg.sft.steps == 0
        self.complete = self.state.kind == "complete"
        if self.complete and self.state.checkpoint is None:
            self.step = self.state.step  # final/ and its marker, no checkpoint: report only
        elif self.state.kind in ("resume", "complete"):
            self._resume()
        else:
            if self.plan is not None and self.cfg.kappo.bank is not None and self._samples_bank:
                self._given_bank = self.plan.given_bank()  # refused before any work
            if self.warm_start is not None:  # the policy after an SFT made elsewhere
                ws = self.warm_start
                self.model.load_state_dict(ws if isinstance(ws, Mapping) else torch.load(ws))
                self.sft_done = True
            self._start_dir()
        self.reporters = Reporters(
            resolve_report_to(cfg.report_to), self.out, config=config_to_dict(cfg),
            resume_step=self.step if self.state.kind == "resume" else None,
            run_name=cfg.run_name,
        )
        if not self.complete:
            self.reporters.open()  # a W&B login problem shows now, not after the SFT
            if self.state.kind == "resume":  # the allowed changes, once all is validated
                write_run_config(self.out, self.cfg)

    def close(self) -> None:
        """Close the live reporters and release the run directory's lock (done by :meth:`run`
        when it returns)."""
        reporters = getattr(self, "reporters", None)
        if reporters is not None:
            reporters.close()
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()

    def say(self, level: str, msg: str) -> None:
        """A one-line note or warning on stderr (also when the progress bar is off)."""
        self.notes.append(f"{level}: {msg}")
        print(f"{level}: {msg}", file=sys.stderr, flush=True)

    # -- setup -----------------------------------------------------------------------------
    @classmethod
    def resume(
        cls, out: str | Path, *, overrides: dict[str, Any] | list[str] | None = None, **kw: Any
    ) -> Trainer:
        """Reopen the run in ``out`` from its ``config.yaml`` (read once) and newest valid
        checkpoint.

        ``overrides`` (a nested dict, e.g. ``{"max_steps": 200}``, or ``key=value`` strings as
        ``--set`` takes them) may change what the resume policy allows
        (:data:`bestk.train.run.directory.RESUME_FREE`); other changes are refused.
        """
        out = Path(out)
        stored = read_run_config(out)
        cfg = copy.deepcopy(stored)
        if isinstance(overrides, dict):
            cfg = config_from_dict(overrides, base=cfg)
        elif overrides:
            apply_overrides(cfg, list(overrides))
        cfg.out = str(out)
        return cls(cfg, resume=True, stored=stored, **kw)

    @property
    def estimator_options(self) -> dict[str, Any]:
        """``pg``: the estimator's options as passed to ``bestk.advantages`` (a calibration
        loaded); ``{}`` for the other algorithms."""
        return getattr(self.algo, "options", {})

    @property
    def bank_samples(self) -> int:
        """Reference samples the run draws for its KAPPO bank (0 without one): part of its
        rollout budget."""
        return 0 if self.plan is None else self.plan.bank_samples

    @property
    def binary_advantages(self) -> bool:
        """``pg``: whether the estimator sees the 0/1 success rather than the raw reward."""
        return bool(getattr(self.algo, "binary", False))

    def _start_dir(self) -> None:
        kept = keep_previous_attempt(self.out) if self.state.kind == "restart" else None
        if kept is not None:  # starting over never truncates what the last attempt wrote
            self.say("note", f"the files of the attempt started over are kept in {kept}")
        write_run_config(self.out, self.cfg)
        write_text_atomic(self.out / "metrics.jsonl", "")

    def _resume(self) -> None:
        set_aside(self.state.damaged)
        if self.spec.keeps_reference(self.cfg):
            self.ref_model = reference_policy(self.model)
        assert self.state.checkpoint is not None  # verified by inspect_run under the lock
        meta = load_checkpoint(self.state.checkpoint, self.model, self.optimizer,
                               ref_model=self.ref_model, verify=False)
        self.step = int(meta["step"])
        self.opt_steps = int(meta.get("opt_steps", 0))
        self.sft_done = bool(meta.get("sft_done", True))
        if self.complete:
            return
        if self.plan is not None:
            self._use_reference(*self.plan.stored(self.out, lambda m: self.say("warning", m)))
        drop_metrics_after(self.out / "metrics.jsonl", self.step)  # those steps are redone
        drop_samples_after(self.out / SAMPLES_FILE, self.step)

    # -- logging / checkpoints ---------------------------------------------------------------
    def log(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` (flushed and fsync'ed), then send the
        record to the live reporters (``report_to``: TensorBoard, W&B)."""
        append_record(self.out / "metrics.jsonl", record)
        self.reporters.log(record)

    def checkpoint(self) -> Path:
        """Atomic checkpoint of the current state."""
        state = {"opt_steps": self.opt_steps, "sft_done": self.sft_done}
        return save_checkpoint(
            self.ckpt_dir, self.step, self.model, self.optimizer, state,
            ref_model=self.ref_model, keep=self.cfg.keep_checkpoints,
        )

    def sft(self, progress: Any = None) -> None:
        """The SFT warm-up (:func:`bestk.train.sft.sft_warmup`), logged to ``metrics.jsonl``."""
        sft_warmup(self.model, self.tokenizer, self.task, self.cfg, self.device, self.log,
                   progress, should_stop=self.stop.should_stop)
        self.sft_done = True

    # -- RL (the RunContext of the algorithms) -----------------------------------------------
    def prompt_rng(self, step: int) -> np.random.Generator:
        """The generator of step ``step``'s prompt draws (a function of ``(seed, step)``)."""
        return np.random.default_rng(PROMPTS.seed(self.cfg.seed, step))

    def draw_prompts(self, step: int) -> list[dict[str, Any]]:
        """``rollout.prompts_per_step`` distinct prompts of :attr:`rl_prompts` for ``step``."""
        rng = self.prompt_rng(step)
        idx = rng.choice(len(self.rl_prompts), size=self.cfg.rollout.prompts_per_step,
                         replace=False)
        return [self.rl_prompts[j] for j in idx]

    def sample_completions(self, examples: list[dict[str, Any]], step: int, n: int) -> Rollout:
        """``n`` completions of the current policy per example (noise of ``(seed, step)``)."""
        gen = torch.Generator(device=self.device).manual_seed(
            SAMPLING.seed(self.sampling_seed, step))
        return sample(
            self.model, self.tokenizer, [e["prompt"] for e in examples], n=n,
            max_new_tokens=self.max_new_tokens, generator=gen,
            batch_size=self.cfg.rollout.sample_batch_size, **sampling_options(self.cfg),
        )

    def score_rollout(
        self, examples: list[dict[str, Any]], ro: Rollout, n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rewards, prompt ids)`` of ``ro``'s completions, ``n`` per example in order: the
        task's reward :math:`R(y, x)` (float64) and the example's id (int64), both ``(B,)``."""
        flat = [e for e in examples for _ in range(n)]
        rewards = score_batch(self.task, flat, ro.texts, ro.metrics)
        self.step_rewards = rewards  # named by check_update if the step's update blows up
        return rewards, np.asarray([e["id"] for e in flat], dtype=np.int64)

    def optimize(self, loss: torch.Tensor | Iterable[torch.Tensor]) -> tuple[float, float]:
        """One AdamW step on ``loss`` (learning-rate warm-up, global-norm gradient clipping);
        returns ``(gradient norm before clipping, learning rate)``. A non-finite loss or
        norm stops the run before the update (:func:`bestk.train.run.guards.check_update`)."""
        w = self.cfg.optim.warmup_steps
        lr = self.cfg.optim.lr * (min(1.0, (self.opt_steps + 1) / w) if w > 0 else 1.0)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss = backward(loss)  # a tensor, or micro-batch losses (bestk.train.algorithms.update)
        clip = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip > 0 else float("inf")
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        check_update(self.step + 1, loss, gnorm, self.step_rewards)  # nan / inf: stop first
        self.optimizer.step()
        self.opt_steps += 1
        return float(gnorm), lr

    def rl_step(self, step: int) -> dict[str, Any]:
        """One RL step of the configured algorithm; returns its logged metrics."""
        return self.algo.step(step)

    # -- KAPPO reference calibration -----------------------------------------------------------
    def calibrate(self, progress: Any = None) -> None:
        """The run's reference bank and calibration, as :attr:`plan` says, from the current
        policy (the frozen reference: called after SFT, before RL), saved to the run
        directory."""
        plan = self.plan
        assert plan is not None, "calibrate: a run without a KAPPO reference plan"
        bank = plan.reference_bank(self.model, self.tokenizer, self.task, self.max_new_tokens,
                                   progress, given=self._given_bank,
                                   should_stop=self.stop.should_stop)
        cal = plan.calibrate(bank, self.task)
        save_reference(self.out, cal, bank)
        self._use_reference(cal, bank)
        self.say("note", plan.note(cal, self.out))

    def _use_reference(self, cal: Any, bank: Any) -> None:
        self.calibration, self.bank = cal, bank
        self.algo.prepare(cal, bank)

    def evaluate(self, step: int) -> dict[str, Any]:
        """Held-out evaluation at ``step`` (logged as a ``phase: eval`` line); the step-0
        one, before the first checkpoint, stops at its next batch on Ctrl-C / SIGTERM."""
        e = self.cfg.eval
        res = evaluate(
            self.model, self.tokenizer, self.task, self.eval_examples, n=e.n,
            max_new_tokens=self.max_new_tokens, seed=EVAL_SAMPLING.seed(self.sampling_seed, step),
            **sampling_options(self.cfg, "eval"),
            should_stop=self.stop.should_stop if step == 0 else None,
        )
        rec = {"phase": "eval", "step": step, **res.metrics}
        self.log(rec)
        samples = eval_samples(step, res, self.task)  # what the model saw: DIR/samples.jsonl
        append_samples(self.out / SAMPLES_FILE, samples)
        self.reporters.log_samples(step, samples)
        return rec

    # -- driver ----------------------------------------------------------------------------
    def run(self, *, progress: bool = True) -> dict[str, Any]:
        """Run (or continue) to ``max_steps``; returns the last evaluation record.

        Ctrl-C or SIGTERM finishes the current step (RL step; SFT step, bank batch or step-0
        evaluation batch), writes a checkpoint (once there is one to continue) and returns with
        ``self.interrupted = True`` (a second one aborts at once); ``--resume`` continues.
        A Ctrl-C during the final save lets the save finish (the run is then complete).
        A complete run (:attr:`complete`) returns its last evaluation at once. The run
        directory's lock is released when this returns or raises.
        """
        try:
            return _drive(self, progress)
        finally:
            self.close()

    def last_evaluation(self) -> dict[str, Any]:
        """The newest ``phase: eval`` record of ``metrics.jsonl`` (``{}`` if none)."""
        evals = [r for r in read_metrics(self.out / "metrics.jsonl") if r["phase"] == "eval"]
        return evals[-1] if evals else {}

    def finish(self, *, progress: bool = False) -> None:
        """Save ``final/`` (HF model + tokenizer, :func:`save_final`) and write the report with
        plots; the run is marked complete (``DIR/.finished``, the step) only after the report."""
        save_final(self.out, self.model, self.tokenizer, progress=progress)
        write_report(self.out)
        mark_finished(self.out, self.step)


def _drive(tr: Trainer, progress: bool) -> dict[str, Any]:
    """:meth:`Trainer.run`: SFT, calibration, step-0 evaluation and checkpoint, the RL steps,
    ``final/`` and the report, or a checkpoint and a note after a Ctrl-C."""
    cfg, stop = tr.cfg, tr.stop
    tr.interrupted, where = False, ""
    if tr.complete:
        tr.say("note", f"run {str(tr.out)!r} is already complete (step {tr.step} of "
               f"{cfg.max_steps}); nothing to do")
        return tr.last_evaluation()
    console = Console(stderr=True, quiet=not progress)
    console.print(_start_line(tr))
    console.print(run_header(cfg, tr.task, tr.tokenizer), markup=False)
    last_eval: dict[str, Any] = {}
    with stop:
        try:
            with progress_bar(console, progress) as bar, autocast(tr.device,
                                                                  cfg.model.autocast):
                if tr.step == 0 and not tr.sft_done:
                    tr.sft(bar)
                if tr.step == 0 and latest_checkpoint(tr.ckpt_dir) is None:
                    if tr.uses_kappo:
                        tr.calibrate(bar)
                    last_eval = tr.evaluate(0)
                    if tr.spec.keeps_reference(cfg):
                        tr.ref_model = reference_policy(tr.model)
                    tr.checkpoint()
                last_eval = _rl_steps(tr, bar, last_eval)
        except Stopped as e:  # before the first checkpoint: in SFT, the bank or evaluation 0
            where = str(e)
        if stop.requested and (tr.step < cfg.max_steps or where):
            tr.interrupted = True
            print(_interrupted_line(tr, where), file=sys.stderr, flush=True)
            return last_eval
        stop_before_save = stop.requested
        tr.finish(progress=progress)
        if stop.requested and not stop_before_save:
            tr.say("note", "Ctrl-C during the final save: it was completed first; the run "
                   f"is complete (final model in {tr.out / 'final'})")
    return last_eval or tr.last_evaluation()


def _rl_steps(tr: Trainer, bar: Any, last_eval: dict[str, Any]) -> dict[str, Any]:
    """The RL steps after :attr:`step` until ``max_steps`` or a Ctrl-C, with their
    evaluations and checkpoints; returns the last evaluation (``last_eval`` if none)."""
    cfg = tr.cfg
    rl = bar.add_task("RL", total=cfg.max_steps, completed=tr.step)
    live = ""
    for step in range(tr.step + 1, cfg.max_steps + 1):
        if tr.stop.requested:
            break
        m = tr.rl_step(step)
        tr.log(m)
        tr.step = step
        if step % cfg.eval.every == 0 or step == cfg.max_steps:
            last_eval = tr.evaluate(step)
            live = (f" | eval pass@1={last_eval['pass@1']:.3f} "
                    f"pass@{cfg.eval.n}={last_eval[f'pass@{cfg.eval.n}']:.3f}")
        if step % cfg.checkpoint_every == 0 or step == cfg.max_steps:
            tr.checkpoint()
        bar.update(rl, completed=step, description=tr.algo.describe(m) + live)
        if tr.on_step is not None:
            tr.on_step(step, m)
    return last_eval


def _interrupted_line(tr: Trainer, where: str) -> str:
    """Checkpoint a run stopped by Ctrl-C / SIGTERM (once it has one to continue) and say
    how it continues."""
    if where or latest_checkpoint(tr.ckpt_dir) is None:
        return (f"interrupted during {where or 'start-up'}, before the run's first checkpoint: "
                f"nothing to continue from; the same command starts the run over (keeping this "
                f"attempt's files in {tr.out / PREVIOUS_ATTEMPT})")
    tr.checkpoint()
    return (f"interrupted after step {tr.step}; checkpoint saved. Continue with "
            f"`bestk train --resume {tr.out}`")


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line to ``path``, flushed and fsync'ed (an ``OSError``
    names the file). The line is strict JSON: a value that is not a finite number (``nan``,
    ``inf``) is written as ``null``, never as the bare ``NaN`` / ``Infinity`` strict readers
    reject."""
    line = json.dumps({k: None if isinstance(v, float) and not math.isfinite(v) else v
                       for k, v in record.items()}, allow_nan=False)
    try:
        with open(path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        if e.filename is None and e.errno is not None:  # write() errors name no file
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def _start_line(tr: Trainer) -> str:
    """The line a run starts with: task, estimator (or algorithm and KAPPO k, beta), size."""
    cfg = tr.cfg
    what = (f"estimator={cfg.estimator}" if tr.spec.uses_estimator else
            f"algorithm={cfg.algorithm} k={cfg.kappo.k} beta={cfg.kappo.beta}")
    return (
        f"[bold]bestk train[/] task={tr.task.name} {what} "
        f"params={count_parameters(tr.model):,}"
        + (f" (LoRA: {count_parameters(tr.model, trainable=True):,} train)"
           if cfg.model.lora.r > 0 else "")
        + f" out={tr.out}"
        + (f" (resuming at step {tr.step})" if tr.state.kind == "resume" else "")
    )


def save_final(out: Path, model: Any, tokenizer: Any, *, progress: bool = False) -> None:
    """Save ``out/final/`` (HF model + tokenizer; a LoRA policy merged, + ``final/adapter/``).

    ``final/`` is written to ``.final-tmp`` and swapped in with two renames, so a crash leaves
    the previous ``final/`` (or, between the renames, ``.final-old``) intact.
    """
    final, tmp, old = out / "final", out / ".final-tmp", out / ".final-old"
    for leftover in (tmp, old):
        if leftover.exists():
            shutil.rmtree(leftover)
    try:
        with transformers_progress(progress):
            save_model(model, tmp)
            tokenizer.save_pretrained(tmp)
    except Exception as e:  # safetensors reports I/O failures as SafetensorError
        shutil.rmtree(tmp, ignore_errors=True)
        raise as_os_error(e, tmp) from None
    respect_umask(tmp)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)


def train(cfg: TrainConfig, *, progress: bool = True) -> dict[str, Any]:
    """Run ``cfg`` to the end (a new run, or the one in ``cfg.out``; see :class:`Trainer`)."""
    return Trainer(cfg).run(progress=progress)
