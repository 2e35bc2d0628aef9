"""The ``dataset`` task: prompts and reference answers from local data as people store it --
parquet / JSON-lines / JSON / CSV / Arrow files, a directory of such shards, or a directory
written by ``datasets``' ``save_to_disk`` -- read with Hugging Face ``datasets``, checked with
math-verify by default. A prompt column may hold text or chat messages (TRL's conversational
format), rendered later through the model's chat template.

GSM8K- and MATH-style files work as they are: the answer field may be a whole worked solution
(GSM8K's ``... #### 72``: the ``math_verify`` reward compares the final answer after ``####``;
MATH's ``\\boxed{}``: math-verify finds it). The answer field is also the reference
completion of the SFT warm-up.

    bestk train --set model.path=./Qwen2.5-0.5B-Instruct --set task.name=dataset \\
                --set task.options='{path: gsm8k/train.parquet, eval_path: gsm8k/test.parquet}'
"""

from __future__ import annotations

import contextlib
import glob
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from bestk._optional import require
from bestk.tasks.base import Row, Task, register_task
from bestk.tasks.builtin import split_rows
from bestk.tasks.rewards import Reward, get_reward

__all__ = ["FORMATS", "dataset_task", "read_rows"]

#: file format -> ``datasets`` builder
FORMATS: dict[str, str] = {"parquet": "parquet", "jsonl": "json", "json": "json", "csv": "csv",
                           "arrow": "arrow"}
_SUFFIX = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".json": "json",
           ".csv": "csv", ".arrow": "arrow"}
#: What ``path`` may be, for error messages.
ACCEPTED = ("a parquet, .jsonl, .json, .csv or .arrow file, a glob of them, a directory of "
            "such shards, or a datasets save_to_disk directory")
#: Hugging Face's shard names, ``train-00000-of-00002.parquet``: the split is the prefix.
_SHARD = re.compile(r"^(?P<split>.+?)-\d{5}-of-\d{5}\.")


@contextlib.contextmanager
def _quiet_datasets(datasets: ModuleType) -> Iterator[None]:
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


