"""The embedded training loop: optional SFT warm-up, in-run KAPPO calibration, then RL.

:class:`Trainer` holds the run state -- the resolved config, task, policy (and frozen
reference), optimizer, run directory and its log -- and its methods drive the run
(:meth:`Trainer.run`):

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
the uninterrupted run would have. The pieces with state of their own live beside it: the
optimizer (:class:`bestk.train.optim.PolicyOptimizer`), the log (:class:`bestk.train.run.log.
RunLog`), the run directory's lock and resume policy (:mod:`bestk.train.run.directory`), the
SFT loop (:mod:`bestk.train.sft`), the task and policy set-up (:mod:`bestk.train.setup`), the
progress bar (:mod:`bestk.train.run.console`) and Ctrl-C
(:mod:`bestk.train.runtime.stop`).

Run directory: ``config.yaml``, ``metrics.jsonl``, ``checkpoints/``, ``final/`` (HF model +
tokenizer), ``report.md`` + PNG plots, and for KAPPO runs ``calibration.json`` and the bank
(``bank.jsonl``, ``bank_tokens.safetensors``). A :class:`Trainer` holds the directory's lock
from its construction to the end of :meth:`Trainer.run` and continues a run already there when
the config allows it (see :mod:`bestk.train.run.directory`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import Progress

from bestk._seeds import EVAL_SAMPLING, PROMPTS, SAMPLING
from bestk.kappo import Calibration
from bestk.tasks import Example, Task
from bestk.train.algorithms._base import StepMetrics
from bestk.train.config import (
    ResolvedTrainConfig,
    TrainConfig,
)
from bestk.train.model.hf import autocast, save_final
from bestk.train.model.lora import reference_policy
from bestk.train.model.policy import count_parameters
from bestk.train.optim import PolicyOptimizer
from bestk.train.reference.bank import ReferenceBank, save_reference
from bestk.train.rollout.batch import Rollout
from bestk.train.rollout.engine import open_engines, synced_sample
from bestk.train.rollout.evaluate import evaluate, pass_summary
from bestk.train.rollout.scoring import score_batch
from bestk.train.rollout.settings import eval_noise_seed
from bestk.train.rollout.shared_start import shared_start_evaluation
from bestk.train.run.console import RunProgress, interrupted_line, progress_bar, start_line
from bestk.train.run.data import check_run_data
from bestk.train.run.directory import (
    RunDirectory,
    RunState,
    mark_finished,
    resume_config,
    set_aside,
    write_run_config,
)
from bestk.train.run.log import Record, RunLog
from bestk.train.run.report import write_report
from bestk.train.runtime.files import (
    global_rng_kept,
    last_run_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
)
from bestk.train.runtime.stop import Stopped, StopRequest
from bestk.train.setup import (
    RunSetup,
    load_run_policy,
    run_header,
    tokenizer_hint,
    unknown_characters_warning,
)
from bestk.train.sft import sft_warmup
from bestk.train.steps import RunSummary, run_summary

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from transformers import PreTrainedTokenizerBase

    from bestk.train.model.policy import Reference

__all__ = ["Trainer", "train", "evaluation_due"]

_MODES = {True: "resume", False: "new", "auto": "auto", "resume": "resume", "new": "new"}


class Trainer(RunSetup):
    """State of one run (module docstring): ``Trainer(cfg)`` for a new run in ``cfg.out`` (or
    the one there), ``Trainer.resume(dir)``; then :meth:`run`. It starts as a
    :class:`~bestk.train.setup.RunSetup` (:attr:`cfg` checked and resolved once, the task,
    the KAPPO plan, every check made before the directory is touched). ``on_step(step,
    metrics)`` is called after each RL step (tests simulate crashes with it); ``warm_start``
    (a state dict, or its file) is the policy after an SFT made elsewhere (``bestk compare``
    shares one per seed): a new run starts from it and skips its own SFT. The algorithm
    (:attr:`algo`) sees the run as its :class:`~bestk.train.algorithms.RunContext`; RL draws
    from :attr:`rl_prompts` (the training prompts, or :attr:`plan`'s calibrated ones)."""

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        resume: bool | str = "auto",
        on_step: Callable[[int, StepMetrics], None] | None = None,
        stored: TrainConfig | None = None,
        warm_start: Mapping[str, torch.Tensor] | str | Path | None = None,
    ):
        if resume not in _MODES:
            raise ValueError(
                f"resume must be True, False, 'auto', 'resume' or 'new', got {resume!r}"
            )
        super().__init__(cfg)  # every check, before the directory is touched or a model built
        self.on_step, self.warm_start = on_step, warm_start
        self.ckpt_dir = self.out / "checkpoints"
        self.notes: list[str] = []
        self.stop = StopRequest()  # Ctrl-C while running
        self.continue_with: str | None = None  # what continues it, if not bestk train --resume
        self.interrupted = False
        self.step_rewards: np.ndarray | None = None  # the rewards of the RL step in progress
        self.calibration: Calibration | None = None
        self.bank: ReferenceBank | None = None
        self._given_bank: ReferenceBank | None = None  # kappo.bank, loaded when a run starts
        self.algo = self.spec.make(self)
        self.directory = RunDirectory(self.out)
        try:
            self.state: RunState = self.directory.open(self.cfg, _MODES[resume], stored, self.say)
            if self.state.kind == "resume" and self.state.checkpoint is not None:
                check_run_data(self.state.checkpoint, self.data, self.cfg)  # files replaced?
            self._build()
        except BaseException:
            self.directory.discard_if_unused()  # no trace of a run never started
            self.close()
            raise

    @classmethod
    def resume(cls, out: str | Path, *, overrides: Mapping[str, object] | list[str] | None = None,
               **kw: Any) -> Trainer:
        """Reopen the run in ``out`` from its ``config.yaml`` (read once) and newest valid
        checkpoint; ``overrides`` may change what the resume policy allows
        (:func:`~bestk.train.run.directory.resume_config`,
        :data:`~bestk.train.run.directory.RESUME_FREE`); other changes are refused."""
        cfg, stored = resume_config(out, overrides)
        return cls(cfg, resume=True, stored=stored, **kw)

    def _build(self) -> None:
        cfg, kind = self.cfg, self.state.kind
        self.complete = kind == "complete"
        self.log = RunLog.of_run(self.out, cfg)
        if self.complete:  # nothing to run: no model is loaded, no engine (vLLM) started
            self.step = self.state.step
            return
        self.model, self.tokenizer = load_run_policy(cfg, self.task, self.device)
        for msg in _prompt_warnings(cfg, self.tokenizer, [*self.task.train, *self.eval_examples]):
            self.say("warning", msg)
        self.engines = open_engines(cfg, self.model, self.tokenizer, self.max_new_tokens)
        self.ref_model: Reference | None = None
        self.optim = PolicyOptimizer(self.model, cfg)
        self.step = 0
        self.sft_done = cfg.sft.steps == 0
        if kind == "resume":
            self._continue()
        else:
            self._start()
        self.log.reporters.resume_step = self.step if kind == "resume" else None
        self.log.reporters.open()  # a W&B login problem shows now, not after the SFT
        if kind == "resume":  # the allowed changes, once all is validated
            write_run_config(self.out, cfg)

    def _start(self) -> None:
        """A new run (or one started over): the given bank and warm start, a fresh log."""
        if self.plan is not None and self.cfg.kappo.bank is not None and \
                self.plan.bank_examples is not None:
            self._given_bank = self.plan.given_bank()  # refused before any work
        if self.warm_start is not None:  # the policy after an SFT made elsewhere
            ws = self.warm_start
            self.model.load_state_dict(ws if isinstance(ws, Mapping) else load_weights(ws))
            self.sft_done = True
        self.directory.begin(self.cfg, restart=self.state.kind == "restart", say=self.say)
        self.log.start()

    def _continue(self) -> None:
        """A run resumed from its newest valid checkpoint."""
        set_aside(self.state.damaged)
        if self.spec.keeps_reference(self.cfg):
            self.ref_model = reference_policy(self.model)
        assert self.state.checkpoint is not None  # verified by inspect_run under the lock
        meta = load_checkpoint(self.state.checkpoint, self.model, self.optim.optimizer,
                               ref_model=self.ref_model, verify=False, masters=self.optim.masters())
        self.step = int(meta["step"])
        self.optim.steps = int(meta.get("opt_steps", 0))
        self.sft_done = bool(meta.get("sft_done", True))
        if self.plan is not None:
            self._use_reference(*self.plan.stored(self.out, lambda m: self.say("warning", m)))
        self.log.truncate(self.step)  # the steps after the checkpoint are redone

    def close(self) -> None:
        """Close the live reporters and release the run directory (:meth:`run` does)."""
        for name, method in (("engines", "close"), ("log", "close"), ("directory", "release")):
            part = getattr(self, name, None)  # what a failed start got to build
            if part is not None:
                getattr(part, method)()

    # -- what the run is ------------------------------------------------------------------------
    @property
    def estimator_options(self) -> dict[str, object]:
        """``pg``: the options given to ``bestk.advantages`` (a calibration loaded); else {}."""
        return dict(getattr(self.algo, "options", {}))

    @property
    def binary_advantages(self) -> bool:
        """``pg``: whether the estimator sees the 0/1 success rather than the raw reward."""
        return bool(getattr(self.algo, "binary", False))

    def summary(self) -> RunSummary:
        """What the run was and measured (:func:`~bestk.train.steps.run_summary`), with its
        algorithm's estimator options and reward (known once it is prepared)."""
        return run_summary(self, self.estimator_options, self.binary_advantages)

    # -- the driver -----------------------------------------------------------------------------
    def run(self, *, progress: bool = True) -> Record:
        """Run (or continue) to ``max_steps``; returns the last evaluation record. Ctrl-C or
        SIGTERM finishes the current step (RL step; SFT step, bank batch or step-0 evaluation
        batch), checkpoints (once there is one to continue) and returns with
        :attr:`interrupted` set (a second one aborts at once); a Ctrl-C during the final save
        lets it finish. A complete run returns its last evaluation at once. The lock is
        released when this returns or raises."""
        try:
            if self.complete:
                self.say("note", f"run {str(self.out)!r} is already complete (step {self.step} "
                         f"of {self.cfg.max_steps}); nothing to do")
                return self.log.last_evaluation()
            return self._drive(progress)
        finally:
            self.close()

    def _drive(self, progress: bool) -> Record:
        cfg, stop = self.cfg, self.stop
        self.interrupted, where = False, ""
        console = Console(stderr=True, quiet=not progress)
        _print_start(console, cfg, self.task, self.model, self.tokenizer, out=self.out,
                     uses_estimator=self.spec.uses_estimator,
                     resuming_at=self.step if self.state.kind == "resume" else None)
        last_eval: Record = {}
        with stop:
            try:
                with progress_bar(console, progress) as bar, autocast(self.device,
                                                                      cfg.model.autocast):
                    if self.step == 0 and not self.sft_done:
                        self.sft(bar)
                    if self.step == 0 and _own_checkpoint(self.ckpt_dir, self.state) is None:
                        if self.plan is not None:
                            self.calibrate(bar)
                        last_eval = self.evaluate(0, bar)
                        if self.spec.keeps_reference(cfg):
                            self.ref_model = reference_policy(self.model)
                        self.checkpoint()
                    last_eval = self._rl_steps(bar, last_eval)
            except Stopped as e:  # before the first checkpoint: in SFT, the bank or eval 0
                where = str(e)
            if stop.requested and (self.step < cfg.max_steps or where):
                self.interrupted = True
                print(self._interrupted_line(where), file=sys.stderr, flush=True)
                return last_eval
            stop_before_save = stop.requested
            self.finish(progress=progress)
            if stop.requested and not stop_before_save:
                self.say("note", "Ctrl-C during the final save: it was completed first; the "
                         f"run is complete (final model in {self.out / 'final'})")
        return last_eval or self.log.last_evaluation()

    def _rl_steps(self, bar: RunProgress, last_eval: Record) -> Record:
        """The RL steps after :attr:`step` until ``max_steps`` or a Ctrl-C, with their
        evaluations and checkpoints; returns the last evaluation (``last_eval`` if none)."""
        cfg = self.cfg
        rl = bar.add_task("RL", total=cfg.max_steps, completed=self.step)
        if evaluation_due(cfg, self.step) and self.log.reopen_evaluation(self.step):
            with global_rng_kept():  # lost from the log, or max_steps lowered to the step done
                last_eval = self.evaluate(self.step)
        for step in range(self.step + 1, cfg.max_steps + 1):
            if self.stop.requested:
                break
            m = self.rl_step(step)
            self.log.record(m)
            self.step = step
            evaluated = evaluation_due(cfg, step)
            if evaluated:
                last_eval = self.evaluate(step, bar)
            if step % cfg.checkpoint_every == 0 or step == cfg.max_steps:
                self.checkpoint()
            bar.step(rl, step, self.algo.describe(m),  # in a log: a line a step
                     evaluation=pass_summary(last_eval, cfg.eval.n) if evaluated else "",
                     evaluations_left=evaluations_between(cfg, step, cfg.max_steps))
            if self.on_step is not None:
                self.on_step(step, m)
        return last_eval

    def _interrupted_line(self, where: str) -> str:
        """Checkpoint a run stopped by Ctrl-C / SIGTERM (once it has one to continue) and say
        how it continues (:func:`~bestk.train.run.console.interrupted_line`)."""
        saved = not where and _own_checkpoint(self.ckpt_dir, self.state) is not None
        if saved:
            self.checkpoint()
        return interrupted_line(where, self.out, self.step if saved else None, self.continue_with)

    def finish(self, *, progress: bool = False) -> None:
        """Save ``final/`` (HF model + tokenizer, :func:`~bestk.train.model.hf.save_final`) and
        write the report with plots; the run is marked complete (``DIR/.finished``, the step)
        only after the report."""
        save_final(self.out, self.model, self.tokenizer, progress=progress)
        write_report(self.out)
        mark_finished(self.out, self.step)

    # -- the phases -----------------------------------------------------------------------------
    def sft(self, progress: Progress | None = None) -> None:
        """The SFT warm-up (:func:`bestk.train.sft.sft_warmup`), logged to ``metrics.jsonl``."""
        sft_warmup(self.model, self.tokenizer, self.task, self.cfg, self.device, self.log.record,
                   progress, should_stop=self.stop.should_stop)
        self.sft_done = True

    def calibrate(self, progress: Progress | None = None) -> None:
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

    def _use_reference(self, cal: Calibration, bank: ReferenceBank | None) -> None:
        self.calibration, self.bank = cal, bank
        self.algo.prepare(cal, bank)

    def evaluate(self, step: int, progress: Progress | None = None) -> Record:
        """Held-out evaluation at ``step`` (a ``phase: eval`` line, samples to ``samples.jsonl``,
        on the ``progress`` bar); the step-0 one stops at its next batch on Ctrl-C / SIGTERM
        and is shared by runs that start alike when ``eval.shared_start`` is set."""
        noise = eval_noise_seed(self.cfg)  # eval.seed, else the sampling seed
        res = shared_start_evaluation(self.cfg, self.model, noise, step, lambda: evaluate(
            self.engines.eval, self.task, self.eval_examples, n=self.cfg.eval.n,
            max_new_tokens=self.max_new_tokens, progress=progress,
            seed=EVAL_SAMPLING.seed(noise, step), entropy_samples=self.cfg.eval.entropy_samples,
            should_stop=self.stop.should_stop if step == 0 else None), self.eval_examples)
        return self.log.evaluation(step, res, self.task)

    def checkpoint(self) -> Path:
        """Atomic checkpoint of the current state."""
        state = dict(opt_steps=self.optim.steps, sft_done=self.sft_done, run=self.state.identity,
                     **({} if self.data is None else {"data": self.data}))  # files it read
        return save_checkpoint(self.ckpt_dir, self.step, self.model, self.optim.optimizer, state,
                               ref_model=self.ref_model, keep=self.cfg.keep_checkpoints,
                               masters=self.optim.masters())

    def rl_step(self, step: int) -> StepMetrics:
        """One RL step of the configured algorithm; returns its logged metrics."""
        return self.algo.step(step)

    # -- the RunContext of the algorithms -------------------------------------------------------
    def say(self, level: str, msg: str) -> None:
        """A one-line note or warning on stderr (also when the progress bar is off)."""
        self.notes.append(f"{level}: {msg}")
        print(f"{level}: {msg}", file=sys.stderr, flush=True)

    def prompt_rng(self, step: int) -> np.random.Generator:
        """The generator of step ``step``'s prompt draws (a function of ``(seed, step)``)."""
        return np.random.default_rng(PROMPTS.seed(self.cfg.seed, step))

    def draw_prompts(self, step: int) -> list[Example]:
        """``rollout.prompts_per_step`` distinct prompts of :attr:`rl_prompts` for ``step``."""
        idx = self.prompt_rng(step).choice(len(self.rl_prompts), replace=False,
                                           size=self.cfg.rollout.prompts_per_step)
        return [self.rl_prompts[j] for j in idx]

    def sample_completions(self, examples: list[Example], step: int, n: int, *,
                           defer_policy_pass: bool = False) -> Rollout:
        """``n`` completions of the current policy per example (noise of ``(seed, step)``),
        from the run's rollout engine, synced first (:func:`synced_sample`)."""
        gen = torch.Generator(device=self.device).manual_seed(
            SAMPLING.seed(self.sampling_seed, step))
        return synced_sample(self.engines.rollout, [e["prompt"] for e in examples], n=n,
                             max_new_tokens=self.max_new_tokens, generator=gen,
                             batch_size=self.cfg.rollout.sample_batch_size,
                             defer_policy_pass=defer_policy_pass)

    def score_rollout(self, examples: list[Example], ro: Rollout, n: int
                      ) -> tuple[np.ndarray, np.ndarray]:
        """``(rewards, prompt ids)`` of ``ro``'s completions, ``n`` per example in order: the
        task's reward :math:`R(y, x)` (float64) and the example's id (int64), both ``(B,)``."""
        flat = [e for e in examples for _ in range(n)]
        rewards = score_batch(self.task, flat, ro.texts, ro.metrics)
        self.step_rewards = rewards  # named by the guard if the step's update blows up
        return rewards, np.asarray([e["id"] for e in flat], dtype=np.int64)

    def optimize(self, loss: torch.Tensor | Iterable[torch.Tensor]) -> tuple[float, float]:
        """One optimizer step on ``loss`` (:meth:`bestk.train.optim.PolicyOptimizer.step`:
        warm-up, clipping, a non-finite loss or norm stops the run before the update);
        returns ``(gradient norm before clipping, learning rate)``."""
        return self.optim.step(loss, rl_step=self.step + 1, rewards=self.step_rewards)



