"""Built-in tasks: ``strings`` (the embedded default), ``arithmetic``, ``permute`` (many
correct answers per prompt), ``reasoning_gym``, ``jsonl``, ``math``, ``similarity`` and
``validation`` (the validation split of another task)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from bestk._optional import require
from bestk._seeds import TASK_EVAL_PROMPTS
from bestk.tasks.base import (
    MESSAGES_FORMAT,
    Example,
    Message,
    Row,
    Task,
    load_task,
    read_messages,
    register_task,
)
from bestk.tasks.rewards import REWARDS, Reward, get_reward, register_reward

__all__ = [
    "arithmetic_task",
    "reasoning_gym_task",
    "jsonl_task",
    "rows_to_examples",
    "split_rows",
    "math_task",
    "similarity_task",
    "permute_task",
    "validation_task",
    "multiset_reward",
    "exact_multiset_reward",
]

_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply}
#: The arithmetic task's prompt formats (option ``format``).
_ARITHMETIC_FORMATS = {"equation": "{x}{op}{y}=", "question": "What is {x} {op} {y}?"}


def _arithmetic_template(format: str) -> str:
    """The prompt template of the arithmetic task's ``format`` option: a named format, or a
    template of the user's own with each of ``{x}``, ``{op}`` and ``{y}`` exactly once."""
    if not isinstance(format, str):
        raise ValueError(f"arithmetic option format must be text, got {format!r}")
    if format in _ARITHMETIC_FORMATS:
        return _ARITHMETIC_FORMATS[format]
    fields = ("{x}", "{op}", "{y}")
    if all(format.count(f) == 1 for f in fields):
        try:
            format.format(x=0, op="+", y=0)
        except (IndexError, KeyError, ValueError) as e:
            raise ValueError(f"arithmetic option format {format!r} is not a valid template: "
                             f"{e}") from None
        return format
    raise ValueError(f"arithmetic option format must be one of {sorted(_ARITHMETIC_FORMATS)} or "
                     f"a template with each of {{x}}, {{op}} and {{y}} once, got {format!r}")


@register_task("arithmetic")
def arithmetic_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    digits: int = 2,
    ops: str = "+",
    num_eval: int = 64,
    graded: bool = True,
    format: str = "equation",
    b_digits: int | None = None,
    split_seed: int | None = None,
) -> Task:
    """Integer arithmetic ``"a+b="`` -> ``"c"`` with operands of at most ``digits`` digits
    (the second one of at most ``b_digits``, when given: an easier task, e.g. 2-digit plus
    1-digit).

    ``format``: ``"equation"`` asks ``"35+77="`` (for models trained on the task's own
    characters); ``"question"`` asks ``"What is 35 + 77?"`` (for pretrained chat models, which
    read a bare equation as an unfinished sentence); any other text is a template of its own
    with each of ``{x}``, ``{op}`` and ``{y}`` once (``"Compute {x} {op} {y}. Reply with the
    number only."``).

    All ``len(ops) * 10^(2 digits)`` problems are enumerated once; ``num_eval`` of them
    (drawn with ``split_seed``, ``None``: the run's ``seed``) are held out, the rest are the
    training prompts. A fixed ``split_seed`` gives every seed of a grid the same held-out
    problems, and keeps them held out from a warm start trained with another seed. ``graded=True``
    scores with the graded closeness reward ``1/(1+|pred-target|)`` (so ArgMaxRL / best@k
    have something to work on); ``graded=False`` with exact match. Either way a completion
    succeeds iff it is exactly right.
    """
    if not 1 <= digits <= 3:
        raise ValueError(f"arithmetic option digits must be 1, 2 or 3, got {digits}")
    bad = sorted(set(ops) - set(_OPS)) if ops else ["(empty)"]
    if bad:
        raise ValueError(f"arithmetic option ops has unknown operator(s) {bad}; valid: + - *")
    template = _arithmetic_template(format)
    if b_digits is not None and not 1 <= b_digits <= digits:
        raise ValueError(f"arithmetic option b_digits must be in [1, digits={digits}], "
                         f"got {b_digits}")
    hi = 10**digits
    hi_b = hi if b_digits is None else 10**b_digits
    grid_a, grid_b = np.meshgrid(np.arange(hi), np.arange(hi_b), indexing="ij")
    a, b = grid_a.reshape(-1), grid_b.reshape(-1)
    problems = [(int(x), op, int(y)) for op in ops for x, y in zip(a, b, strict=True)]
    if not 1 <= num_eval < len(problems):
        raise ValueError(
            f"arithmetic option num_eval must be in [1, {len(problems) - 1}], got {num_eval}"
        )
    if split_seed is not None and (isinstance(split_seed, bool) or not isinstance(
            split_seed, int) or split_seed < 0):
        raise ValueError(f"arithmetic option split_seed must be a non-negative integer or "
                         f"null, got {split_seed!r}")
    rng = np.random.default_rng(seed if split_seed is None else split_seed)
    order = rng.permutation(len(problems))
    examples = []
    for i, (x, op, y) in enumerate(problems):
        value = int(_OPS[op](x, y))
        examples.append({"id": i, "prompt": template.format(x=x, op=op, y=y),
                         "answer": str(value)})
    held = [examples[i] for i in order[:num_eval]]
    train = [examples[i] for i in np.sort(order[num_eval:])]
    spec = reward or REWARDS["arithmetic" if graded else "exact"]
    width = len(str(max(abs(int(_OPS[op](hi - 1, hi_b - 1))) for op in ops))) + 1
    alphabet = "0123456789-+*=" if format == "equation" else "".join(
        sorted({c for e in examples for c in str(e["prompt"])} | set("0123456789-")))
    return Task("arithmetic", train, held, spec, alphabet, max_answer_chars=width)


