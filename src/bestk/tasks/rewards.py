"""Reward functions ``(prompt, completion, **example) -> float`` and their registry.

``example`` holds the task's fields for that prompt (``answer``, ``id``, task metadata); a reward
function takes what it needs by keyword and ignores the rest (``**_``). Rewards are floats;
a completion *succeeds* (counts for pass@k) when its reward is ``>= success_threshold`` of the
task (1.0 for every built-in reward, i.e. ``score == 1.0``).

Built in:

* ``exact`` — 1 if the stripped completion equals the stripped answer, else 0.
* ``arithmetic`` — graded closeness of an integer answer: ``1 / (1 + |pred - target|)``
  (1 when exact, 1/2 when off by one, ...; 0 when no integer can be read).
* ``positional`` — graded string match: share of positions where completion and answer agree
  (over the longer length); 1 only for an exact match.
* ``math_verify`` — 1 if math-verify finds the completion's answer equal to the reference
  (GSM8K's ``#### answer`` convention is read on both sides: :func:`final_answer`).
* ``similarity`` — SoftmaxGRPO's weak reward ``r_sim = 0.6 F1_SQuAD + 0.4 ROUGE-L``
  (SoftmaxGRPO, Appendix B.5; docs/references.md) against the reference answer.
* ``reasoning_gym`` — the reasoning-gym dataset's own ``score_answer`` of the entry (raw score
  in [0, 1]; success is ``score == 1.0``).
"""

from __future__ import annotations

import importlib
import re
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from bestk._optional import require

__all__ = [
    "REWARDS",
    "RewardSpec",
    "register_reward",
    "get_reward",
    "exact_reward",
    "arithmetic_reward",
    "positional_reward",
    "math_verify_reward",
    "final_answer",
    "similarity_reward",
    "squad_f1",
    "reasoning_gym_reward",
]

