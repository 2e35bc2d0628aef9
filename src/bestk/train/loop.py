"""The embedded training loop: optional SFT warm-up, in-run KAPPO calibration, then RL.

:class:`Trainer` holds the run state -- config, task, policy (and frozen reference), optimizer,
run directory, checkpoints, evaluation, logging -- and drives the run:

1. SFT warm-up on the task's reference answers (``sft.steps``; skipped on resume);
2. for a run that needs a KAPPO calibration (``algorithm: apo`` / ``dpo``, or ``pg`` with
   ``kappo_grpo``) and has none from ``estimator_options``: the reference bank and its
   calibration (:mod:`bestk.train.reference`), saved to ``calibration.json``;
3. the step-0 evaluation and checkpoint;
4. ``max_steps`` RL steps of the configured algorithm (:mod:`bestk.train.algorithms`: ``pg``
   PPO-clip with any estimator, ``apo`` @k-A*PO, ``dpo`` @k-DPO), each logged to
   ``metrics.jsonl``, with evaluations every ``eval.every`` and checkpoints every
   ``checkpoint_every`` steps;
5. ``final/`` (HF model + tokenizer) and ``report.md``.

The prompts and the sampling noise of step ``s`` depend only on ``(seed, s)`` (the algorithms
draw them through :meth:`Trainer.prompt_rng`, :meth:`Trainer.draw_prompts` and
:meth:`Trainer.sample_completions`), so a run resumed from a checkpoint continues exactly as
the uninterrupted run would have.

Run directory: ``config.yaml``, ``metrics.jsonl``, ``checkpoints/``, ``final/`` (HF model +
tokenizer), ``report.md`` + PNG plots, and for KAPPO runs ``calibration.json`` and the bank
(``bank.jsonl``, ``bank_tokens.safetensors``). A :class:`Trainer` holds the directory's lock
from its construction to the end of :meth:`Trainer.run` and continues a run already there when
the config allows it (see :mod:`bestk.train.rundir`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from bestk._atomic import respect_umask, write_text_atomic
from bestk._seeds import BANK_PROMPTS, BANK_SAMPLING, EVAL_SAMPLING, PROMPTS, SAMPLING, SFT_ORDER
from bestk.tasks import Task, load_task
from bestk.train.algorithms import ALGORITHMS
from bestk.train.checkpoint import as_os_error, latest_checkpoint, load_checkpoint, save_checkpoint
from bestk.train.config import (
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
)
from bestk.train.evaluate import evaluate
from bestk.train.hf import autocast, reference_policy, render_task_prompts, save_model
from bestk.train.policy import count_parameters, load_policy
from bestk.train.reference import (
    BANK_FILE,
    CALIBRATION_FILE,
    TOKENS_FILE,
    bank_examples,
    calibrate_bank,
    calibration_prompt_ids,
    check_prompt_ids,
    load_bank,
    load_reference,
    resolve_kind,
    sample_bank,
    save_reference,
)
from bestk.train.report import write_report
from bestk.train.reporters import Reporters, resolve_report_to
from bestk.train.rollout import Rollout, sample
from bestk.train.rundir import (
    RunLock,
    RunState,
    clean_temporaries,
    inspect_run,
    mark_finished,
    prepare_directory,
    read_metrics,
    read_run_config,
    set_aside,
    write_run_config,
)
from bestk.train.validation import load_kappo_file, resolve_defaults, validate

__all__ = ["Trainer", "train"]

_MODES = {True: "resume", False: "new", "auto": "auto", "resume": "resume", "new": "new"}


class Trainer:
    """State of one run: config, task, policy, optimizer, run directory.

    Build with ``Trainer(cfg)`` for a new run in ``cfg.out`` or ``Trainer.resume(dir)``;
    then :meth:`run`. ``on_step`` (if given) is called after each finished RL step with
    ``(step, train_metrics)`` — tests use it to simulate a crash. ``cfg`` is validated and
    copied with its ``None`` = "the algorithm's default" fields filled in
    (:func:`~bestk.train.validation.resolve_defaults`); :attr:`cfg` is that copy.

    The algorithm object (:attr:`algo`, from :data:`bestk.train.algorithms.ALGORITHMS`) does
    the RL steps through :meth:`draw_prompts` / :meth:`prompt_rng`,
    :meth:`sample_completions`, :meth:`score_rollout` and :meth:`optimize`; RL draws its
    prompts from :attr:`rl_prompts` (the task's training prompts, or the calibrated ones).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        resume: bool | str = "auto",
        on_step: Callable | None = None,
        stored: TrainConfig | None = None,
    ):
        if resume not in _MODES:
            raise ValueError(
                f"resume must be True, False, 'auto', 'resume' or 'new', got {resume!r}"
            )
        validate(cfg)  # every value, before the directory is touched or anything is built
        cfg = resolve_defaults(cfg)
        self.cfg = cfg
        self.on_step = on_step
        self.out = Path(cfg.out)
        self.ckpt_dir = self.out / "checkpoints"
        self.sampling_seed = cfg.seed if cfg.sampling_seed is None else cfg.sampling_seed
        self.notes: list[str] = []
        self._load_task()  # task options and sizes are checked here, still before any write
        created = not self.out.exists()
        self._lock = RunLock(prepare_directory(self.out))
        try:
            self._lock.acquire()
            removed = clean_temporaries(self.out)
            if removed:
                self._say("note", f"removed {len(removed)} temporary file(s) left by an "
                          f"interrupted write: {', '.join(p.name for p in removed[:4])}")
            self.state: RunState = inspect_run(cfg, _MODES[resume], stored)
            for msg in self.state.warnings:
                self._say("warning", msg)
            for msg in self.state.notes:
                self._say("note", msg)
            self._build()
        except BaseException:
            if created and self._lock.held and {p.name for p in self.out.iterdir()} <= {".lock"}:
                shutil.rmtree(self.out, ignore_errors=True)  # no trace of a run never started
            self.close()
            raise

    def _load_task(self) -> None:
        cfg = self.cfg
        if cfg.threads:
            torch.set_num_threads(int(cfg.threads))
        torch.manual_seed(cfg.seed)
        self.device = torch.device(cfg.device)
        self.task: Task = load_task(
            cfg.task.name, cfg.task.options, seed=cfg.seed, reward=cfg.task.reward
        )
        self.max_new_tokens = cfg.rollout.max_new_tokens or (self.task.max_answer_chars + 2)
        self.eval_examples = self.task.eval[: cfg.eval.num_prompts or len(self.task.eval)]
        if not self.eval_examples:
            raise ValueError(f"task {self.task.name!r} has no held-out prompts to evaluate on")
        self.spec = ALGORITHMS[cfg.algorithm]
        self.rl_prompts: list[dict[str, Any]] = list(self.task.train)
        self.calibration: Any = None
        self.bank: Any = None
        self.uses_kappo = self.spec.calibrated(cfg)
        self.kappo_kind: str | None = None
        self._file_calibration: Any = None
        self._bank_examples: list[dict[str, Any]] | None = None
        self._given_bank: Any = None  # kappo.bank, loaded when a new run starts
        if self.uses_kappo:
            self._plan_kappo()
        self.algo = self.spec.make(self)  # pg loads an estimator_options calibration here
        if len(self.rl_prompts) < cfg.rollout.prompts_per_step and not self.spec.bank_completions:
            where = (f"the {len(self.rl_prompts)} calibrated prompts" if
                     len(self.rl_prompts) < len(self.task.train) else
                     f"the {len(self.task.train)} training prompts")
            raise ValueError(
                f"rollout.prompts_per_step ({cfg.rollout.prompts_per_step}) exceeds {where} of "
                f"task {self.task.name!r}"
                + (" (raise kappo.bank_prompts)" if self._bank_examples is not None else "")
            )

    def _plan_kappo(self) -> None:
        """Which prompts the calibration covers and its kind, before any work: a
        ``kappo.calibration`` file is loaded and checked against the task; otherwise the
        bank's prompts are a seeded subset of the training prompts."""
        cfg, spec = self.cfg, self.spec
        if cfg.kappo.calibration is not None:
            cal = load_kappo_file(cfg)
            source = f"kappo.calibration {cfg.kappo.calibration!r}"
            check_prompt_ids(cal, [e["id"] for e in self.task.train], source)
            self.restrict_prompts(set(calibration_prompt_ids(cal)), source)
            self._file_calibration = cal
            self.kappo_kind = cal.kind
        else:
            self.kappo_kind = resolve_kind(cfg.kappo.kind, binary_only=spec.binary_only,
                                           graded=self.task.graded)
        if spec.samples_bank(cfg):
            self._bank_examples = bank_examples(
                self.rl_prompts, cfg.kappo.bank_prompts, BANK_PROMPTS.seed(cfg.seed)
            )
            self.rl_prompts = list(self._bank_examples)  # RL draws calibrated prompts only

    def restrict_prompts(self, ids: set[Any], source: str) -> None:
        """Let RL draw only the training prompts whose id is in ``ids`` (a calibration's)."""
        self.rl_prompts = [e for e in self.rl_prompts if e["id"] in ids]
        if not self.rl_prompts:
            raise ValueError(
                f"{source} shares no prompt id with the training prompts of task "
                f"{self.task.name!r} (make the bank with `bestk eval --bank`)"
            )

    def _build(self) -> None:
        cfg = self.cfg
        self.model, self.tokenizer = load_policy(cfg.model, self.task.alphabet, seed=cfg.seed)
        render_task_prompts(self.task, self.tokenizer, cfg.model.chat_template)
        self.model.to(self.device)
        self.ref_model = None
        self.optimizer = self._make_optimizer(cfg.optim.lr)
        self.step = 0
        self.opt_steps = 0
        self.sft_done = cfg.sft.steps == 0
        self.complete = self.state.kind == "complete"
        if self.state.kind in ("resume", "complete"):
            self._resume()
        else:
            if self.cfg.kappo.bank is not None and self._bank_examples is not None:
                self._given_bank = self._load_given_bank()  # refused before any work
            self._start_dir()
        self.reporters = Reporters(
            resolve_report_to(cfg.report_to), self.out, config=config_to_dict(cfg),
            resume_step=self.step if self.state.kind == "resume" else None,
            run_name=cfg.run_name,
        )
        if not self.complete:
            self.reporters.open()  # a W&B login problem shows now, not after the SFT

    def close(self) -> None:
        """Close the live reporters and release the run directory's lock (done by :meth:`run`
        when it returns)."""
        reporters = getattr(self, "reporters", None)
        if reporters is not None:
            reporters.close()
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()

    def _say(self, level: str, msg: str) -> None:
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
        (:data:`bestk.train.rundir.RESUME_FREE`); other changes are refused.
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
        if self._bank_examples is None:
            return 0
        return len(self._bank_examples) * self.cfg.kappo.bank_size

    @property
    def binary_advantages(self) -> bool:
        """``pg``: whether the estimator sees the 0/1 success rather than the raw reward."""
        return bool(getattr(self.algo, "binary", False))

    def _make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        o = self.cfg.optim
        return torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],  # LoRA: the adapters
            lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay,
        )

    def _start_dir(self) -> None:
        for name in (CALIBRATION_FILE, BANK_FILE, TOKENS_FILE):  # of a run started over
            (self.out / name).unlink(missing_ok=True)
        write_run_config(self.out, self.cfg)
        write_text_atomic(self.out / "metrics.jsonl", "")

    def _resume(self) -> None:
        set_aside(self.state.damaged)
        if self.spec.keeps_reference(self.cfg):
            self.ref_model = reference_policy(self.model)
        # verified by inspect_run under the lock a moment ago
        meta = load_checkpoint(
            self.state.checkpoint, self.model, self.optimizer, ref_model=self.ref_model,
            verify=False,
        )
        self.step = int(meta["step"])
        self.opt_steps = int(meta.get("opt_steps", 0))
        self.sft_done = bool(meta.get("sft_done", True))
        if self.complete:
            return
        if self.uses_kappo:
            self._load_reference()
        # Drop log lines of steps past the checkpoint: they are redone.
        rows = [
            r for r in read_metrics(self.out / "metrics.jsonl")
            if r["phase"] == "sft" or r["step"] <= self.step
        ]
        write_text_atomic(
            self.out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows)
        )
        # Record the allowed changes (a larger max_steps...) in config.yaml.
        write_run_config(self.out, self.cfg)

    # -- logging / checkpoints ---------------------------------------------------------------
    def log(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` (flushed and fsync'ed), then send the
        record to the live reporters (``report_to``: TensorBoard, W&B)."""
        path = self.out / "metrics.jsonl"
        try:
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            if e.filename is None and e.errno is not None:  # write() errors name no file
                raise OSError(e.errno, e.strerror, str(path)) from e
            raise
        self.reporters.log(record)

    def checkpoint(self) -> Path:
        """Atomic checkpoint of the current state."""
        state = {"opt_steps": self.opt_steps, "sft_done": self.sft_done}
        return save_checkpoint(
            self.ckpt_dir, self.step, self.model, self.optimizer, state,
            ref_model=self.ref_model, keep=self.cfg.keep_checkpoints,
        )

    # -- SFT -------------------------------------------------------------------------------
    def sft(self, progress: Any = None) -> None:
        """Cross-entropy warm-up on ``prompt + answer + EOS`` (loss on answer tokens)."""
        s = self.cfg.sft
        tok = self.tokenizer
        opt = self._make_optimizer(s.lr)
        rng = np.random.default_rng(SFT_ORDER.seed(self.cfg.seed))
        warm = max(1, s.steps // 10)
        eos = tok.eos_token_id
        pad = tok.pad_token_id
        self.model.train()
        task_id = progress.add_task("SFT warm-up", total=s.steps) if progress else None
        for i in range(s.steps):
            lr = s.lr * min(1.0, (i + 1) / warm)
            if i >= warm:
                lr = s.lr * 0.5 * (1 + math.cos(math.pi * (i - warm) / max(1, s.steps - warm)))
            for g in opt.param_groups:
                g["lr"] = lr
            idx = rng.integers(0, len(self.task.train), size=s.batch_size)
            exs = [self.task.train[j] for j in idx]
            p_ids = tok([e["prompt"] for e in exs], add_special_tokens=False)["input_ids"]
            a_ids = tok([e["answer"] for e in exs], add_special_tokens=False)["input_ids"]
            seqs = [p + a + [eos] for p, a in zip(p_ids, a_ids, strict=True)]
            L = max(len(x) for x in seqs)
            ids = torch.full((len(seqs), L), pad, dtype=torch.long)
            labels = torch.full((len(seqs), L), -100, dtype=torch.long)
            mask = torch.zeros((len(seqs), L), dtype=torch.long)
            for r, (x, p) in enumerate(zip(seqs, p_ids, strict=True)):
                ids[r, : len(x)] = torch.tensor(x)
                mask[r, : len(x)] = 1
                labels[r, len(p) : len(x)] = torch.tensor(x[len(p) :])
            ids, labels, mask = ids.to(self.device), labels.to(self.device), mask.to(self.device)
            logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if self.cfg.optim.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip)
            opt.step()
            if (i + 1) % 10 == 0 or i + 1 == s.steps:
                self.log({"phase": "sft", "sft_step": i + 1, "loss": loss.item(), "lr": lr})
            if progress:
                progress.update(
                    task_id, advance=1, description=f"SFT warm-up loss={loss.item():.3f}"
                )
        self.sft_done = True

    # -- RL --------------------------------------------------------------------------------
    def _lr(self) -> float:
        w = self.cfg.optim.warmup_steps
        return self.cfg.optim.lr * (min(1.0, (self.opt_steps + 1) / w) if w > 0 else 1.0)

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
        r = self.cfg.rollout
        gen = torch.Generator(device=self.device).manual_seed(
            SAMPLING.seed(self.sampling_seed, step))
        return sample(
            self.model, self.tokenizer, [e["prompt"] for e in examples], n=n,
            temperature=r.temperature, top_p=r.top_p, max_new_tokens=self.max_new_tokens,
            generator=gen,
        )

    def score_rollout(
        self, examples: list[dict[str, Any]], ro: Rollout, n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rewards, prompt ids)`` of ``ro``'s completions, ``n`` per example in order: the
        task's reward :math:`R(y, x)` (float64) and the example's id (int64), both ``(B,)``."""
        flat = [e for e in examples for _ in range(n)]
        rewards = self.task.score(flat, ro.texts)
        return rewards, np.asarray([e["id"] for e in flat], dtype=np.int64)

    def optimize(self, loss: torch.Tensor) -> tuple[float, float]:
        """One AdamW step on ``loss`` (learning-rate warm-up, global-norm gradient clipping);
        returns ``(gradient norm before clipping, learning rate)``."""
        lr = self._lr()
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip > 0 else float("inf")
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.optimizer.step()
        self.opt_steps += 1
        return float(gnorm), lr

    def rl_step(self, step: int) -> dict[str, Any]:
        """One RL step of the configured algorithm; returns its logged metrics."""
        return self.algo.step(step)

    # -- KAPPO reference calibration -----------------------------------------------------------
    def calibrate(self, progress: Any = None) -> None:
        """The run's reference bank and calibration (:mod:`bestk.train.reference`), from the
        current policy (the frozen reference: called after SFT, before RL), saved to the run
        directory; a ``kappo.calibration`` file is used as it is (@k-DPO still samples the
        bank for its pairs)."""
        cfg, k = self.cfg, self.cfg.kappo
        bank = self.reference_bank(progress)
        cal = self._file_calibration
        if cal is None:
            cal = calibrate_bank(bank, self.task, self.kappo_kind, k.k, k.beta)
        save_reference(self.out, cal, bank)
        self._use_reference(cal, bank)
        source = (f"from {cfg.kappo.calibration}" if self._file_calibration is not None else
                  f"in-run, bank of {k.bank_size} samples per prompt"
                  + (f" from {k.bank}" if k.bank is not None else ""))
        self._say("note", f"KAPPO {cal.kind} calibration ({source}): k={cal.k}, beta={cal.beta}, "
                  f"{cal.num_prompts} prompts -> {self.out / CALIBRATION_FILE}")

    def reference_bank(self, progress: Any = None) -> Any:
        """The run's reference bank (``None`` when it needs none): ``kappo.bank``'s, or
        ``kappo.bank_size`` samples of the current policy (the reference: after SFT) for each
        bank prompt, with the completions when the algorithm keeps them. A function of the
        weights, the seed and the ``kappo`` / ``rollout`` settings only."""
        cfg, k = self.cfg, self.cfg.kappo
        if self._bank_examples is None:
            return None
        if k.bank is not None:
            return self._given_bank if self._given_bank is not None else self._load_given_bank()
        return sample_bank(
            self.model, self.tokenizer, self.task, self._bank_examples, size=k.bank_size,
            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
            max_new_tokens=self.max_new_tokens, seed=BANK_SAMPLING.seed(cfg.seed),
            completions=self.spec.bank_completions, progress=progress,
        )

    def _load_given_bank(self) -> Any:
        """The ``kappo.bank`` bank, checked to cover exactly the run's bank prompts (in order)
        with ``kappo.bank_size`` samples each."""
        k = self.cfg.kappo
        bank = load_bank(k.bank, completions=self.spec.bank_completions)
        want = [int(e["id"]) for e in self._bank_examples]
        if bank.prompt_ids.tolist() != want or bank.size != k.bank_size:
            raise ValueError(
                f"kappo.bank {k.bank!r} holds {bank.size} samples for each of "
                f"{bank.num_prompts} prompts, not the run's bank ({k.bank_size} samples for each "
                f"of its {len(want)} bank prompts, kappo.bank_prompts and seed {self.cfg.seed}); "
                "it was made for another run"
            )
        return bank

    def _load_reference(self) -> None:
        cal, bank = load_reference(self.out, completions=self.spec.bank_completions)
        k = self.cfg.kappo
        if cal.k != k.k or cal.beta != k.beta or cal.kind != self.kappo_kind:
            raise ValueError(
                f"{self.out / CALIBRATION_FILE} is a {cal.kind} calibration for k={cal.k}, "
                f"beta={cal.beta}, not the run's ({self.kappo_kind}, k={k.k}, beta={k.beta}); "
                "restore it, or start a new run with another --out"
            )
        if self._file_calibration is not None and self._file_calibration.checksum != cal.checksum:
            self._say("warning", f"kappo.calibration {k.calibration!r} changed since the run "
                      f"started; continuing with the run's own copy {CALIBRATION_FILE}")
        self._use_reference(cal, bank)

    def _use_reference(self, cal: Any, bank: Any) -> None:
        self.calibration, self.bank = cal, bank
        self.algo.prepare(cal, bank)

    def evaluate(self, step: int) -> dict[str, Any]:
        """Held-out evaluation at ``step`` (logged as a ``phase: eval`` line)."""
        e = self.cfg.eval
        res = evaluate(
            self.model, self.tokenizer, self.task, self.eval_examples, n=e.n,
            temperature=e.temperature, top_p=e.top_p, max_new_tokens=self.max_new_tokens,
            seed=EVAL_SAMPLING.seed(self.sampling_seed, step),
        )
        rec = {"phase": "eval", "step": step, **res.metrics}
        self.log(rec)
        return rec

    # -- driver ----------------------------------------------------------------------------
    _stop_requested = False
    interrupted = False

    def _install_sigint(self) -> Callable[[], None]:
        """First Ctrl-C: finish the current step, checkpoint, stop. Second: abort at once."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum: int, frame: Any) -> None:
            if self._stop_requested:
                raise KeyboardInterrupt
            self._stop_requested = True

        signal.signal(signal.SIGINT, handler)
        return lambda: signal.signal(signal.SIGINT, previous)

    def run(self, *, progress: bool = True) -> dict[str, Any]:
        """Run (or continue) to ``max_steps``; returns the last evaluation record.

        Ctrl-C finishes the current step, writes a checkpoint and returns with
        ``self.interrupted = True`` (a second Ctrl-C aborts at once); ``--resume`` continues.
        A Ctrl-C during the final save lets the save finish (the run is then complete).
        A complete run (:attr:`complete`) returns its last evaluation at once. The run
        directory's lock is released when this returns or raises.
        """
        try:
            return self._run(progress)
        finally:
            self.close()

    def last_evaluation(self) -> dict[str, Any]:
        """The newest ``phase: eval`` record of ``metrics.jsonl`` (``{}`` if none)."""
        evals = [r for r in read_metrics(self.out / "metrics.jsonl") if r["phase"] == "eval"]
        return evals[-1] if evals else {}

    def _run(self, progress: bool) -> dict[str, Any]:
        cfg = self.cfg
        self.interrupted = False
        if self.complete:
            self._say("note", f"run {str(self.out)!r} is already complete (step {self.step} of "
                      f"{cfg.max_steps}); nothing to do")
            return self.last_evaluation()
        console = Console(stderr=True, quiet=not progress)
        what = (f"estimator={cfg.estimator}" if cfg.algorithm == "pg" else
                 f"algorithm={cfg.algorithm} k={cfg.kappo.k} beta={cfg.kappo.beta}")
        console.print(
            f"[bold]bestk train[/] task={self.task.name} {what} "
            f"params={count_parameters(self.model):,}"
            + (f" (LoRA: {count_parameters(self.model, trainable=True):,} train)"
               if cfg.model.lora.r > 0 else "")
            + f" out={self.out}"
            + (f" (resuming at step {self.step})" if self.state.kind == "resume" else "")
        )
        bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not progress,
        )
        last_eval: dict[str, Any] = {}
        restore = self._install_sigint()
        try:
            with bar, autocast(self.device, cfg.model.autocast):
                if self.step == 0 and not self.sft_done:
                    self.sft(bar)
                if self.step == 0 and latest_checkpoint(self.ckpt_dir) is None:
                    if self.uses_kappo:
                        self.calibrate(bar)
                    last_eval = self.evaluate(0)
                    if self.spec.keeps_reference(cfg):
                        self.ref_model = reference_policy(self.model)
                    self.checkpoint()
                rl = bar.add_task("RL", total=cfg.max_steps, completed=self.step)
                live = ""
                for step in range(self.step + 1, cfg.max_steps + 1):
                    if self._stop_requested:
                        break
                    m = self.rl_step(step)
                    self.log(m)
                    self.step = step
                    if step % cfg.eval.every == 0 or step == cfg.max_steps:
                        last_eval = self.evaluate(step)
                        live = (
                            f" | eval pass@1={last_eval['pass@1']:.3f} "
                            f"pass@{cfg.eval.n}={last_eval[f'pass@{cfg.eval.n}']:.3f}"
                        )
                    if step % cfg.checkpoint_every == 0 or step == cfg.max_steps:
                        self.checkpoint()
                    bar.update(rl, completed=step, description=self.algo.describe(m) + live)
                    if self.on_step is not None:
                        self.on_step(step, m)
            if self._stop_requested and self.step < cfg.max_steps:
                self.interrupted = True
                if self.sft_done and latest_checkpoint(self.ckpt_dir) is not None:
                    self.checkpoint()
                Console(stderr=True).print(
                    f"interrupted after step {self.step}; checkpoint saved. Continue with "
                    f"`bestk train --resume {self.out}`"
                )
                return last_eval
            stop_before_save = self._stop_requested
            self.finish(progress=progress)
            if self._stop_requested and not stop_before_save:
                self._say("note", "Ctrl-C during the final save: it was completed first; the run "
                          f"is complete (final model in {self.out / 'final'})")
        finally:
            restore()
        return last_eval or self.last_evaluation()

    def finish(self, *, progress: bool = False) -> None:
        """Save ``final/`` (HF model + tokenizer) and write the report with plots.

        ``final/`` is written to ``.final-tmp`` and swapped in with two renames, so a crash
        leaves the previous ``final/`` (or, between the renames, ``.final-old``) intact. The
        run is marked complete (``DIR/.finished``, the step) only after the report.
        """
        final = self.out / "final"
        tmp = self.out / ".final-tmp"
        old = self.out / ".final-old"
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)
        try:
            with _transformers_progress(progress):
                save_model(self.model, tmp)  # a LoRA policy: merged, + final/adapter/
                self.tokenizer.save_pretrained(tmp)
        except Exception as e:  # safetensors reports I/O failures as SafetensorError
            shutil.rmtree(tmp, ignore_errors=True)
            raise as_os_error(e, tmp) from None
        respect_umask(tmp)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        if old.exists():
            shutil.rmtree(old)
        write_report(self.out)
        mark_finished(self.out, self.step)


@contextmanager
def _transformers_progress(enabled: bool) -> Iterator[None]:
    """transformers' own progress bars (e.g. "Writing model shards") on or off meanwhile."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def train(cfg: TrainConfig, *, progress: bool = True) -> dict[str, Any]:
    """Run ``cfg`` to the end (a new run, or the one in ``cfg.out``; see :class:`Trainer`)."""
    return Trainer(cfg).run(progress=progress)
