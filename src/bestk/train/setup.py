"""How a run starts, before any run-directory work: its task and device, then its policy.

:class:`RunSetup` is a run before its directory: the config checked and resolved, the task
loaded, the KAPPO plan and the prompts RL draws from, every check made. The
:class:`~bestk.train.trainer.Trainer` is one (it starts as one), and
:func:`bestk.train.steps.check_run` makes one to check a run without starting it. The Trainer
and the steps of ``bestk compare`` (SFT, calibration and bank jobs that need a policy but no
run directory, :mod:`bestk.train.steps`) start the same way (:func:`load_run_task`,
:func:`load_run_policy`), so that a policy built by either is the same tensor for tensor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from bestk.tasks import Example, Task, load_task
from bestk.train.algorithms import ALGORITHMS
from bestk.train.config import ResolvedTrainConfig, TrainConfig
from bestk.train.model.chat import render_task_prompts
from bestk.train.model.hf import enable_gradient_checkpointing
from bestk.train.model.policy import load_policy
from bestk.train.reference.bank import calibration_prompt_ids
from bestk.train.reference.plan import ReferencePlan, plan_reference, restrict_prompts
from bestk.train.rollout.prompts import check_prompt_lengths, lengths_over, prompt_lengths
from bestk.train.rollout.settings import sampling_header
from bestk.train.run.data import data_digest
from bestk.train.validation import check_reward_domain, check_task_memory, resolve_config

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedTokenizerBase

    from bestk.train.algorithms import AlgorithmSpec
    from bestk.train.model.policy import Policy

__all__ = ["RunSetup", "load_run_task", "load_run_policy", "max_new_tokens",
           "check_run_prompts", "check_prompt_pool", "model_context", "check_context",
           "run_header"]


class RunSetup:
    """A run of ``cfg`` before it touches its run directory or builds a model, and every check
    ``Trainer(cfg)`` makes by then: the config's values (:attr:`cfg`, checked and resolved
    once, :func:`~bestk.train.validation.resolve_config`), the task's options and sizes
    (:attr:`task`, or the ``task`` given, loaded already), the held-out prompts, the KAPPO
    plan (:attr:`plan`, :func:`~bestk.train.reference.plan.plan_reference`), the memory the
    task's prompts need, a calibration given in ``estimator_options`` (the spec's
    ``given_calibration``: RL then draws only its prompts), the estimator's reward domain and
    the prompt pool. Nothing is written. :attr:`rl_prompts` are the training prompts RL draws
    from (all, or the calibrated ones)."""

    cfg: ResolvedTrainConfig
    out: Path
    sampling_seed: int
    task: Task
    device: torch.device
    data: str | None
    max_new_tokens: int
    eval_examples: list[Example]
    spec: AlgorithmSpec
    plan: ReferencePlan | None
    rl_prompts: list[Example]

    def __init__(self, cfg: TrainConfig, *, task: Task | None = None) -> None:
        # every value checked, before the directory is touched or anything is built
        self.cfg = cfg = resolve_config(cfg)
        self.out = Path(os.path.abspath(cfg.out))  # before user code can chdir
        self.sampling_seed = cfg.seed if cfg.sampling_seed is None else cfg.sampling_seed
        self.task, self.device = load_run_task(cfg, task)  # options and sizes checked
        self.data = data_digest(cfg, self.task)  # a task read from files: what they held
        self.max_new_tokens = max_new_tokens(cfg, self.task)
        self.eval_examples = self.task.eval[: cfg.eval.num_prompts or len(self.task.eval)]
        if not self.eval_examples:
            raise ValueError(f"task {self.task.name!r} has no held-out prompts to evaluate on")
        self.spec = ALGORITHMS[cfg.algorithm]
        self.plan = plan_reference(cfg, self.spec, self.task) if self.spec.calibrated(cfg) \
            else None
        self.rl_prompts = list(self.task.train) if self.plan is None else self.plan.prompts
        check_task_memory(cfg, self.task, len(self.plan.bank_examples or [])
                          if self.plan is not None else 0)  # the prompts that exist
        given = self.spec.given_calibration(cfg)  # pg: a file of estimator_options, loaded
        if given is not None:  # train on its prompts only
            ids = set(calibration_prompt_ids(given[0]))
            self.rl_prompts = restrict_prompts(self.rl_prompts, ids, given[1], self.task)
        check_reward_domain(cfg, self.task, given[0].kind if given is not None
                            else self.kappo_kind)
        if not self.spec.bank_completions:  # @k-DPO draws bank pairs, not prompts
            check_prompt_pool(cfg, self.task, self.rl_prompts, banked=self.plan is not None
                              and self.plan.bank_examples is not None)

    @property
    def kappo_kind(self) -> str | None:
        """The kind of the run's KAPPO calibration (``None`` when it needs none)."""
        return None if self.plan is None else self.plan.kind

    @property
    def bank_samples(self) -> int:
        """Reference samples of the run's KAPPO bank (0 without one): rollout budget."""
        return 0 if self.plan is None else self.plan.bank_samples


