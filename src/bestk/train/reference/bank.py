"""In-run KAPPO reference calibration: the run's bank of reference samples and its calibration.

A run that needs a calibration (``algorithm: apo`` / ``dpo``, or ``pg`` with ``kappo_grpo``)
and is given no file calibrates itself once, after the SFT warm-up (or from ``model.path``):
the frozen reference policy samples ``kappo.bank_size`` (M) completions for each of
``kappo.bank_prompts`` training prompts (:func:`bank_examples`, a seeded subset) at the
training temperature / top-p (:func:`sample_bank`), the completions are scored, and
:func:`bestk.kappo.calibrate` turns the bank into a :class:`~bestk.kappo.Calibration`:
``binary`` (KAPPO Algorithm 1) on the 0/1 success or ``winrate`` (Algorithm 2) on the raw
reward (:func:`resolve_kind`). RL then draws only from the bank's prompts.

Files in the run directory (each written atomically; ``calibration.json`` last, so that its
presence means the bank files are complete):

* ``bank.jsonl`` -- one line per prompt, ``{"prompt_id", "rewards": [M raw rewards]}`` plus
  ``"texts"`` when the completions are kept; ``bestk calibrate RUN/bank.jsonl`` reads it
  (binary calibrations need the 0/1 success; ``--kind winrate`` takes it as it is);
* ``bank_tokens.safetensors`` -- when the completions are kept (@k-DPO's pairs): the ``(P*M,
  T)`` completion token ids and mask and the ``(P*M,)`` reference sequence log-probabilities
  (so the reference model need not be kept), rows prompt-major like ``bank.jsonl``;
* ``calibration.json`` -- the calibration (``bestk.kappo`` file format), also when it came
  from a ``kappo.calibration`` file: the run's own copy is what a resume uses.

``kappo.bank`` names a directory holding these bank files (:func:`load_bank`) -- an earlier run
of the same reference policy, or the per-seed bank ``bestk compare`` shares between the runs of
a seed -- to use instead of sampling: it must cover exactly the run's bank prompts with
``bank_size`` samples each; the run still calibrates it with its own k, beta and kind and
keeps copies of the files in its directory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bestk._atomic import atomic_path, write_text_atomic
from bestk.kappo import BINARY, WINRATE, Calibration, calibrate, calibration_kind
from bestk.tasks import Example, Task
from bestk.train.model.logprobs import completion_logprobs
from bestk.train.rollout.sampler import sample
from bestk.train.runtime.errors import as_os_error
from bestk.train.runtime.stop import Stopped

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from rich.progress import Progress
    from transformers import PreTrainedTokenizerBase

    from bestk.train.model.policy import Policy

__all__ = [
    "ReferenceBank",
    "CALIBRATION_FILE",
    "BANK_FILE",
    "TOKENS_FILE",
    "resolve_kind",
    "calibration_values",
    "bank_examples",
    "sample_bank",
    "calibrate_bank",
    "save_reference",
    "load_reference",
    "load_bank",
    "check_prompt_ids",
    "calibration_prompt_ids",
]

CALIBRATION_FILE = "calibration.json"
BANK_FILE = "bank.jsonl"
TOKENS_FILE = "bank_tokens.safetensors"

#: Sequences sampled per batch while building the bank (about one training batch).
_BANK_BATCH = 512


@dataclass
class ReferenceBank:
    """M reference samples for each of P prompts (row ``i * M + j`` = sample j of prompt i).

    ``prompt_ids`` ``(P,)`` int64; ``rewards`` ``(P, M)`` raw rewards; with the completions
    kept also ``texts`` (P lists of M strings), ``completion_ids`` / ``completion_mask``
    ``(P*M, T)`` and ``ref_logps`` ``(P*M,)`` float64 reference sequence log-probabilities.
    """

    prompt_ids: np.ndarray
    rewards: np.ndarray
    texts: list[list[str]] | None = None
    completion_ids: torch.Tensor | None = None
    completion_mask: torch.Tensor | None = None
    ref_logps: torch.Tensor | None = None

    @property
    def size(self) -> int:
        """M, the samples per prompt."""
        return int(self.rewards.shape[1])

    @property
    def num_prompts(self) -> int:
        return int(self.rewards.shape[0])

    def checksum(self) -> str:
        """SHA-256 of the prompt ids and raw rewards (ties the token file to ``bank.jsonl``)."""
        h = hashlib.sha256(np.ascontiguousarray(self.prompt_ids, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(self.rewards, dtype="<f8").tobytes())
        return "sha256:" + h.hexdigest()


def resolve_kind(kind: str, *, binary_only: bool, graded: bool) -> str:
    """``kappo.kind`` with ``auto`` resolved: ``binary`` for an algorithm that needs it
    (@k-DPO) or a binary task, else ``winrate``."""
    if kind != "auto":
        return kind
    return (BINARY if binary_only or not graded else WINRATE).name


def calibration_values(task: Task, kind: str, rewards: np.ndarray) -> np.ndarray:
    """What a ``kind`` calibration sees of raw ``rewards``: the 0/1 success (``binary``,
    float64) or the rewards themselves (``winrate``)."""
    return calibration_kind(kind).bank_values(rewards, task.success)


def bank_examples(
    examples: Sequence[Example], bank_prompts: int | None, seed: int
) -> list[Example]:
    """The bank's prompts: ``bank_prompts`` of ``examples`` drawn without replacement by a
    generator of ``seed`` (all of them when ``None`` or more), in their original order."""
    if bank_prompts is None or bank_prompts >= len(examples):
        return list(examples)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(examples), size=bank_prompts, replace=False))
    return [examples[i] for i in idx]


@torch.no_grad()
def sample_bank(
    model: Policy,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    examples: Sequence[Example],
    *,
    size: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
    completions: bool = False,
    progress: Progress | None = None,
    top_k: int = 0,
    max_prompt_length: int | None = None,
    prompt_truncation: str = "left",
    should_stop: Callable[[], bool] | None = None,
) -> ReferenceBank:
    """Sample and score ``size`` completions of ``model`` for each example (one generator
    seeded with ``seed``, batches of about 512 sequences; a ``rich`` progress bar if given;
    ``top_k`` and the prompt length limit as in :func:`~bestk.train.rollout.sampler.sample`).

    With ``completions`` the token ids, texts and reference sequence log-probabilities
    (:func:`~bestk.train.model.logprobs.completion_logprobs` at ``temperature``) are kept too.
    ``should_stop`` (Ctrl-C, SIGTERM) is asked before each batch: when it says so,
    :class:`~bestk.train.runtime.stop.Stopped` is raised.
    """
    if not examples:
        raise ValueError("the reference bank has no prompts")
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(int(seed))
    per_batch = max(1, _BANK_BATCH // size)
    rewards, texts, ids, masks, logps = [], [], [], [], []
    bar = progress.add_task(
        f"KAPPO bank: {len(examples)} prompts x {size}", total=len(examples)
    ) if progress is not None else None
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(examples), per_batch):
            if should_stop is not None and should_stop():
                raise Stopped(f"the KAPPO reference bank ({start} of {len(examples)} prompts)")
            chunk = list(examples[start : start + per_batch])
            ro = sample(
                model, tokenizer, [e["prompt"] for e in chunk], n=size, temperature=temperature,
                top_p=top_p, max_new_tokens=max_new_tokens, generator=gen, top_k=top_k,
                max_prompt_length=max_prompt_length, prompt_truncation=prompt_truncation,
            )
            rewards.append(task.score([e for e in chunk for _ in range(size)], ro.texts))
            if completions:
                texts.extend(ro.texts)
                ids.append(ro.completion_ids.cpu())
                masks.append(ro.completion_mask.cpu())
                logps.append(completion_logprobs(
                    model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                    temperature=temperature, group_size=size,
                ).double().cpu())
            if progress is not None:
                assert bar is not None  # added with the progress bar
                progress.update(bar, advance=len(chunk))
    finally:
        model.train(was_training)
    bank = ReferenceBank(
        prompt_ids=np.asarray([e["id"] for e in examples], dtype=np.int64),
        rewards=np.concatenate(rewards).reshape(len(examples), size),
    )
    if completions:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        width = max(t.shape[1] for t in ids)
        bank.completion_ids = torch.cat([
            torch.nn.functional.pad(t, (0, width - t.shape[1]), value=pad) for t in ids
        ])
        bank.completion_mask = torch.cat([
            torch.nn.functional.pad(m, (0, width - m.shape[1]), value=0) for m in masks
        ])
        bank.ref_logps = torch.cat(logps)
        bank.texts = [texts[i * size : (i + 1) * size] for i in range(len(examples))]
    return bank


def calibrate_bank(bank: ReferenceBank, task: Task, kind: str, k: int, beta: float) -> Calibration:
    """The KAPPO calibration of ``bank`` (:func:`bestk.kappo.calibrate`; ``binary`` on the
    0/1 success, ``winrate`` on the raw rewards)."""
    values = calibration_values(task, kind, bank.rewards)
    return calibrate(dict(zip(bank.prompt_ids.tolist(), values, strict=True)), k=k, beta=beta,
                     kind=kind)


def calibration_prompt_ids(calibration: Calibration) -> list[int | str]:
    """The prompt ids of a calibration as the trainer's examples carry them (digit strings
    become ints), in the calibration's order."""
    return [
        int(x) if str(x).lstrip("-").isdigit() else x for x in calibration.prompt_ids.tolist()
    ]