_STRING_OPS = {
    "reverse": lambda s: s[::-1],
    "sort": lambda s: "".join(sorted(s)),
    "copy": lambda s: s,
}


def _distinct_strings(task: str, rng: np.random.Generator, symbols: str, min_len: int,
                      max_len: int, num_train: int, num_eval: int) -> tuple[list[str], np.ndarray]:
    """``num_train + num_eval`` distinct random strings over ``symbols`` with lengths drawn
    uniformly in ``[min_len, max_len]`` (in draw order), and the sorted alphabet."""
    if len(set(symbols)) < 2 or any(ch in ":=" for ch in symbols):
        raise ValueError(
            f"{task} option symbols needs >= 2 symbols other than ':' and '=', got {symbols!r}"
        )
    space = sum(len(set(symbols)) ** n for n in range(min_len, max_len + 1))
    want = num_train + num_eval
    for name, value in (("num_train", num_train), ("num_eval", num_eval)):
        if value < 1:
            raise ValueError(f"{task} option {name} must be an integer >= 1, got {value}")
    if want > space // 2:
        raise ValueError(
            f"{task}: num_train + num_eval = {want} is too many for {space} distinct strings"
        )
    alphabet = np.array(sorted(set(symbols)))
    seen: dict[str, None] = {}
    while len(seen) < want:
        n = int(rng.integers(min_len, max_len + 1))
        seen.setdefault("".join(rng.choice(alphabet, size=n)), None)
    return list(seen), alphabet


@register_task("strings")
def strings_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    op: str = "reverse",
    min_len: int = 3,
    max_len: int = 6,
    symbols: str = "0123456789",
    num_train: int = 50000,
    num_eval: int = 128,
    graded: bool = True,
) -> Task:
    """String transformation ``"op:s="`` -> ``op(s)`` (``reverse``, ``sort`` or ``copy``) of
    random strings over ``symbols`` with length in ``[min_len, max_len]``.

    ``num_train`` training strings and ``num_eval`` held-out strings are drawn with ``seed``
    without overlap. ``graded=True`` scores with the ``positional`` reward (share of correct
    positions); ``graded=False`` with exact match. Success = exactly right.
    """
    if op not in _STRING_OPS:
        raise ValueError(f"strings option op must be one of {', '.join(_STRING_OPS)}, got {op!r}")
    if not 1 <= min_len <= max_len <= 32:
        raise ValueError(f"strings needs 1 <= min_len <= max_len <= 32, got {min_len}, {max_len}")
    rng = np.random.default_rng(seed)
    strs, alphabet = _distinct_strings("strings", rng, symbols, min_len, max_len, num_train,
                                       num_eval)
    fn = _STRING_OPS[op]
    examples = [
        {"id": i, "prompt": f"{op[:3]}:{s}=", "answer": fn(s)} for i, s in enumerate(strs)
    ]
    spec = reward or REWARDS["positional" if graded else "exact"]
    chars = "".join(alphabet) + op[:3] + ":="
    return Task(
        f"strings/{op}", examples[:num_train], examples[num_train:], spec, chars,
        max_answer_chars=max_len,
    )