def load_run_task(cfg: ResolvedTrainConfig, task: Task | None = None
                  ) -> tuple[Task, torch.device]:
    """``(task, device)`` of a run of ``cfg``: sets ``threads`` and the global torch seed
    (``seed``), then loads the task (its options and sizes checked), unless given the ``task``
    loaded already (``bestk compare`` checks the runs of a seed against one)."""
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device)
    if task is None:
        task = load_task(cfg.task.name, cfg.task.options, seed=cfg.seed, reward=cfg.task.reward,
                         reward_weights=cfg.task.reward_weights,
                         system_prompt=cfg.task.system_prompt)
    return task, device


def load_run_policy(cfg: ResolvedTrainConfig, task: Task, device: torch.device
                    ) -> tuple[Policy, PreTrainedTokenizerBase]:
    """``(model, tokenizer)``: the policy of ``model`` (initialised from ``seed``) on
    ``device``, with the task's prompts rendered by its chat template and their lengths
    checked against ``rollout.max_prompt_length`` (:func:`check_run_prompts`) and the model's
    context (:func:`check_context`, the SFT warm-up's too when it runs); each reward function
    is called once on a rendered prompt (:meth:`~bestk.tasks.Task.probe_rewards`), so one that
    raises stops the run before any work."""
    model, tokenizer = load_policy(cfg.model, task.alphabet, seed=cfg.seed)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    render_task_prompts(task, tokenizer, cfg.model.chat_template)
    task.probe_rewards()  # a reward that raises: now, not after the SFT
    check_run_prompts(cfg, task, tokenizer)
    check_context(cfg, task, tokenizer, model_context(model), sft=cfg.sft.steps > 0)
    model.to(device)  # type: ignore[arg-type]  # @wraps(Module.to): typed unbound (self first)
    return model, tokenizer


def check_prompt_pool(cfg: ResolvedTrainConfig, task: Task, prompts: list[Example], *,
                      banked: bool) -> None:
    """RL draws ``rollout.prompts_per_step`` distinct prompts a step from ``prompts`` (the
    task's training prompts, or the calibrated ones; ``banked``: those of the run's own
    reference bank): fewer is a one-line ``ValueError`` naming the pool, before any work."""
    if len(prompts) >= cfg.rollout.prompts_per_step:
        return
    where = (f"the {len(prompts)} calibrated prompts" if len(prompts) < len(task.train) else
             f"the {len(task.train)} training prompts")
    raise ValueError(
        f"rollout.prompts_per_step ({cfg.rollout.prompts_per_step}) exceeds {where} of task "
        f"{task.name!r}" + (" (raise kappo.bank_prompts)" if banked else "")
    )


def max_new_tokens(cfg: ResolvedTrainConfig, task: Task) -> int:
    """Completion length bound: ``rollout.max_new_tokens``, or the task's longest answer + 2."""
    return cfg.rollout.max_new_tokens or (task.max_answer_chars + 2)


def check_run_prompts(cfg: ResolvedTrainConfig, task: Task, tokenizer: PreTrainedTokenizerBase
                      ) -> int:
    """How many of the task's rendered prompts (training and held-out) are longer than
    ``rollout.max_prompt_length`` tokens and will be cut from the left (0 without a limit);
    with ``rollout.prompt_truncation: error`` a long prompt is a one-line ``ValueError``,
    before any work (:func:`bestk.train.rollout.prompts.check_prompt_lengths`)."""
    r = cfg.rollout
    if r.max_prompt_length is None:
        return 0
    prompts = [ex["prompt"] for ex in [*task.train, *task.eval]]
    return check_prompt_lengths(tokenizer, prompts, r.max_prompt_length, r.prompt_truncation)