def check_prompt_ids(calibration: Calibration, train_ids: Sequence[int | str], source: str
                     ) -> None:
    """Every prompt id of ``calibration`` is a training prompt id of the task (one-line
    ``ValueError`` naming the first that is not, and how many)."""
    known = set(train_ids)
    ids = calibration_prompt_ids(calibration)
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ValueError(
            f"{source}: {len(unknown)} of its {len(ids)} prompt ids are not training prompts of "
            f"the task (first: {unknown[0]!r}); it was made for another task or split"
        )


def save_reference(out: str | Path, calibration: Calibration, bank: ReferenceBank | None) -> None:
    """Write the bank files (if a bank is given) and then ``calibration.json``, atomically."""
    out = Path(out)
    if bank is not None:
        rows = []
        for i, pid in enumerate(bank.prompt_ids.tolist()):
            row: dict[str, object] = {"prompt_id": pid, "rewards": bank.rewards[i].tolist()}
            if bank.texts is not None:
                row["texts"] = bank.texts[i]
            rows.append(json.dumps(row) + "\n")
        write_text_atomic(out / BANK_FILE, "".join(rows))
        if (bank.completion_ids is not None and bank.completion_mask is not None
                and bank.ref_logps is not None):
            from safetensors.torch import save_file

            tensors = {
                "completion_ids": bank.completion_ids.contiguous(),
                "completion_mask": bank.completion_mask.contiguous(),
                "ref_logps": bank.ref_logps.contiguous(),
            }
            final = out / TOKENS_FILE
            with atomic_path(final, suffix=".safetensors") as tmp:
                try:
                    save_file(tensors, str(tmp), metadata={"bank": bank.checksum()})
                except Exception as e:  # safetensors reports I/O failures as SafetensorError
                    raise as_os_error(e, final) from None
    calibration.save(out / CALIBRATION_FILE)