@register_task("reasoning_gym")
def reasoning_gym_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    dataset: str = "",
    config: dict | None = None,
    size: int = 1000,
    num_eval: int = 64,
    template: str = "{question}\nAnswer: ",
    max_answer_chars: int = 64,
) -> Task:
    """A reasoning-gym dataset (any of them) by name and config (``reasoning_gym.create_dataset``).

    Training prompts: ``size`` items generated with ``seed``; held-out prompts: ``num_eval``
    items generated with seed ``seed + 1_000_003`` (a different stream, so a different set).
    The reward is the dataset's own ``score_answer`` (raw score as the graded reward); a
    completion succeeds (pass@k) when the score is exactly 1.
    """
    if not dataset:
        raise ValueError("task reasoning_gym needs option dataset (a reasoning-gym dataset name)")
    reasoning_gym = require("reasoning_gym", extra="train")

    cfg = dict(config or {})
    try:
        train_ds = reasoning_gym.create_dataset(dataset, seed=seed, size=size, **cfg)
        eval_ds = reasoning_gym.create_dataset(
            dataset, seed=TASK_EVAL_PROMPTS.seed(seed), size=num_eval, **cfg
        )
    except (KeyError, ValueError, TypeError, AssertionError) as e:
        raise ValueError(f"reasoning_gym dataset {dataset!r} with config {cfg}: {e}") from None

    def convert(ds: Iterable[Mapping[str, object]], offset: int) -> list[Example]:
        out = []
        for i, entry in enumerate(ds):
            out.append({
                "id": offset + i,
                "prompt": template.format(question=entry["question"]),
                "answer": str(entry["answer"]),
                "entry": entry,
            })
        return out

    train = convert(train_ds, 0)
    held = convert(eval_ds, size)
    return Task(
        f"reasoning_gym/{dataset}",
        train,
        held,
        reward or REWARDS["reasoning_gym"],
        None,
        max_answer_chars=max_answer_chars,
    )