def _own_checkpoint(ckpt_dir: Path, state: RunState) -> Path | None:
    """The newest checkpoint the run of ``state`` wrote (a file named like one that it did
    not write, copied in or random, is not counted:
    :func:`~bestk.train.runtime.files.run_checkpoints`)."""
    return last_run_checkpoint(ckpt_dir, state.identity.get("digest"))


def _prompt_warnings(cfg: ResolvedTrainConfig, tokenizer: PreTrainedTokenizerBase,
                     examples: list[Example]) -> list[str]:
    """The warning about prompt characters the model's tokenizer does not know, if any (once:
    the prompts as the model sees them; :func:`~bestk.train.setup.unknown_characters_warning`)."""
    msg = unknown_characters_warning(tokenizer, [ex["prompt"] for ex in examples],
                                     tokenizer_hint(cfg))
    return [] if msg is None else [msg]


def _print_start(console: Console, cfg: ResolvedTrainConfig, task: Task, model: torch.nn.Module,
                 tokenizer: PreTrainedTokenizerBase, *, uses_estimator: bool, out: Path,
                 resuming_at: int | None) -> None:
    """The run's start line and header (:func:`~bestk.train.run.console.start_line`,
    :func:`~bestk.train.setup.run_header`)."""
    console.print(start_line(
        cfg, task=task.name, uses_estimator=uses_estimator, params=count_parameters(model),
        trainable=count_parameters(model, trainable=True) if cfg.model.lora.r else None,
        out=out, resuming_at=resuming_at))
    console.print(run_header(cfg, task, tokenizer), markup=False)


def evaluation_due(cfg: ResolvedTrainConfig, step: int) -> bool:
    """Whether the run of ``cfg`` evaluates at RL step ``step``: every ``eval.every`` steps
    (step 0, the start of RL, included) and at the end, ``max_steps``."""
    return step % cfg.eval.every == 0 or step == cfg.max_steps


def evaluations_between(cfg: ResolvedTrainConfig, step: int, last: int) -> int:
    """How many evaluations the run of ``cfg`` makes at the RL steps after ``step`` up to
    ``last`` (:func:`evaluation_due`): ``last // every - step // every``, plus the end when
    ``max_steps`` is not a multiple of ``every``."""
    every = cfg.eval.every
    end = int(last >= cfg.max_steps > step and cfg.max_steps % every != 0)
    return last // every - step // every + end


def train(cfg: TrainConfig, *, progress: bool = True) -> Record:
    """Run ``cfg`` to the end (a new run, or the one in ``cfg.out``; see :class:`Trainer`)."""
    return Trainer(cfg).run(progress=progress)
