r"""What an estimator is an unbiased gradient of, as data (the registry's ``objective``).

Every objective bestk's estimators claim is a combination of best@k values of the policy's
reward distribution, ``best@k = E[max of k iid rewards]`` (pass@k on 0/1 rewards), with
coefficients that may depend on the group size ``N``:

==================  ==========================================  ===============================
:class:`Objective`  value                                       estimators
==================  ==========================================  ===============================
``best_at(1)``      ``best@1 = E[r]``                           ``rloo``, ``reinforce``
``best_at(1,        ``(N-1)/N best@1`` (a group mean that        ``grpo`` with ``scale="none"``
centred=True)``     includes the sample itself)                 (Dr.GRPO)
``best_at("k")``    ``best@k``, ``k`` read from the option      ``pkpo``
                    named ``"k"``
``joint()``         ``J_N = sum_{k=1}^{N} best@k / k``          ``argmaxrl`` / ``maxrl`` (loo,
                                                                none)
``joint(lag=1)``    ``J_{N-1}``                                 ``argmaxrl`` / ``maxrl`` (mean)
``best_at_n()``     ``best@N / N`` (``k`` = the group size)     ``loo_max`` with
                                                                ``scale="none"``
==================  ==========================================  ===============================

"Unbiased gradient of J" means: with the GRPO scaling of :mod:`bestk.estimators`, the
expectation of ``(1/N) sum_i A_i grad log pi(y_i | x)`` over groups of ``N`` samples equals
``grad J``. :class:`ByOption` makes the objective depend on one option's value (``argmaxrl``'s
``baseline``, ``grpo``'s ``scale``); ``None`` means the estimator is not an unbiased gradient
of any fixed objective. ``tests/estimators/test_unbiased.py`` checks every claim by exact
enumeration on small bandits, reading the claims from the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, SupportsInt, TypeVar, cast

__all__ = ["Objective", "ByOption", "best_at", "best_at_n", "joint"]

#: The objective kinds: ``scale * best@k``, ``J_{N-lag}``, ``best@N / N``.
KINDS = ("best@k", "J", "best@N")


class _Scalable(Protocol):
    """A value a float coefficient multiplies (a float, a numpy array, a tensor)."""

    def __rmul__(self, other: float, /) -> Any: ...


T = TypeVar("T", bound=_Scalable)


@dataclass(frozen=True)
class Objective:
    """``scale(N) * best@k`` (``kind="best@k"``), ``J_{N-lag}`` (``kind="J"``) or ``best@N / N``
    (``kind="best@N"``: ``k`` is the group size ``N`` itself).

    Attributes
    ----------
    kind: one of :data:`KINDS`.
    k: for ``best@k``: an int, or the name of the estimator option that holds it (``"k"``);
        :meth:`bind` replaces an option name by the option's value.
    lag: for ``J``: the objective is ``J_{N - lag} = sum_{k=1}^{N-lag} best@k / k``.
    centred: for ``best@k``: times ``(N-1)/N``.
    """

    kind: str
    k: int | str = 1
    lag: int = 0
    centred: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"objective kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if isinstance(self.k, int) and (isinstance(self.k, bool) or self.k < 1):
            raise ValueError(
                f"objective k must be an integer >= 1 or an option name, got {self.k!r}"
            )
        if not isinstance(self.lag, int) or self.lag < 0:
            raise ValueError(f"objective lag must be an integer >= 0, got {self.lag!r}")

    def bind(self, options: Mapping[str, object]) -> Objective:
        """This objective with an option-named ``k`` replaced by ``options[k]``."""
        if isinstance(self.k, str):
            k = cast(SupportsInt, options[self.k])  # an estimator's integer option (int() checks)
            return Objective(self.kind, int(k), self.lag, self.centred)
        return self

    @property
    def name(self) -> str:
        """``"best@1"``, ``"best@4"``, ``"best@k"``, ``"(N-1)/N best@1"``, ``"J_N"``,
        ``"J_{N-1}"``, ``"best@N / N"``."""
        if self.kind == "best@N":
            return "best@N / N"
        if self.kind == "J":
            return "J_N" if self.lag == 0 else f"J_{{N-{self.lag}}}"
        return ("(N-1)/N " if self.centred else "") + f"best@{self.k}"

    def __str__(self) -> str:
        return self.name

    def terms(self, n: int) -> list[tuple[int, float]]:
        """``[(k, c_k), ...]``: the objective is ``sum_k c_k best@k`` at group size ``n``."""
        if isinstance(self.k, str):
            raise ValueError(f"objective {self.name} names option {self.k!r}: bind it first")
        if self.kind == "J":
            return [(j, 1.0 / j) for j in range(1, n - self.lag + 1)]
        if self.kind == "best@N":
            return [(n, 1.0 / n)]
        return [(self.k, (n - 1) / n if self.centred else 1.0)]

    def value(self, best_at_k: Callable[[int], T], n: int) -> T:
        """``sum_k c_k best_at_k(k)``: the objective's value from a best@k function (a closed
        form, an estimate, a differentiable tensor)."""
        total: Any = 0.0
        for k, c in self.terms(n):
            total = total + c * best_at_k(k)
        return total

    def binary_weight(self, p: float, n: int) -> float:
        """The prompt weight ``omega(p)`` on 0/1 rewards: ``grad J = omega(p) grad p`` for a
        prompt with pass rate ``p`` (``grad pass@k = k (1-p)^(k-1) grad p``). ``J_N`` gives
        MaxRL's ``(1 - (1-p)^N) / p`` (SoftmaxGRPO Table 1)."""
        return float(sum(c * k * (1.0 - p) ** (k - 1) for k, c in self.terms(n)))


@dataclass(frozen=True)
class ByOption:
    """An objective chosen by the value of one option: ``cases[options[option]]``.

    ``ByOption("baseline", {"loo": joint(), "none": joint(), "mean": joint(lag=1)})``.
    """

    option: str
    cases: Mapping[Any, Objective | None]

    def resolve(self, options: Mapping[str, object]) -> Objective | None:
        value = options[self.option]
        if value not in self.cases:
            raise ValueError(
                f"no objective is declared for {self.option}={value!r}; declared: "
                f"{', '.join(map(repr, self.cases))}"
            )
        return self.cases[value]

    def describe(self) -> str:
        """``"J_N (baseline=loo, none); J_{N-1} (baseline=mean)"``."""
        by: dict[str, list[str]] = {}
        for value, obj in self.cases.items():
            by.setdefault("none" if obj is None else obj.name, []).append(str(value))
        return "; ".join(f"{obj} ({self.option}={', '.join(vals)})" for obj, vals in by.items())


def best_at(k: int | str, *, centred: bool = False) -> Objective:
    """``best@k`` (``k`` an int or the option that holds it); ``(N-1)/N best@k`` if
    ``centred``."""
    return Objective("best@k", k=k, centred=centred)


def best_at_n() -> Objective:
    """``best@N / N``: the best of the whole group of ``N`` samples, divided by ``N`` (the
    ``(1/N) sum_i A_i grad log pi`` scaling of a per-group estimate of ``grad best@N``)."""
    return Objective("best@N")


def joint(lag: int = 0) -> Objective:
    """``J_{N-lag} = sum_{k=1}^{N-lag} best@k / k`` (ArgMaxRL's ``J_N`` at ``lag=0``)."""
    return Objective("J", lag=lag)