def _read_jsonl(path: str) -> list[Row]:
    """The rows of a JSON-lines file (blank lines skipped); ``ValueError`` naming the file when
    it is missing, holds no rows, or holds a line that is not UTF-8 text or not JSON."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"jsonl file {path!r} does not exist")
    rows = []
    with p.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path!r} is not UTF-8 text (line {n}: byte "
                                 f"{raw[e.start]:#04x}); convert it to UTF-8") from None
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not valid JSON ({e})") from None
    if not rows:
        raise ValueError(f"{path!r} holds no rows (a JSON object per line)")
    return rows


@register_task("jsonl")
def jsonl_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    path: str = "",
    eval_path: str = "",
    num_eval: int = 64,
    prompt_field: str = "prompt",
    answer_field: str = "answer",
    reward_name: str = "exact",
    template: str = "{prompt}",
    max_answer_chars: int = 128,
) -> Task:
    """Prompts and reference answers from a JSON-lines file (one object per line).

    Each row needs ``prompt_field`` and ``answer_field``; all its fields reach the reward
    function. Held-out prompts come from ``eval_path`` if given, else ``num_eval`` rows of
    ``path`` drawn with ``seed``. ``reward_name`` is a registered reward or
    ``module:function`` (the ``reward`` config key overrides it).
    """
    if not path:
        raise ValueError("task jsonl needs option path (a .jsonl file)")
    spec = reward or get_reward(reward_name)
    fields = {"prompt_field": prompt_field, "answer_field": answer_field, "template": template}
    train, held = split_rows(_read_jsonl(path), path,
                             _read_jsonl(eval_path) if eval_path else None, eval_path,
                             num_eval=num_eval, seed=seed, **fields)
    return Task(f"jsonl/{Path(path).stem}", train, held, spec, None, max_answer_chars)


def _read_column(value: object, where: str) -> list[Message] | None:
    """:func:`~bestk.tasks.base.read_messages` of a row's column, its error naming ``where``
    and the formats a column may hold."""
    try:
        messages = read_messages(value)
    except ValueError as e:
        raise ValueError(f"{where} holds {e}; it accepts text or {MESSAGES_FORMAT}") from None
    if messages is None and value is None:
        raise ValueError(f"{where} is empty (null); it accepts text or {MESSAGES_FORMAT}")
    return messages


def _templated(value: object, messages: list[Message] | None, template: str,
               row: Row) -> str | list[Message]:
    """``template`` formatted with ``{prompt}`` = the text ``value``, or for chat messages
    the messages with ``template`` applied to the content of the last user message."""
    if messages is None:
        return template.format(**{**row, "prompt": value})
    users = [j for j, m in enumerate(messages) if m["role"] == "user"]
    if users and template != "{prompt}":
        last = messages[users[-1]]
        last["content"] = template.format(**{**row, "prompt": last["content"]})
    return messages


def _answer_of(value: object, where: str) -> str:
    """The reference answer of a row: text as it is, or the content of the last assistant
    message of a list of chat messages (TRL's conversational ``completion``)."""
    messages = _read_column(value, where)
    if messages is None:
        return str(value)
    replies = [str(m["content"]) for m in messages if m["role"] == "assistant"]  # text
    if not replies:
        raise ValueError(f"{where} holds chat messages without an assistant message (the "
                         f"reference answer)")
    return replies[-1]


def rows_to_examples(rows: Sequence[Row], src: str, offset: int, *, prompt_field: str,
                     answer_field: str, template: str) -> list[Example]:
    """Task examples of data rows: every field of the row, plus ``prompt`` =
    ``template.format(prompt=row[prompt_field], **row)``, ``answer`` = ``str(row[answer_field])``
    and ``id`` = ``offset + row index``.

    A prompt column may hold chat messages (TRL's conversational format,
    :func:`~bestk.tasks.base.read_messages`): ``prompt`` is then the list of messages, with
    ``template`` applied to the content of the last user message (the chat template renders
    it later: :func:`bestk.train.model.chat.render_task_prompts`); an answer column of messages
    gives the content of its last assistant message. A row without either field, or a column that
    is neither text nor messages, raises ``ValueError`` naming ``src``, the row and the
    column."""
    out = []
    for i, row in enumerate(rows):
        for f in (prompt_field, answer_field):
            if f not in row:
                raise ValueError(f"{src}: row {i + 1} has no field {f!r} (it has "
                                 f"{', '.join(map(repr, row))})")
        ex = dict(row)
        value = row[prompt_field]
        messages = _read_column(value, f"{src}: row {i + 1}: column {prompt_field!r}")
        try:
            ex["prompt"] = _templated(value, messages, template, row)
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"task option template {template!r} does not fit {src} row "
                             f"{i + 1}: {type(e).__name__} {e}") from None
        ex["answer"] = _answer_of(row[answer_field], f"{src}: row {i + 1}: column "
                                                     f"{answer_field!r}")
        ex["id"] = offset + i
        out.append(ex)
    return out


def split_rows(rows: Sequence[Row], src: str, eval_rows: Sequence[Row] | None,
               eval_src: str, *, num_eval: int, seed: int, **fields: str
               ) -> tuple[list[Example], list[Example]]:
    """``(train, held-out)`` examples (:func:`rows_to_examples`): ``eval_rows`` are the held-out
    ones when given (ids after the training rows'), else ``num_eval`` rows of ``rows`` drawn
    with ``seed`` (the rest train, in file order)."""
    if eval_rows is not None:
        return (rows_to_examples(rows, src, 0, **fields),
                rows_to_examples(eval_rows, eval_src, len(rows), **fields))
    examples = rows_to_examples(rows, src, 0, **fields)
    if not 1 <= num_eval < len(rows):
        raise ValueError(f"num_eval must be in [1, {len(rows) - 1}] for {src}, got {num_eval}")
    order = np.random.default_rng(seed).permutation(len(rows))
    return ([examples[i] for i in np.sort(order[num_eval:])],
            [examples[i] for i in order[:num_eval]])


@register_task("math")
def math_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    path: str = "",
    eval_path: str = "",
    num_eval: int = 64,
    prompt_field: str = "question",
    answer_field: str = "answer",
    template: str = "{prompt}\nPut the final answer in \\boxed{{}}.\n",
    max_answer_chars: int = 512,
) -> Task:
    """Math word problems from a JSON-lines file, checked with math-verify (binary reward)."""
    return jsonl_task(
        seed=seed, reward=reward or REWARDS["math_verify"], path=path, eval_path=eval_path,
        num_eval=num_eval, prompt_field=prompt_field, answer_field=answer_field,
        template=template, max_answer_chars=max_answer_chars,
    )