RewardFn = Callable[..., float]


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: the function, whether its values are graded (not only 0/1), and
    the optional modules it imports (checked when a task using it loads)."""

    fn: RewardFn
    graded: bool
    requires: tuple[str, ...] = ()


#: name -> :class:`RewardSpec`. Add with :func:`register_reward`.
REWARDS: dict[str, RewardSpec] = {}


def register_reward(
    name: str, *, graded: bool, requires: tuple[str, ...] = ()
) -> Callable[[RewardFn], RewardFn]:
    """Decorator registering ``fn(prompt, completion, **example) -> float`` under ``name``;
    ``requires`` names the optional modules it imports (e.g. ``("math_verify",)``)."""

    def deco(fn: RewardFn) -> RewardFn:
        REWARDS[name] = RewardSpec(fn, graded, tuple(requires))
        return fn

    return deco


def get_reward(name: str) -> RewardSpec:
    """A registered reward by name, or ``"module:function"`` (an importable callable, graded).

    Raises ``ValueError`` naming the valid choices when it cannot be found.
    """
    if name in REWARDS:
        return REWARDS[name]
    if ":" in name:
        mod_name, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load reward function {name!r}: {e}") from None
        if not callable(fn):
            raise ValueError(f"reward {name!r} is not callable")
        return RewardSpec(fn, True)
    raise ValueError(
        f"unknown reward {name!r}; valid: {', '.join(sorted(REWARDS))} or 'module:function'"
    )


@register_reward("exact", graded=False)
def exact_reward(prompt: str, completion: str, *, answer: Any, **_: Any) -> float:
    """1.0 if ``completion.strip() == str(answer).strip()``, else 0.0."""
    return float(completion.strip() == str(answer).strip())


_INT = re.compile(r"^\s*([+-]?\d+)")


@register_reward("arithmetic", graded=True)
def arithmetic_reward(prompt: str, completion: str, *, answer: Any, **_: Any) -> float:
    """Graded closeness ``1 / (1 + |pred - target|)`` of the integer the completion starts with.

    1.0 exactly when the answer is right (so success = ``reward == 1``); 0.0 when the
    completion does not start with an integer.
    """
    m = _INT.match(completion)
    if m is None:
        return 0.0
    try:
        diff = abs(int(m.group(1)) - int(answer))
    except (TypeError, ValueError):
        return 0.0
    return 1.0 / (1.0 + diff)


@register_reward("positional", graded=True)
def positional_reward(prompt: str, completion: str, *, answer: Any, **_: Any) -> float:
    """Graded string match: characters equal at the same position, divided by the longer
    length (``sum_i [c_i == a_i] / max(|c|, |a|)``); 1.0 exactly when ``c == a``.

    Both strings are stripped; two empty strings score 1.
    """
    c, a = completion.strip(), str(answer).strip()
    if not c and not a:
        return 1.0
    same = sum(x == y for x, y in zip(c, a, strict=False))
    return same / max(len(c), len(a))


_GSM8K_MARK = "####"
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def final_answer(text: str) -> str:
    """The final answer of a GSM8K-style text: what follows the last ``####`` on its line,
    stripped, without thousands separators (``1,234`` -> ``1234``); the whole text when there
    is no ``####`` (math-verify then finds a ``\\boxed{}`` or the last expression itself).

    ``"48/2 = 24 clips in May.\\n#### 72"`` -> ``"72"``.
    """
    if _GSM8K_MARK not in text:
        return text
    tail = text.rsplit(_GSM8K_MARK, 1)[1].strip()
    line = tail.splitlines()[0].strip() if tail else ""
    return _THOUSANDS.sub("", line)


@lru_cache(maxsize=4096)
def _parse_gold(answer: str) -> Any:
    parse = require("math_verify", extra="train").parse

    text = answer if ("$" in answer or "\\boxed" in answer) else f"${answer}$"
    return parse(text)


@register_reward("math_verify", graded=False, requires=("math_verify",))
def math_verify_reward(prompt: str, completion: str, *, answer: Any, **_: Any) -> float:
    """1.0 if math-verify judges the completion's final answer equal to ``answer``, else 0.0.

    Both sides first go through :func:`final_answer` (GSM8K's ``#### 72``: the reference may
    be a whole worked solution). The reference is then parsed as LaTeX (wrapped in ``$...$``
    when it has no delimiters); the completion as free text (``\\boxed{}``, ``$...$``, plain
    numbers).
    """
    mv = require("math_verify", extra="train")
    parse, verify = mv.parse, mv.verify

    gold = _parse_gold(final_answer(str(answer)))
    try:
        pred = parse(final_answer(completion))
        return float(bool(verify(gold, pred)))
    except Exception:  # math-verify raises on malformed LaTeX; an unparseable answer is wrong
        return 0.0


def _normalize_squad(text: str) -> str:
    """SQuAD v1.1 answer normalisation: lower, drop punctuation and articles, fix spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_f1(prediction: str, reference: str) -> float:
    """Token-level F1 of the SQuAD v1.1 evaluation script (normalised bag-of-words overlap).

    Two empty (after normalisation) strings score 1; one empty string scores 0.
    """
    p = _normalize_squad(prediction).split()
    r = _normalize_squad(reference).split()
    if not p or not r:
        return float(p == r)
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


@lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    rouge_scorer = require("rouge_score.rouge_scorer", extra="train")

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


@register_reward("similarity", graded=True, requires=("rouge_score",))
def similarity_reward(prompt: str, completion: str, *, answer: Any, **_: Any) -> float:
    """SoftmaxGRPO's ``r_sim = 0.6 F1_SQuAD + 0.4 ROUGE-L`` (F-measure) against ``answer``."""
    ref = str(answer)
    rouge = _rouge_scorer().score(ref, completion)["rougeL"].fmeasure
    return 0.6 * squad_f1(completion, ref) + 0.4 * float(rouge)


@register_reward("reasoning_gym", graded=True, requires=("reasoning_gym",))
def reasoning_gym_reward(prompt: str, completion: str, *, entry: dict, **_: Any) -> float:
    """The reasoning-gym score of ``completion`` for ``entry`` (its dataset's ``score_answer``).

    ``entry`` is the dataset item (``question``, ``answer``, ``metadata`` with
    ``source_dataset``). Scores lie in [0, 1]; 1.0 means correct.
    """
    reasoning_gym = require("reasoning_gym", extra="train")

    score_fn = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])
    score = score_fn(completion.strip(), entry)
    return float(score) if score is not None else 0.0