def _is_saved_dataset(d: Path) -> bool:
    """Whether ``d`` was written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    return (d / "dataset_dict.json").is_file() or (
        (d / "state.json").is_file() and (d / "dataset_info.json").is_file())


def _pick_split(datasets: ModuleType, ds: Any, d: Path, option: str,
                splits: tuple[str, ...]) -> Any:
    """``ds`` loaded from a ``save_to_disk`` directory ``d``; of a ``DatasetDict``, its first
    split among ``splits`` or its only split."""
    if not isinstance(ds, datasets.DatasetDict):
        return ds
    names = list(ds)
    pick = next((n for n in splits if n in ds), names[0] if len(names) == 1 else None)
    if pick is None:
        raise ValueError(
            f"task dataset option {option}: {str(d)!r} holds the splits {', '.join(names)}; "
            f"give one of them: {', '.join(str(d / n) for n in names)}"
        )
    return ds[pick]


def _shards(d: Path, fmt: str, option: str) -> tuple[list[str], str]:
    """The data files of a directory of shards (sorted) and their format."""
    files = sorted(f for f in d.iterdir() if f.is_file() and not f.name.startswith("."))
    by_fmt: dict[str, list[Path]] = {}
    for f in files:
        f_fmt = _SUFFIX.get(f.suffix.lower(), "")
        if f_fmt and (fmt == "auto" or FORMATS[f_fmt] == FORMATS.get(fmt)):
            by_fmt.setdefault(f_fmt, []).append(f)
    if not by_fmt:
        raise ValueError(f"task dataset option {option}: directory {str(d)!r} holds no data "
                         f"files" + ("" if fmt == "auto" else f" of format {fmt}")
                         + f"; it accepts {ACCEPTED}")
    if len(by_fmt) > 1:
        raise ValueError(f"task dataset option {option}: directory {str(d)!r} mixes formats "
                         f"({', '.join(sorted(by_fmt))}); set option format or give a glob")
    (f_fmt, chosen), = by_fmt.items()
    splits = {m["split"] for f in chosen if (m := _SHARD.match(f.name))}
    if len(splits) > 1:
        suffix = chosen[0].suffix
        raise ValueError(
            f"task dataset option {option}: directory {str(d)!r} holds the shards of several "
            f"splits ({', '.join(sorted(splits))}); give one as a glob, e.g. "
            f"{str(d / (sorted(splits)[0] + '-*' + suffix))!r}"
        )
    return [str(f) for f in chosen], (f_fmt if fmt == "auto" else fmt)


def read_rows(path: str, fmt: str = "auto", *, option: str = "path",
              splits: tuple[str, ...] = ("train",)) -> list[Row]:
    """The rows of local data as dicts, through ``datasets``.

    ``path`` is a data file, a glob pattern of them, a directory of shards of one format
    (sorted by name; Hugging Face's ``<split>-00000-of-00002.parquet`` names of several
    splits are refused, naming the glob that picks one) or a directory written by
    ``save_to_disk`` (read with ``datasets.load_from_disk``; of a ``DatasetDict``, the first
    of ``splits`` it has, or its only split). ``fmt``: ``parquet``, ``jsonl``, ``json``,
    ``csv``, ``arrow``, or ``auto`` (from the file suffix). Nothing is cached outside a
    temporary directory and nothing is downloaded. A missing path, an unknown format or an
    unreadable file raises ``ValueError`` naming it (and what ``path`` may be).
    """
    if not path:
        raise ValueError(f"task dataset needs option {option} ({ACCEPTED})")
    if fmt != "auto" and fmt not in FORMATS:
        raise ValueError(f"task dataset option format must be auto or one of "
                         f"{', '.join(FORMATS)}, got {fmt!r}")
    p = Path(path)
    saved = p.is_dir() and _is_saved_dataset(p)
    data_files: str | list[str] = path
    if p.is_dir():
        if not saved:
            data_files, fmt = _shards(p, fmt, option)
    elif not any(ch in path for ch in "*?[") and not p.is_file():
        raise ValueError(f"task dataset option {option}: {path!r} is not a file or a directory "
                         f"(it accepts {ACCEPTED})")
    elif fmt == "auto":
        fmt = _SUFFIX.get(p.suffix.lower(), "")
        if not fmt:
            raise ValueError(
                f"task dataset option {option}: cannot tell the format of {path!r} from its "
                f"suffix; set option format to one of {', '.join(FORMATS)}"
            )
    datasets = require("datasets", extra="train")
    with tempfile.TemporaryDirectory(prefix="bestk-datasets-") as cache, \
            _quiet_datasets(datasets):
        try:
            if saved:
                ds = datasets.load_from_disk(str(p), keep_in_memory=True)
            else:
                ds = datasets.load_dataset(FORMATS[fmt], data_files=data_files, split="train",
                                           cache_dir=cache, keep_in_memory=True)
        except Exception as e:  # pyarrow / datasets raise many types for a bad file
            if not saved and _all_blank(data_files):  # datasets: StopIteration
                raise ValueError(f"{path!r} holds no rows") from None
            raise ValueError(f"cannot read {path!r} as {fmt if not saved else 'a saved dataset'}"
                             f": {_first_line(e)}") from None
        if saved:
            ds = _pick_split(datasets, ds, p, option, splits)
        try:
            rows = ds.to_list()
        except UnicodeDecodeError as e:  # arrow keeps the bytes; they fail here
            raise ValueError(f"{path!r} is not UTF-8 text (byte {e.object[e.start]:#04x} in a "
                             "value); convert it to UTF-8") from None
    if not rows:
        raise ValueError(f"{path!r} holds no rows")
    return rows


def _all_blank(data_files: str | list[str]) -> bool:
    """Whether every file of ``data_files`` (paths or a glob) holds only whitespace."""
    files = [data_files] if isinstance(data_files, str) else data_files
    names = [n for f in files for n in (sorted(glob.glob(f)) or [f])]
    try:
        return bool(names) and all(not Path(n).read_bytes().strip() for n in names)
    except OSError:
        return False


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


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
    """Prompts and answers from local data (:func:`read_rows`: a parquet / JSONL / JSON / CSV /
    Arrow file, a glob, a directory of shards or a ``save_to_disk`` directory).

    ``prompt_field`` and ``answer_field`` name the columns (GSM8K: ``question`` / ``answer``,
    the defaults; MATH: ``problem`` / ``solution``; TRL datasets: ``prompt``); every column
    reaches the reward. A text prompt is ``template`` formatted with ``{prompt}`` and the
    row's columns (e.g. ``"{prompt}\\nPut the final answer after ####."``; with an instruct
    model's chat template the result is then sent as the user message); a prompt of chat
    messages (TRL's conversational format) is sent as it is, ``template`` applied to its last
    user message. Held-out prompts come from ``eval_path`` (of a saved ``DatasetDict``, its
    ``test`` or ``validation`` split; ``path`` reads its ``train`` split), else ``num_eval``
    rows of ``path`` drawn with ``seed``. ``reward_name``: a registered
    reward or ``module:function`` (default ``math_verify``: 1 when math-verify finds the
    completion's final answer equal to the reference's, GSM8K's ``####`` read on both sides).
    ``max_answer_chars`` bounds the completion length (default ``max_new_tokens`` = it + 2).
    """
    spec = reward or get_reward(reward_name)
    rows = read_rows(path, format)
    eval_rows = (read_rows(eval_path, format, option="eval_path",
                           splits=("test", "validation")) if eval_path else None)
    train, held = split_rows(rows, path, eval_rows, eval_path, num_eval=num_eval, seed=seed,
                             prompt_field=prompt_field, answer_field=answer_field,
                             template=template)
    return Task(f"dataset/{Path(path).stem}", train, held, spec, None, max_answer_chars)
