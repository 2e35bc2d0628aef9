"""bestk.tasks.rewards: several reward functions with weights (TRL's ``reward_funcs`` /
``reward_weights``, ``None`` skipped), per-function columns, and naming a reward as a registered
name, ``module:function`` (also from the working directory, under every entry point) or
``path/to/file.py:function``."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bestk.tasks import REWARDS, RewardSpec, WeightedRewards, get_reward, get_rewards, load_task
from bestk.tasks.rewards import reward_parts
from tests.conftest import RAISING, ROOT

#: Two reward functions in one file, as a user writes them: ``fmt`` scores every completion,
#: ``digits_only`` returns None ("does not apply") for prompts whose answer is not a number.
REWARD_FILE = '''
def fmt(prompt, completion, **_):
    """1 when the completion is one stripped line."""
    return float(completion == completion.strip() and "\\n" not in completion)


def digits_only(prompt, completion, *, answer, **_):
    if not str(answer).isdigit():
        return None
    return float(completion.strip() == str(answer))


def always_none(prompt, completion, **_):
    return None


def text(prompt, completion, **_):
    return "high"


NOT_CALLABLE = 3
'''


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "lib" / "myrewards.py"
    path.parent.mkdir()
    path.write_text(REWARD_FILE)
    return path


def _examples():
    return [{"prompt": "p0", "answer": "12", "id": 0}, {"prompt": "p1", "answer": "x", "id": 1},
            {"prompt": "p2", "answer": "7", "id": 2}]


def _task(reward, weights=None):
    task = load_task("arithmetic", {"digits": 1, "num_eval": 5}, reward=reward,
                     reward_weights=weights)
    return task


def test_one_reward_is_the_plain_function_as_before():
    assert get_rewards("exact") is REWARDS["exact"]
    assert get_rewards(["exact"]) is REWARDS["exact"]  # a list of one without weights: the same
    assert REWARDS["positional"].name == "positional"
    task = _task("positional")
    assert task.reward is REWARDS["positional"] and task.reward_names == ("positional",)
    scores = task.score_detailed(task.eval[:2], ["1", "99"])
    assert list(scores.columns) == ["positional"]
    assert scores.total is scores.columns["positional"]
    assert scores.total.dtype == np.float64
    np.testing.assert_array_equal(task.score(task.eval[:2], ["1", "99"]), scores.total)


def test_two_reward_functions_from_a_file_path_with_weights(reward_file):
    specs = [f"{reward_file}:fmt", f"{reward_file}:digits_only"]
    task = _task(specs, [0.5, 2.0])
    assert isinstance(task.reward, WeightedRewards) and task.graded
    assert task.reward_names == ("fmt", "digits_only")
    comps = ["12", " x\n", "8"]
    scores = task.score_detailed(_examples(), comps)
    np.testing.assert_array_equal(scores.columns["fmt"], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(scores.columns["digits_only"], [1.0, np.nan, 0.0])
    # None is skipped: row 1 is fmt's alone
    np.testing.assert_array_equal(scores.total, [0.5 * 1 + 2.0 * 1, 0.5 * 0, 0.5 * 1 + 2.0 * 0])
    assert scores.means() == {"fmt": pytest.approx(2 / 3), "digits_only": pytest.approx(0.5)}
    np.testing.assert_array_equal(task.score(_examples(), comps), scores.total)


def test_the_weighted_sum_is_trl_grpo_trainers(reward_file):
    """TRL's ``GRPOTrainer._generate_and_score_completions``: None -> NaN in
    ``rewards_per_func`` (float32), then ``(rewards_per_func * reward_weights).nansum(dim=1)``,
    and per-function ``nanmean`` for ``rewards/<name>/mean``."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    fns = [lambda p, c, *, v, **_: v[0], lambda p, c, *, v, **_: v[1],
           lambda p, c, *, v, **_: v[2]]
    for j, fn in enumerate(fns):
        fn.__name__ = f"f{j}"
    weights = [0.3, -1.5, 2.0]
    task = _task("exact")
    task.reward = WeightedRewards(tuple(RewardSpec(fn, True, (), fn.__name__) for fn in fns),
                                  tuple(weights))
    rows = []
    for _ in range(50):
        v = [None if rng.random() < 0.3 else float(rng.normal()) for _ in fns]
        if all(x is None for x in v):
            v[0] = 0.25
        rows.append({"prompt": "q", "id": 0, "v": v})
    got = task.score_detailed(rows, [""] * len(rows))
    per_func = torch.tensor([[torch.nan if x is None else x for x in r["v"]] for r in rows],
                            dtype=torch.float32)
    trl_total = (per_func * torch.tensor(weights).unsqueeze(0)).nansum(dim=1)
    np.testing.assert_allclose(got.total, trl_total.double().numpy(), rtol=1e-6, atol=1e-6)
    for j, name in enumerate(task.reward_names):
        assert got.means()[name] == pytest.approx(torch.nanmean(per_func[:, j]).item(), abs=1e-6)