def _read_bank(path: Path) -> ReferenceBank:
    ids, rewards, texts = [], [], []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ValueError(f"{path} is missing") from None
    for i, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
            ids.append(int(row["prompt_id"]))
            rewards.append([float(x) for x in row["rewards"]])
            if "texts" in row:
                texts.append([str(t) for t in row["texts"]])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ValueError(f"{path} line {i} is not a bank row") from None
    if not rewards or len({len(r) for r in rewards}) != 1:
        raise ValueError(f"{path} holds no rows, or rows of different sizes")
    if texts and len(texts) != len(rewards):
        raise ValueError(f"{path}: some rows lack 'texts'")
    return ReferenceBank(np.asarray(ids, dtype=np.int64), np.asarray(rewards, dtype=np.float64),
                         texts or None)


def load_reference(
    out: str | Path, *, completions: bool
) -> tuple[Calibration, ReferenceBank | None]:
    """The calibration of the run in ``out`` and, with ``completions``, its bank with the
    completions (``ValueError`` naming a missing, damaged or inconsistent file)."""
    out = Path(out)
    path = out / CALIBRATION_FILE
    if not path.is_file():
        raise ValueError(
            f"{path} is missing, but the run's checkpoints continue from its calibration; "
            "restore it, or start a new run with another --out"
        )
    cal = Calibration.load(path)
    if not completions:
        return cal, None
    return cal, load_bank(out, completions=True)


def load_bank(directory: str | Path, *, completions: bool) -> ReferenceBank:
    """The bank in ``directory`` (``bank.jsonl``; with ``completions`` also the token file,
    checked to belong to it). ``ValueError`` naming a missing, damaged or inconsistent file."""
    out = Path(directory)
    bank = _read_bank(out / BANK_FILE)
    if not completions:
        return bank
    from safetensors import safe_open

    tokens = out / TOKENS_FILE
    try:
        with safe_open(str(tokens), framework="pt") as f:
            recorded = (f.metadata() or {}).get("bank")
            bank.completion_ids = f.get_tensor("completion_ids")
            bank.completion_mask = f.get_tensor("completion_mask")
            bank.ref_logps = f.get_tensor("ref_logps")
    except Exception as e:  # missing file, SafetensorError, missing tensors
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{tokens} is missing or unreadable: {first}") from None
    rows = bank.num_prompts * bank.size
    if recorded != bank.checksum() or bank.completion_ids.shape[0] != rows:
        raise ValueError(f"{tokens} does not belong to {out / BANK_FILE} (edited?); restore both")
    return bank