@register_task("similarity")
def similarity_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    path: str = "",
    eval_path: str = "",
    num_eval: int = 64,
    prompt_field: str = "prompt",
    answer_field: str = "answer",
    template: str = "{prompt}",
    max_answer_chars: int = 512,
) -> Task:
    """Open-ended prompts from a JSON-lines file scored by SoftmaxGRPO's ``r_sim`` against the
    reference (graded; success = a perfect match, ``r_sim == 1``)."""
    return jsonl_task(
        seed=seed, reward=reward or REWARDS["similarity"], path=path, eval_path=eval_path,
        num_eval=num_eval, prompt_field=prompt_field, answer_field=answer_field,
        template=template, max_answer_chars=max_answer_chars,
    )


@register_reward("multiset", graded=True)
def multiset_reward(prompt: str, completion: str, *, letters: str = "", **_: object) -> float:
    """Graded anagram reward: the share of symbols that the stripped completion and the target
    multiset ``letters`` have in common, over the longer of the two lengths,
    ``|ms(completion) & ms(letters)| / max(|completion|, |letters|)``; 1 exactly when the
    completion is a rearrangement of ``letters``, 0 for an empty completion."""
    text = completion.strip()
    if not text or not letters:
        return 0.0
    common = sum((Counter(text) & Counter(letters)).values())
    return common / max(len(text), len(letters))


@register_reward("exact_multiset", graded=False)
def exact_multiset_reward(prompt: str, completion: str, *, letters: str = "",
                          **_: object) -> float:
    """1 when the stripped completion is a rearrangement of ``letters``, else 0."""
    return float(bool(letters) and sorted(completion.strip()) == sorted(letters))


@register_task("permute")
def permute_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    min_len: int = 3,
    max_len: int = 6,
    symbols: str = "0123456789",
    num_train: int = 4096,
    num_eval: int = 128,
    graded: bool = True,
) -> Task:
    """Anagrams: ``"per:s="`` -> any rearrangement of the string ``s`` (``s`` drawn like the
    ``strings`` task: random symbols, length in ``[min_len, max_len]``, distinct strings).

    Unlike ``strings`` (one correct answer per prompt), a prompt of ``L`` distinct symbols has
    ``L!`` correct answers (720 at ``L = 6``), so distinct correct completions and pass@k at
    large k measure how much of the answer space a policy keeps. The reference answer of each
    example (used by the SFT warm-up) is one rearrangement drawn uniformly with ``seed``, so an
    SFT policy spreads over the orders. ``graded=True`` scores with the ``multiset`` reward
    (share of symbols in common); ``graded=False`` with 0/1. Success = a rearrangement of ``s``.
    """
    if not 1 <= min_len <= max_len <= 16:
        raise ValueError(f"permute needs 1 <= min_len <= max_len <= 16, got {min_len}, {max_len}")
    rng = np.random.default_rng(seed)
    strs, alphabet = _distinct_strings("permute", rng, symbols, min_len, max_len, num_train,
                                       num_eval)
    examples = []
    for i, s in enumerate(strs):
        order = rng.permutation(len(s))
        examples.append({"id": i, "prompt": f"per:{s}=", "letters": s,
                         "answer": "".join(s[j] for j in order)})
    spec = reward or REWARDS["multiset" if graded else "exact_multiset"]
    chars = "".join(alphabet) + "per:="
    return Task("permute", examples[:num_train], examples[num_train:], spec, chars,
                max_answer_chars=max_len)


@register_task("validation")
def validation_task(
    *,
    seed: int = 0,
    reward: Reward | None = None,
    task: str = "",
    options: dict | None = None,
    size: int = 256,
) -> Task:
    """The validation split of another task, for tuning without touching its test prompts.

    Builds task ``task`` with ``options`` (and the same ``seed`` and ``reward``) and returns a
    task whose held-out prompts are the *last* ``size`` training prompts of ``task`` and whose
    training prompts are the rest; the test prompts of ``task`` are not used at all. A
    learning rate chosen on ``validation`` therefore never sees the prompts the final runs are
    scored on.
    """
    if not task or task == "validation":
        raise ValueError("task validation needs option task (the name of another task)")
    inner = load_task(task, options or {}, seed=seed)
    if reward is not None:
        inner.reward = reward
    if not 1 <= size < len(inner.train):
        raise ValueError(
            f"validation option size must be in [1, {len(inner.train) - 1}] for task {task!r} "
            f"({len(inner.train)} training prompts), got {size}"
        )
    return Task(f"validation/{inner.name}", inner.train[:-size], inner.train[-size:],
                inner.reward, inner.alphabet, inner.max_answer_chars, inner.success_threshold)