def test_score_errors_name_the_function_and_the_prompt(reward_file):
    task = _task([f"{reward_file}:fmt", f"{reward_file}:always_none"])
    assert task.score([_examples()[0]], ["a"]).tolist() == [1.0]  # fmt scored it
    assert "always_none" not in task.score_detailed([_examples()[0]], ["a"]).means()
    task = _task([f"{reward_file}:always_none", f"{reward_file}:digits_only"])
    with pytest.raises(ValueError, match="every reward function of task 'arithmetic' "
                       "\\(always_none, digits_only\\) returned None for prompt 'p1'"):
        task.score(_examples(), ["1", "2", "3"])
    task = _task([f"{reward_file}:fmt", f"{reward_file}:text"])
    with pytest.raises(ValueError, match="reward function 'text' of task 'arithmetic' returned "
                       "'high' for prompt 'p0'"):
        task.score(_examples(), ["1", "2", "3"])
    task = _task(f"{reward_file}:digits_only")  # one plain function: None is not a reward
    with pytest.raises(ValueError, match="reward function 'digits_only' of task 'arithmetic' "
                       "returned None for prompt 'p1': None is not a number"):
        task.score(_examples(), ["1", "2", "3"])


def test_weights_and_lists_are_checked(reward_file):
    with pytest.raises(ValueError, match="2 weight\\(s\\) for 3 reward function\\(s\\)"):
        get_rewards(["exact", "positional", "arithmetic"], [1, 2])
    with pytest.raises(ValueError, match="finite numbers, got inf"):
        get_rewards(["exact", "positional"], [1, math.inf])
    with pytest.raises(ValueError, match="finite numbers, got True"):
        get_rewards(["exact", "positional"], [1, True])
    with pytest.raises(ValueError, match="finite numbers, got 'a'"):
        get_rewards(["exact", "positional"], [1, "a"])
    with pytest.raises(ValueError, match="two functions named 'exact'"):
        get_rewards(["exact", "exact"])
    with pytest.raises(ValueError, match="empty list"):
        get_rewards([])
    with pytest.raises(ValueError, match="reward_weights needs task.reward"):
        load_task("arithmetic", {"digits": 1, "num_eval": 5}, reward_weights=[1.0])
    assert get_rewards(["exact", "positional"]).weights == (1.0, 1.0)  # TRL's default: all 1
    # graded: only one binary function with weight 1 keeps rewards 0/1
    assert not get_rewards(["exact"], [1.0]).graded
    assert get_rewards(["exact"], [2.0]).graded
    assert get_rewards(["exact", "exact_multiset"]).graded
    assert get_rewards(["math_verify", "similarity"]).requires == ("math_verify", "rouge_score")
    specs, weights = reward_parts(get_rewards(["exact", "positional"], [2, 3]))
    assert [s.name for s in specs] == ["exact", "positional"] and weights == (2.0, 3.0)
    assert reward_parts(REWARDS["exact"]) == ((REWARDS["exact"],), None)
    unnamed = RewardSpec(lambda p, c, **_: 1.0, True)
    with pytest.raises(ValueError, match="distinct, non-empty function names"):
        WeightedRewards((unnamed, unnamed), (1.0, 1.0))
    with pytest.raises(ValueError, match=r"one weight per function, got 1 function\(s\) and 2"):
        WeightedRewards((REWARDS["exact"],), (1.0, 2.0))


