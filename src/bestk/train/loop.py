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

Run directory (DESIGN.md section 6): ``config.yaml``, ``metrics.jsonl``, ``checkpoints/``,
``final/`` (HF model + tokenizer), ``report.md`` + PNG plots.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

import bestk
from bestk._atomic import write_text_atomic
from bestk.losses import aggregate, kl_penalty, ppo_clip_loss
from bestk.tasks import Task, load_task
from bestk.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from bestk.train.config import TrainConfig, config_from_dict, config_to_dict, validate
from bestk.train.evaluate import evaluate
from bestk.train.policy import count_parameters, load_policy
from bestk.train.rollout import sample, sequence_logprobs

__all__ = ["Trainer", "train", "write_text_atomic", "read_metrics"]


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (a torn last line from a crash is skipped)."""
    rows = []
    p = Path(path)
    if not p.is_file():
        return rows
    for line in p.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _step_seed(seed: int, step: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1)[0])


class Trainer:
    """State of one run: config, task, policy, optimizer, run directory.

    Build with ``Trainer(cfg)`` for a new run in ``cfg.out`` or ``Trainer.resume(dir)``;
    then :meth:`run`. ``on_step`` (if given) is called after each finished RL step with
    ``(step, train_metrics)`` — tests use it to simulate a crash.
    """

    def __init__(self, cfg: TrainConfig, *, resume: bool = False, on_step: Callable | None = None):
        validate(cfg)
        self.cfg = cfg
        self.on_step = on_step
        self.out = Path(cfg.out)
        self.ckpt_dir = self.out / "checkpoints"
        self.sampling_seed = cfg.seed if cfg.sampling_seed is None else cfg.sampling_seed
        if cfg.threads:
            torch.set_num_threads(int(cfg.threads))
        torch.manual_seed(cfg.seed)
        self.device = torch.device(cfg.device)
        self.task: Task = load_task(
            cfg.task.name, cfg.task.options, seed=cfg.seed, reward=cfg.task.reward
        )
        self.model, self.tokenizer = load_policy(cfg.model, self.task.alphabet, seed=cfg.seed)
        self.model.to(self.device)
        self.max_new_tokens = cfg.rollout.max_new_tokens or (self.task.max_answer_chars + 2)
        self.eval_examples = self.task.eval[: cfg.eval.num_prompts or len(self.task.eval)]
        self.estimator_options = self._estimator_options()
        self.binary_advantages = self._binary_advantages()
        if len(self.task.train) < cfg.rollout.prompts_per_step:
            raise ValueError(
                f"rollout.prompts_per_step ({cfg.rollout.prompts_per_step}) exceeds the "
                f"{len(self.task.train)} training prompts of task {self.task.name!r}"
            )
        self.ref_model = None
        self.optimizer = self._make_optimizer(cfg.optim.lr)
        self.step = 0
        self.opt_steps = 0
        self.sft_done = cfg.sft.steps == 0
        if resume:
            self._resume()
        else:
            self._start_dir()

    # -- setup -----------------------------------------------------------------------------
    @classmethod
    def resume(
        cls, out: str | Path, *, overrides: dict[str, Any] | None = None, **kw: Any
    ) -> Trainer:
        """Reopen the run in ``out`` from its ``config.yaml`` (``overrides``, e.g.
        ``{"max_steps": 200}``, may extend it) and its latest checkpoint."""
        out = Path(out)
        cfg_path = out / "config.yaml"
        if not cfg_path.is_file():
            raise ValueError(f"--resume {str(out)!r}: no config.yaml there (not a run directory)")
        cfg = config_from_dict(yaml.safe_load(cfg_path.read_text()))
        if overrides:
            cfg = config_from_dict(overrides, base=cfg)
        cfg.out = str(out)
        return cls(cfg, resume=True, **kw)

    def _estimator_options(self) -> dict[str, Any]:
        opts = dict(self.cfg.estimator_options)
        cal = opts.get("calibration")
        if isinstance(cal, str):
            from bestk.kappo import Calibration

            try:
                opts["calibration"] = Calibration.load(cal)
            except (OSError, ValueError) as e:
                raise ValueError(f"cannot load calibration {cal!r}: {e}") from None
            # Train only on the prompts the calibration knows (its bank's prompt ids).
            known = {int(x) if str(x).lstrip("-").isdigit() else x
                     for x in opts["calibration"].prompt_ids.tolist()}
            self.task.train = [e for e in self.task.train if e["id"] in known]
            if not self.task.train:
                raise ValueError(
                    f"calibration {cal!r} shares no prompt id with the training prompts of task "
                    f"{self.task.name!r} (make the bank with `bestk eval --bank`)"
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
            self.model.parameters(), lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay
        )

    def _start_dir(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        if latest_checkpoint(self.ckpt_dir) is not None:
            raise ValueError(
                f"run directory {str(self.out)!r} already holds checkpoints; use --resume "
                f"{self.out} or choose another --out"
            )
        write_text_atomic(
            self.out / "config.yaml", yaml.safe_dump(config_to_dict(self.cfg), sort_keys=False)
        )
        (self.out / "metrics.jsonl").write_text("")

    def _resume(self) -> None:
        ckpt = latest_checkpoint(self.ckpt_dir)
        if ckpt is None:
            raise ValueError(f"--resume {str(self.out)!r}: no checkpoint in {self.ckpt_dir}")
        if self.cfg.loss.kl_coef > 0:
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        meta = load_checkpoint(ckpt, self.model, self.optimizer, ref_model=self.ref_model)
        self.step = int(meta["step"])
        self.opt_steps = int(meta.get("opt_steps", 0))
        self.sft_done = bool(meta.get("sft_done", True))
        # Drop log lines of steps past the checkpoint: they are redone.
        rows = [
            r for r in read_metrics(self.out / "metrics.jsonl")
            if r.get("phase") == "sft" or r.get("step", 0) <= self.step
        ]
        write_text_atomic(
            self.out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows)
        )
        # A larger max_steps extends the run: keep config.yaml in sync.
        write_text_atomic(
            self.out / "config.yaml", yaml.safe_dump(config_to_dict(self.cfg), sort_keys=False)
        )

    # -- logging / checkpoints ---------------------------------------------------------------
    def log(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` (flushed and fsync'ed)."""
        with open(self.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

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
        """
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
        console = Console(stderr=True, quiet=not progress)
        console.print(
            f"[bold]bestk train[/] task={self.task.name} estimator={cfg.estimator} "
            f"params={count_parameters(self.model):,} out={self.out}"
        )
        bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not progress,
        )
        last_eval: dict[str, Any] = {}
        self.interrupted = False
        restore = self._install_sigint()
        try:
            with bar:
                if self.step == 0 and not self.sft_done:
                    self.sft(bar)
                if self.step == 0 and latest_checkpoint(self.ckpt_dir) is None:
                    last_eval = self.evaluate(0)
                    if cfg.loss.kl_coef > 0:
                        self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
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
        finally:
            restore()
        if self._stop_requested:
            self.interrupted = True
            if self.sft_done and latest_checkpoint(self.ckpt_dir) is not None:
                self.checkpoint()
            Console(stderr=True).print(
                f"interrupted after step {self.step}; checkpoint saved. Continue with "
                f"`bestk train --resume {self.out}`"
            )
            return last_eval
        self.finish()
        return last_eval

    def finish(self) -> None:
        """Save ``final/`` (HF model + tokenizer) and write the report with plots."""
        from bestk.train.report import write_report

        final = self.out / "final"
        tmp = self.out / ".final-tmp"
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp)
        self.model.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        if final.exists():
            import shutil

            shutil.rmtree(final)
        os.replace(tmp, final)
        write_report(self.out)


def train(cfg: TrainConfig, *, progress: bool = True) -> dict[str, Any]:
    """Run a new training run with ``cfg`` (see :class:`Trainer`)."""
    return Trainer(cfg).run(progress=progress)
