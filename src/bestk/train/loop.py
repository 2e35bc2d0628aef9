"""The embedded training loop: optional SFT warm-up, then @k-aware RL.

One RL step (:meth:`Trainer.rl_step`):

1. draw ``rollout.prompts_per_step`` training prompts (deterministically from ``(seed, step)``),
2. sample ``rollout.n`` completions per prompt with the KV cache (:func:`rollout.sample`),
3. score them with the task's reward,
4. ``A = bestk.advantages(estimator, rewards, group=prompt_ids, **estimator_options)``,
5. minimise the PPO-clip surrogate (``bestk.losses.ppo_clip_loss``, clip low/high, aggregation
   ``loss.agg``) ``+ kl_coef * KL(pi || pi_ref)`` (k1/k2/k3) ``- entropy_coef * H`` with AdamW
   and global-norm gradient clipping, for ``loss.ppo_epochs`` passes of ``loss.minibatches``
   minibatches (one pass, one minibatch = exactly on-policy).

The prompts and the sampling noise of step ``s`` depend only on ``(seed, s)``, so a run resumed
from a checkpoint continues exactly as the uninterrupted run would have.

Run directory: ``config.yaml``, ``metrics.jsonl``, ``checkpoints/``, ``final/`` (HF model +
tokenizer), ``report.md`` + PNG plots. A :class:`Trainer` holds the directory's lock from its
construction to the end of :meth:`Trainer.run` and continues a run already there when the
config allows it (see :mod:`bestk.train.rundir`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

import bestk
from bestk._atomic import respect_umask, write_text_atomic
from bestk.losses import aggregate, kl_penalty, ppo_clip_loss
from bestk.tasks import Task, load_task
from bestk.train.checkpoint import as_os_error, latest_checkpoint, load_checkpoint, save_checkpoint
from bestk.train.config import (
    TrainConfig,
    calibration_prompt_ids,
    config_from_dict,
    config_to_dict,
    resolve_estimator_options,
    validate,
)
from bestk.train.evaluate import evaluate
from bestk.train.hf import autocast, reference_policy, render_task_prompts, save_model
from bestk.train.policy import count_parameters, load_policy
from bestk.train.reporters import Reporters, resolve_report_to, rollout_stats
from bestk.train.rollout import sample, sequence_logprobs
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

__all__ = ["Trainer", "train", "write_text_atomic", "read_metrics"]

_MODES = {True: "resume", False: "new", "auto": "auto", "resume": "resume", "new": "new"}


def _step_seed(seed: int, step: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1)[0])


class Trainer:
    """State of one run: config, task, policy, optimizer, run directory.

    Build with ``Trainer(cfg)`` for a new run in ``cfg.out`` or ``Trainer.resume(dir)``;
    then :meth:`run`. ``on_step`` (if given) is called after each finished RL step with
    ``(step, train_metrics)`` — tests use it to simulate a crash.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        resume: bool | str = "auto",
        on_step: Callable | None = None,
    ):
        if resume not in _MODES:
            raise ValueError(
                f"resume must be True, False, 'auto', 'resume' or 'new', got {resume!r}"
            )
        validate(cfg)  # every value, before the directory is touched or anything is built
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
            self.state: RunState = inspect_run(cfg, _MODES[resume])
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
        self.estimator_options = self._estimator_options()
        self.binary_advantages = self._binary_advantages()
        if len(self.task.train) < cfg.rollout.prompts_per_step:
            raise ValueError(
                f"rollout.prompts_per_step ({cfg.rollout.prompts_per_step}) exceeds the "
                f"{len(self.task.train)} training prompts of task {self.task.name!r}"
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
        cls, out: str | Path, *, overrides: dict[str, Any] | None = None, **kw: Any
    ) -> Trainer:
        """Reopen the run in ``out`` from its ``config.yaml`` and newest valid checkpoint.

        ``overrides`` (a nested dict, e.g. ``{"max_steps": 200}``) may change what the resume
        policy allows (:data:`bestk.train.rundir.RESUME_FREE`); other changes are refused.
        """
        out = Path(out)
        cfg = read_run_config(out)
        if overrides:
            cfg = config_from_dict(overrides, base=cfg)
        cfg.out = str(out)
        return cls(cfg, resume=True, **kw)

    def _estimator_options(self) -> dict[str, Any]:
        opts = resolve_estimator_options(self.cfg.estimator_options)
        cal = self.cfg.estimator_options.get("calibration")
        if isinstance(cal, (str, os.PathLike)):
            # Train only on the prompts the calibration knows (its bank's prompt ids).
            known = set(calibration_prompt_ids(opts["calibration"]))
            self.task.train = [e for e in self.task.train if e["id"] in known]
            if not self.task.train:
                raise ValueError(
                    f"calibration {str(cal)!r} shares no prompt id with the training prompts of "
                    f"task {self.task.name!r} (make the bank with `bestk eval --bank`)"
                )
        return opts

    def _binary_advantages(self) -> bool:
        mode = self.cfg.advantage_reward
        if mode != "auto":
            return mode == "success"
        if self.cfg.estimator == "maxrl":
            return True
        cal = self.estimator_options.get("calibration")
        return self.cfg.estimator == "kappo_grpo" and getattr(cal, "kind", None) == "binary"

    def _make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        o = self.cfg.optim
        return torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],  # LoRA: the adapters
            lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay,
        )

    def _start_dir(self) -> None:
        write_run_config(self.out, self.cfg)
        write_text_atomic(self.out / "metrics.jsonl", "")

    def _resume(self) -> None:
        set_aside(self.state.damaged)
        if self.cfg.loss.kl_coef > 0:
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
        rng = np.random.default_rng(_step_seed(self.cfg.seed, 0, 7))
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

    def rl_step(self, step: int) -> dict[str, Any]:
        """One RL step (module docstring); returns its logged metrics."""
        cfg, r = self.cfg, self.cfg.rollout
        t0 = time.perf_counter()
        rng = np.random.default_rng(_step_seed(cfg.seed, step, 1))
        idx = rng.choice(len(self.task.train), size=r.prompts_per_step, replace=False)
        exs = [self.task.train[j] for j in idx]
        gen = torch.Generator(device=self.device).manual_seed(
            _step_seed(self.sampling_seed, step, 2))
        ro = sample(
            self.model, self.tokenizer, [e["prompt"] for e in exs], n=r.n,
            temperature=r.temperature, top_p=r.top_p, max_new_tokens=self.max_new_tokens,
            generator=gen,
        )
        t_gen = time.perf_counter()
        flat_exs = [e for e in exs for _ in range(r.n)]
        rewards = self.task.score(flat_exs, ro.texts)
        prompt_ids = np.asarray([e["id"] for e in flat_exs], dtype=np.int64)
        succ = self.task.success(rewards)
        adv_input = succ.astype(np.float64) if self.binary_advantages else rewards
        adv = bestk.advantages(
            cfg.estimator, torch.from_numpy(adv_input), group=torch.from_numpy(prompt_ids),
            **self.estimator_options,
        ).to(torch.float32).to(self.device)
        t_score = time.perf_counter()
        stats = self._update(ro, adv)
        t_upd = time.perf_counter()
        mask = ro.completion_mask.float()
        return {
            "phase": "train",
            "step": step,
            "reward_mean": float(rewards.mean()),
            "reward_max_mean": float(rewards.reshape(-1, r.n).max(1).mean()),
            "success_rate": float(succ.mean()),
            "group_any_success": float(succ.reshape(-1, r.n).any(1).mean()),
            "adv_abs_mean": float(adv.abs().mean()),
            "entropy": float((ro.entropy * mask).sum() / mask.sum().clamp_min(1)),
            "response_len": float(mask.sum(1).mean()),
            **rollout_stats(rewards, r.n, mask.sum(1).cpu().numpy(), ro.finished.cpu().numpy()),
            **stats,
            "time_generate": t_gen - t0,
            "time_score": t_score - t_gen,
            "time_update": t_upd - t_score,
            "completions_per_s": len(ro.texts) / (t_upd - t0),
        }

    def _update(self, ro: Any, adv: torch.Tensor) -> dict[str, float]:
        cfg, lc = self.cfg, self.cfg.loss
        B = adv.shape[0]
        on_policy = lc.ppo_epochs == 1 and lc.minibatches == 1
        old_logp = ro.logprobs
        if not on_policy:
            with torch.no_grad():
                old_logp, _ = sequence_logprobs(
                    self.model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                    ro.completion_mask, temperature=cfg.rollout.temperature,
                    group_size=cfg.rollout.n,
                )
        ref_logp = None
        if lc.kl_coef > 0:
            with torch.no_grad():
                ref_logp, _ = sequence_logprobs(
                    self.ref_model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                    ro.completion_mask, temperature=cfg.rollout.temperature,
                    group_size=cfg.rollout.n,
                )
        self.model.train()
        mb = B // lc.minibatches
        agg: dict[str, list[float]] = {}
        for _ in range(lc.ppo_epochs):
            for start in range(0, B, mb):
                sl = slice(start, start + mb)
                mask = ro.completion_mask[sl]
                logp, ent = sequence_logprobs(
                    self.model, ro.prompt_ids[sl], ro.prompt_mask[sl], ro.completion_ids[sl],
                    mask, temperature=cfg.rollout.temperature,
                    with_entropy=lc.entropy_coef > 0, group_size=cfg.rollout.n,
                )
                old = logp.detach() if on_policy else old_logp[sl]
                loss, st = ppo_clip_loss(
                    logp, old, adv[sl], mask, clip_low=lc.clip_low, clip_high=lc.clip_high,
                    agg=lc.agg,
                )
                pg = loss.item()
                if ref_logp is not None:
                    kl = aggregate(kl_penalty(logp, ref_logp[sl], lc.kl_estimator), mask, lc.agg)
                    loss = loss + lc.kl_coef * kl
                    st["kl_ref"] = kl.item()
                if ent is not None:
                    loss = loss - lc.entropy_coef * aggregate(ent, mask, lc.agg)
                lr = self._lr()
                for g in self.optimizer.param_groups:
                    g["lr"] = lr
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
                gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
                self.optimizer.step()
                self.opt_steps += 1
                st.update(loss=loss.item(), pg_loss=pg, grad_norm=float(gnorm), lr=lr)
                for k, v in st.items():
                    agg.setdefault(k, []).append(v)
        return {k: float(np.mean(v)) for k, v in agg.items()}

    def evaluate(self, step: int) -> dict[str, Any]:
        """Held-out evaluation at ``step`` (logged as a ``phase: eval`` line)."""
        e = self.cfg.eval
        res = evaluate(
            self.model, self.tokenizer, self.task, self.eval_examples, n=e.n,
            temperature=e.temperature, top_p=e.top_p, max_new_tokens=self.max_new_tokens,
            seed=_step_seed(self.sampling_seed, step, 3),
        )
        rec = {"phase": "eval", "step": step, **res.metrics}
        self.log(rec)
        return rec

    # -- driver ----------------------------------------------------------------------------
    _stop_requested = False
    interrupted = False

    def _install_sigint(self) -> Callable[[], None]:
        """First Ctrl-C: finish the current step, checkpoint, stop. Second: abort at once."""
        import signal
        import threading

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
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        cfg = self.cfg
        self.interrupted = False
        if self.complete:
            self._say("note", f"run {str(self.out)!r} is already complete (step {self.step} of "
                      f"{cfg.max_steps}); nothing to do")
            return self.last_evaluation()
        console = Console(stderr=True, quiet=not progress)
        console.print(
            f"[bold]bestk train[/] task={self.task.name} estimator={cfg.estimator} "
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
                    last_eval = self.evaluate(0)
                    if cfg.loss.kl_coef > 0:
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
                    bar.update(
                        rl, completed=step,
                        description=f"RL reward={m['reward_mean']:.3f} "
                        f"success={m['success_rate']:.3f}{live}",
                    )
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
        from bestk.train.report import write_report

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