def test_reward_file_paths(reward_file, tmp_path, monkeypatch):
    spec = get_reward(f"{reward_file}:fmt")  # absolute
    assert spec.graded and spec.name == "fmt" and spec.fn("p", "ok") == 1.0
    monkeypatch.chdir(tmp_path)
    again = get_reward("lib/myrewards.py:fmt")  # relative to the working directory
    assert again.fn is spec.fn  # the file is executed once per process
    with pytest.raises(ValueError, match="'nope/r.py' is not a file; a reward is a registered "
                       "reward \\(.*exact.*\\), 'module:function' .* or 'path/to/file.py:"
                       "function'"):
        get_reward("nope/r.py:fmt")
    with pytest.raises(ValueError, match="'lib/myrewards.py' has no 'missing'"):
        get_reward("lib/myrewards.py:missing")
    with pytest.raises(ValueError, match="is not callable"):
        get_reward("lib/myrewards.py:NOT_CALLABLE")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom\\nsecond line')\n")
    with pytest.raises(ValueError, match="cannot load reward function 'broken.py:f': "
                       "RuntimeError: boom$"):
        get_reward("broken.py:f")


def test_module_function_from_the_working_directory(tmp_path, monkeypatch):
    """The ``bestk`` console script does not search the working directory (``python -m``
    does): ``module:function`` finds ``module.py`` there anyway."""
    (tmp_path / "cwd_reward_mod.py").write_text(
        "import cwd_reward_helper\n"
        "def length(prompt, completion, **_):\n"
        "    return cwd_reward_helper.size(completion)\n")
    (tmp_path / "cwd_reward_helper.py").write_text("def size(s):\n    return float(len(s))\n")
    monkeypatch.chdir(tmp_path)
    kept = [p for p in sys.path if p not in ("", ".", str(tmp_path))]
    monkeypatch.setattr(sys, "path", kept)
    for mod in ("cwd_reward_mod", "cwd_reward_helper"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    spec = get_reward("cwd_reward_mod:length")
    assert spec.name == "length" and spec.fn("p", "abc") == 3.0
    assert sys.path[-1] == str(tmp_path)  # kept: the module's own imports of neighbours work
    with pytest.raises(ValueError, match="no module named 'nope_mod_xyz' \\(nor nope_mod_xyz.py "
                       "in .*\\); a reward is a registered reward"):
        get_reward("nope_mod_xyz:f")
    (tmp_path / "needs_dep_mod.py").write_text("import not_installed_pkg_xyz\n")
    with pytest.raises(ValueError, match="ModuleNotFoundError: No module named "
                       "'not_installed_pkg_xyz'"):
        get_reward("needs_dep_mod:f")  # the module exists: its missing import is the problem


def test_module_function_under_a_console_script_like_entry_point(tmp_path):
    """``python -P`` leaves the working directory off ``sys.path``, as the ``bestk`` console
    script does; the reward still loads, and so does a file path, in a fresh process."""
    (tmp_path / "myreward.py").write_text(
        "def fn(prompt, completion, **_):\n    return float(completion == 'yes')\n")
    code = textwrap.dedent("""
        import sys
        assert '' not in sys.path and '.' not in sys.path
        from bestk.tasks import load_task
        t = load_task('arithmetic', {'digits': 1, 'num_eval': 5},
                      reward=['myreward:fn', 'myreward.py:fn'], reward_weights=[1, 2])
        print(t.reward_names, t.score(t.eval[:2], ['yes', 'no']).tolist())
    """)
    proc = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode != 0 and "two functions named 'fn'" in proc.stderr  # same __name__
    code = code.replace("'myreward.py:fn'], reward_weights=[1, 2]", "'exact'], "
                        "reward_weights=[1, 2]")
    proc = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "('fn', 'exact') [1.0, 0.0]"


def test_unknown_reward_lists_the_forms():
    with pytest.raises(ValueError, match="unknown reward 'nope'; valid: a registered reward "
                       "\\(.*exact.*\\), 'module:function' \\(an importable module, or "
                       "module.py in the working directory\\) or 'path/to/file.py:function'"):
        get_reward("nope")
    with pytest.raises(ValueError, match="a reward is"):
        get_reward("")
    with pytest.raises(ValueError, match="a reward is"):
        get_reward("mod:")


def test_the_documented_reward_file(tmp_path):
    """docs/training.md's ``rewards.py`` and its command's reward list work as written."""

    doc = (ROOT / "docs" / "training.md").read_text()
    code = doc.split("# rewards.py, next to where you run bestk\n", 1)[1].split("```", 1)[0]
    (tmp_path / "rewards.py").write_text(code)
    assert "--set 'task.reward=[math_verify, rewards.py:fmt, rewards.py:boxed]'" in doc
    reward = get_rewards([f"{tmp_path}/rewards.py:fmt", f"{tmp_path}/rewards.py:boxed"],
                         [0.2, 0.1])
    task = _task("exact")
    task.reward = reward
    ex = {"prompt": "q", "id": 0, "answer": "48 + 24 = 72\n#### 72"}
    got = task.score_detailed([ex] * 3, ["so\n#### 72", "\\boxed{72}", "\\boxed{7}"])
    np.testing.assert_array_equal(got.columns["fmt"], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(got.columns["boxed"], [np.nan, 1.0, 0.0])
    np.testing.assert_allclose(got.total, [0.2, 0.1, 0.0])


def test_a_reward_that_raises_names_the_function(tmp_path):
    """An exception inside a reward function is a one-line ``ValueError`` naming the function,
    the exception, the prompt and the completion (not a bare ``ZeroDivisionError``)."""
    path = tmp_path / "raising.py"
    path.write_text(RAISING)
    for reward in (f"{path}:crash", ["exact", f"{path}:crash"]):
        task = _task(reward)
        with pytest.raises(ValueError) as e:
            task.score([_examples()[0]], [" "])
        assert str(e.value) == ("reward function 'crash' of task 'arithmetic' raised "
                                "ZeroDivisionError: float division by zero for prompt 'p0' and "
                                "completion ' '")
    task = _task(f"{path}:wrong_field")
    with pytest.raises(ValueError, match="reward function 'wrong_field' of task 'arithmetic' "
                       "raised TypeError: .*missing 1 required keyword-only argument: "
                       "'solution'"):
        task.probe_rewards()
    _task(["exact", "positional"]).probe_rewards()  # the built-in ones take any completion


LEAVING = '''
import sys


def bye(prompt, completion, **_):
    sys.exit(0)


def own_interrupt(prompt, completion, **_):
    raise KeyboardInterrupt


def closing(prompt, completion, **_):
    raise GeneratorExit
'''


@pytest.mark.parametrize("name, shown", [("bye", "SystemExit(0)"),
                                         ("own_interrupt", "KeyboardInterrupt()"),
                                         ("closing", "GeneratorExit()")])
def test_a_reward_that_exits_or_interrupts_itself_is_a_one_line_error(tmp_path, name, shown):
    """``sys.exit(0)`` (or a ``KeyboardInterrupt`` / ``GeneratorExit`` the function raises
    itself) inside a reward is the same one-line ``ValueError`` as any exception, not the end
    of the process (``bestk train`` used to exit with status 0 and no message)."""
    path = tmp_path / "leaving.py"
    path.write_text(LEAVING)
    task = _task(f"{path}:{name}")
    with pytest.raises(ValueError) as e:
        task.score([_examples()[0]], ["4"])
    assert str(e.value) == (f"reward function {name!r} of task 'arithmetic' raised {shown} for "
                            "prompt 'p0' and completion '4'")
    with pytest.raises(ValueError, match=re.escape(f"raised {shown}") + ".*probe call before"):
        task.probe_rewards()


def test_a_reward_module_that_exits_while_loading_is_a_one_line_error(tmp_path):
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(0)\n\ndef f(prompt, completion, **_):\n    return 1.0\n")
    with pytest.raises(ValueError, match=f"^reward function '{path}:f' raised SystemExit\\(0\\) "
                       "while its module was loading$"):
        get_reward(f"{path}:f")
    path.write_text("def f(prompt, completion, **_):\n    return 1.0\n")
    assert get_reward(f"{path}:f").fn("p", "c") == 1.0  # nothing half-loaded was kept


VALUES = '''
import numpy as np
import torch


def text(prompt, completion, **_):
    return "0.5"


def half(prompt, completion, **_):
    return torch.tensor(0.5, dtype=torch.bfloat16)


def halves(prompt, completion, **_):
    return [torch.tensor(0.5, dtype=torch.bfloat16)]


def numpy_bool(prompt, completion, **_):
    return np.bool_(True)


def numpy_float(prompt, completion, **_):
    return np.float32(0.25)


def plain_bool(prompt, completion, **_):
    return False
'''


def test_a_reward_must_return_a_number_not_text(tmp_path):
    """``"0.5"`` used to be taken as 0.5: now it is refused in one line naming the function,
    the value and its type. numpy / torch scalars (bfloat16 too) and bools are numbers."""
    path = tmp_path / "values.py"
    path.write_text(VALUES)
    with pytest.raises(ValueError) as e:
        _task(f"{path}:text").score([_examples()[0]], ["4"])
    assert str(e.value) == ("reward function 'text' of task 'arithmetic' returned '0.5' for "
                            "prompt 'p0': a str, not a number (a reward is an int, float or "
                            "bool, or a numpy or torch scalar)")
    with pytest.raises(ValueError, match="returned \\[tensor\\(0.5000, dtype=torch.bfloat16\\)"
                       "\\] for prompt 'p0': a list, not a number"):
        _task(f"{path}:halves").score([_examples()[0]], ["4"])
    for name, want in (("half", 0.5), ("numpy_bool", 1.0), ("numpy_float", 0.25),
                       ("plain_bool", 0.0)):
        got = _task(f"{path}:{name}").score(_examples(), ["4", "4", "4"])
        assert got.dtype == np.float64 and got.tolist() == [want] * 3, name


def test_reward_number():
    import fractions
    from decimal import Decimal

    import torch

    from bestk.tasks.rewards import reward_number

    for value, want in ((1, 1.0), (True, 1.0), (0.5, 0.5), (fractions.Fraction(1, 4), 0.25),
                        (Decimal("0.5"), 0.5), (np.int64(3), 3.0), (np.array(0.5), 0.5),
                        (torch.tensor([0.75], dtype=torch.bfloat16), 0.75),
                        (torch.tensor(2, dtype=torch.int8), 2.0)):
        assert reward_number(value) == want and type(reward_number(value)) is float
    for value, why in (("0.5", "a str"), (b"1", "a bytes"), ([0.5], "a list"),
                       (1j, "a complex"), (None, "None is not a number"),
                       (np.array([0.5, 1.0]), "numpy array of dtype float64 and shape (2,)"),
                       (torch.ones(2), "torch tensor of dtype float32 and shape (2,)"),
                       (torch.tensor(1j), "torch tensor of dtype complex64")):
        with pytest.raises(TypeError, match=re.escape(why)):
            reward_number(value)
