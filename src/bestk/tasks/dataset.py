"""The ``dataset`` task: prompts and reference answers from local parquet / JSON-lines / CSV
files, read with Hugging Face ``datasets``, checked with math-verify by default.

GSM8K- and MATH-style files work as they are: the answer field may be a whole worked solution
(GSM8K's ``... #### 72``: the ``math_verify`` reward compares the final answer after ``####``;
MATH's ``\\boxed{}``: math-verify finds it). The answer field is also the reference
completion of the SFT warm-up.

    bestk train --set model.path=./Qwen2.5-0.5B-Instruct --set task.name=dataset \\
                --set task.options='{path: gsm8k/train.parquet, eval_path: gsm8k/test.parquet}'
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bestk._optional import require
from bestk.tasks.base import Task, register_task
from bestk.tasks.builtin import split_rows
from bestk.tasks.rewards import Reward, get_reward

__all__ = ["FORMATS", "dataset_task", "read_rows"]

#: file format -> ``datasets`` builder
FORMATS: dict[str, str] = {"parquet": "parquet", "jsonl": "json", "json": "json", "csv": "csv"}
_SUFFIX = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".json": "json",
           ".csv": "csv"}


@contextlib.contextmanager
def _quiet_datasets(datasets: Any) -> Iterator[None]:
    """``datasets``' progress bars and log messages off meanwhile (restored after): a bad file
    becomes one ``ValueError`` line, not a logged error plus the error."""
    was_off = datasets.are_progress_bars_disabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL + 10)
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if not was_off:
            datasets.enable_progress_bars()


def read_rows(path: str, fmt: str = "auto", *, option: str = "path") -> list[dict[str, Any]]:
    """The rows of a local data file (or glob pattern) as dicts, through ``datasets``.

    ``fmt``: ``parquet``, ``jsonl``, ``json``, ``csv``, or ``auto`` (from the file suffix).
    Nothing is cached outside a temporary directory and nothing is downloaded. A missing
    file, an unknown format or an unreadable file raises ``ValueError`` naming it.
    """
    if not path:
        raise ValueError(f"task dataset needs option {option} (a parquet, jsonl or csv file)")
    p = Path(path)
    if not any(ch in path for ch in "*?[") and not p.is_file():
        raise ValueError(f"task dataset option {option}: {path!r} is not a file")
    if fmt == "auto":
        fmt = _SUFFIX.get(p.suffix.lower(), "")
        if not fmt:
            raise ValueError(
                f"task dataset option {option}: cannot tell the format of {path!r} from its "
                f"suffix; set option format to one of {', '.join(FORMATS)}"
            )
    if fmt not in FORMATS:
        raise ValueError(f"task dataset option format must be auto or one of "
                         f"{', '.join(FORMATS)}, got {fmt!r}")
    datasets = require("datasets", extra="train")
    with tempfile.TemporaryDirectory(prefix="bestk-datasets-") as cache, \
            _quiet_datasets(datasets):
        try:
            ds = datasets.load_dataset(FORMATS[fmt], data_files=path, split="train",
                                       cache_dir=cache, keep_in_memory=True)
            rows = ds.to_list()
        except Exception as e:  # pyarrow / datasets raise many types for a bad file
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"cannot read {path!r} as {fmt}: {first}") from None
    if not rows:
        raise ValueError(f"{path!r} holds no rows")
    return rows


@register_task("dataset")
def dataset_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    path: str = "",
    eval_path: str = "",
    format: str = "auto",
    num_eval: int = 64,
    prompt_field: str = "question",
    answer_field: str = "answer",
    template: str = "{prompt}",
    reward_name: str = "math_verify",
    max_answer_chars: int = 512,
) -> Task:
    """Prompts and answers from a local parquet / JSONL / CSV file (:func:`read_rows`).

    ``prompt_field`` and ``answer_field`` name the columns (GSM8K: ``question`` / ``answer``,
    the defaults; MATH: ``problem`` / ``solution``); every column reaches the reward. The
    prompt is ``template`` formatted with ``{prompt}`` and the row's columns (e.g.
    ``"{prompt}\\nPut the final answer after ####."``; with an instruct model's chat template
    the result is then sent as the user message). Held-out prompts come from ``eval_path``,
    else ``num_eval`` rows of ``path`` drawn with ``seed``. ``reward_name``: a registered
    reward or ``module:function`` (default ``math_verify``: 1 when math-verify finds the
    completion's final answer equal to the reference's, GSM8K's ``####`` read on both sides).
    ``max_answer_chars`` bounds the completion length (default ``max_new_tokens`` = it + 2).
    """
    spec = reward or get_reward(reward_name)
    rows = read_rows(path, format)
    eval_rows = read_rows(eval_path, format, option="eval_path") if eval_path else None
    train, held = split_rows(rows, path, eval_rows, eval_path, num_eval=num_eval, seed=seed,
                             prompt_field=prompt_field, answer_field=answer_field,
                             template=template)
    return Task(f"dataset/{Path(path).stem}", train, held, spec, None, max_answer_chars)