def model_context(model: Policy) -> int | None:
    """The most tokens ``model`` takes (its config's ``max_position_embeddings``, or
    ``n_positions`` / ``max_sequence_length``: ``model.max_positions`` for the tiny model), or
    ``None`` when its config does not say."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_context(cfg: ResolvedTrainConfig, task: Task, tokenizer: PreTrainedTokenizerBase,
                  context: int | None, *, sft: bool) -> None:
    """A prompt and its ``max_new_tokens`` completion fit the model's ``context`` (tokens):
    a one-line ``ValueError`` before any work, naming the context, the longest prompt and the
    ``rollout.max_prompt_length`` that would cut every prompt to fit. Prompts longer than the
    context once made a run sample (and train on) sequences the model was never built for,
    until the kernel killed it for memory. With ``sft`` (the SFT warm-up runs) each training
    example's ``prompt + answer + EOS``, which the warm-up trains on whole (uncut), must fit
    too. ``context`` ``None`` (the model does not say): nothing is checked."""
    if context is None:
        return
    max_new = max_new_tokens(cfg, task)
    name = (f"rollout.max_new_tokens={max_new}" if cfg.rollout.max_new_tokens is not None else
            f"rollout.max_new_tokens={max_new} (null: the task's answer bound + 2)")
    room = context - max_new
    if room < 1:
        raise ValueError(f"{name} leaves no room for a prompt in the model's context of "
                         f"{context} tokens; lower it (at most {context - 1})")
    limit = cfg.rollout.max_prompt_length
    prompts = [ex["prompt"] for ex in [*task.train, *task.eval]]
    if limit is None or limit > room:
        long = lengths_over(tokenizer, prompts, room)
        if long:
            raise ValueError(
                f"{len(long)} of {len(prompts)} prompts do not fit the model's context of "
                f"{context} tokens with {name} (the longest has {max(long)} tokens); set "
                f"rollout.max_prompt_length={room} (or less) to keep the last tokens of each, "
                "or shorten them")
    if not sft:
        return
    pairs = [(ex["prompt"], str(ex["answer"])) for ex in task.train]
    maybe = [pa for pa in pairs if len(pa[0].encode()) + len(pa[1].encode()) + 5 > context]
    if not maybe:
        return
    p_len = prompt_lengths(tokenizer, [p for p, _ in maybe])
    a_len = prompt_lengths(tokenizer, [a for _, a in maybe])
    long = [p + a + 1 for p, a in zip(p_len, a_len, strict=True) if p + a + 1 > context]
    if long:
        raise ValueError(
            f"the SFT warm-up trains on whole prompts and answers: {len(long)} of its "
            f"{len(pairs)} examples are longer than the model's context of {context} tokens "
            f"(the longest has {max(long)}); set sft.steps=0, or shorten them")


def run_header(cfg: ResolvedTrainConfig, task: Task, tokenizer: PreTrainedTokenizerBase) -> str:
    """The run header's sampling line (:func:`bestk.train.rollout.settings.sampling_header`: the
    values used and where from) and, with ``rollout.max_prompt_length``, how many of the
    task's prompts are cut to it."""
    line = sampling_header(cfg)
    limit = cfg.rollout.max_prompt_length
    if limit is not None:
        cut = check_run_prompts(cfg, task, tokenizer)
        total = len(task.train) + len(task.eval)
        line += (f"\nprompts: {cut} of {total} longer than rollout.max_prompt_length={limit} "
                 f"tokens, cut from the left")
    return line


def unknown_characters(tokenizer: PreTrainedTokenizerBase, prompts: list[str]
                       ) -> tuple[int, str, str] | None:
    """``(prompts holding a character the tokenizer cannot encode, one such character, its
    prompt)``, or ``None`` when it encodes every character.

    A character cannot be encoded when it alone gives the unknown token, or no token at all
    (a vocabulary without it and without byte fallback drops it: a character-level tokenizer
    reloaded from ``final/``); whitespace alone may legitimately give none (SentencePiece).
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    bad = set()
    for ch in sorted(set().union(*map(set, prompts))):
        ids = tokenizer(ch, add_special_tokens=False)["input_ids"]
        if (not ids and not ch.isspace()) or (unk is not None and unk in ids):
            bad.add(ch)
    if not bad:
        return None
    hits = [p for p in prompts if bad.intersection(p)]
    return len(hits), next(ch for ch in hits[0] if ch in bad), hits[0]


def unknown_characters_warning(tokenizer: PreTrainedTokenizerBase, prompts: list[str],
                               hint: str) -> str | None:
    """The one warning ``bestk train`` and ``bestk eval`` give when ``prompts`` hold
    characters ``tokenizer`` does not know (:func:`unknown_characters`: how many prompts, one
    such character and its prompt, then ``hint``), or ``None`` when it knows them all."""
    unknown = unknown_characters(tokenizer, prompts)
    if unknown is None:
        return None
    count, char, prompt = unknown
    shown = prompt if len(prompt) <= 60 else prompt[:57] + "..."
    return (f"{count} of {len(prompts)} prompts hold characters the model's tokenizer does not "
            f"know (e.g. {char!r} in {shown!r}), which it drops or reads as unknown: {hint}")


def tokenizer_hint(cfg: ResolvedTrainConfig) -> str:
    """What :func:`unknown_characters_warning` says to a training run about its model."""
    if cfg.model.path is None:
        return ("the tiny model's character tokenizer knows only the task's alphabet (printable "
                "ASCII for a task without one); clean the prompts, or train a model.path with a "
                "tokenizer of its own")
    return f"does {str(cfg.model.path)!r} suit task {cfg.task.name!r}?"
