"""What ``docs/design.md`` promises about the code base.

* Its "Adding an estimator" example, executed as written, registers an estimator that the
  embedded trainer, the verl plugin (through verl's own ``compute_advantage``) and the TRL
  adapter (through TRL's ``GRPOTrainer``) run by its registry properties alone.
* No module outside ``bestk.estimators`` and ``bestk.kappo`` compares estimator names, and
  none outside ``bestk.train.algorithms`` compares algorithm names (the claims and the KAPPO
  testbed's method ids name the methods they compare).
* The repository cites no file it does not contain (the design notes and the papers are cited
  through ``docs/references.md``).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import bestk
from bestk.estimators import ESTIMATORS, estimator_info
from tests.conftest import scaled_rloo_ref, tiny_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_example_registers_its_properties(scaled_rloo):
    scaled_rloo.write_text(json.dumps({"0": 2.0, "p1": 0.5}))
    info = estimator_info("scaled_rloo")
    assert (info.reward_domain, info.needs_prompt_ids, info.objective) == ("binary", True, None)
    r = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    ids = [0, 0, 0, "p1", "p1", 7]
    got = bestk.advantages("scaled_rloo", r, ids, scales=str(scaled_rloo))  # a path: loaded
    np.testing.assert_allclose(got, scaled_rloo_ref(r, ids, {"0": 2.0, "p1": 0.5}), rtol=1e-15)
    with pytest.raises(ValueError, match="needs binary 0/1 rewards; reward at index 0 is 0.5"):
        bestk.advantages("scaled_rloo", [0.5, 1.0], [0, 0], scales={})
    with pytest.raises(ValueError, match="scaled_rloo needs the prompt ids"):
        bestk.advantages("scaled_rloo", [[1.0, 0.0]], scales={})
    with pytest.raises(ValueError, match="cannot load scales 'nope.json'"):
        bestk.advantages("scaled_rloo", [1.0, 0.0], [0, 0], scales="nope.json")


@pytest.mark.usefixtures("restore_torch_threads")
def test_the_example_trains_in_the_embedded_trainer(scaled_rloo, tmp_path):
    from bestk.train.trainer import Trainer

    scaled_rloo.write_text(json.dumps({str(i): 1.0 + i % 3 for i in range(64)}))
    cfg = tiny_config(tmp_path / "run", "max_steps=2", "estimator=scaled_rloo",
                      f"estimator_options.scales={scaled_rloo}")
    seen = []
    tr = Trainer(cfg, on_step=lambda step, m: seen.append(m))
    assert tr.binary_advantages  # its reward domain: the estimator sees the 0/1 success
    assert tr.estimator_options["scales"]["2"] == 3.0  # the path option, loaded
    tr.run(progress=False)
    assert len(seen) == 2 and all(np.isfinite(m["adv_abs_mean"]) for m in seen)


def test_the_example_runs_through_verls_compute_advantage(scaled_rloo):
    pytest.importorskip("verl")
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import compute_advantage

    import bestk.integrations.verl as bverl

    assert "scaled_rloo" in bverl.VERL_ESTIMATORS  # handed to verl when it was registered
    assert core_algos.get_adv_estimator_fn("scaled_rloo").__bestk_estimator__ == "scaled_rloo"
    rng = np.random.default_rng(0)
    uid = np.array([f"u{g}" for g in rng.integers(0, 4, 14)], dtype=object)
    scores = rng.integers(0, 2, 14).astype(np.float64)
    length = 5
    rewards = torch.zeros(14, length)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float32)
    mask = torch.ones(14, length, dtype=torch.int64)
    scaled_rloo.write_text(json.dumps({"u1": 3.0, "u2": 0.25}))
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uid})
    config = {"bestk": {"scales": str(scaled_rloo)}}
    out = compute_advantage(data, adv_estimator="scaled_rloo", num_repeat=1, config=config)
    want = scaled_rloo_ref(scores, list(uid), {"u1": 3.0, "u2": 0.25})
    np.testing.assert_allclose(out.batch["advantages"][:, 0].double().numpy(), want, rtol=1e-6)


def test_the_example_trains_in_trl(scaled_rloo, tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset

    from bestk.integrations.trl import BestkGRPOTrainer
    from tests._trl_tiny import grpo_config, tiny_policy

    scaled_rloo.write_text(json.dumps({"a": 2.0, "b": 0.5}))
    model, tok = tiny_policy()
    n = 4
    args = grpo_config(tmp_path, per_device_train_batch_size=2 * n, num_generations=n)
    rows = [{"prompt": p, "pid": p[0]} for p in ("abc", "bca", "ab", "ba")]

    def has_x(completions, **_):  # 0/1 rewards, as the estimator's reward domain demands
        return [float("x" in c) for c in completions]

    kw = dict(model=model, reward_funcs=[has_x], args=args, train_dataset=Dataset.from_list(rows),
              processing_class=tok, estimator="scaled_rloo",
              estimator_options={"scales": str(scaled_rloo)})
    with pytest.raises(ValueError, match="scaled_rloo needs prompt_id_column"):
        BestkGRPOTrainer(**kw)
    pids: list[list] = []

    class Probe(BestkGRPOTrainer):  # records the prompt ids of each generation batch
        def _generate_and_score_completions(self, inputs):
            pids.append([x["pid"] for x in inputs])
            return super()._generate_and_score_completions(inputs)

    trainer = Probe(**kw, prompt_id_column="pid")
    assert trainer.estimator_options["scales"] == {"a": 2.0, "b": 0.5}  # the path, loaded
    trainer.train()
    r = trainer.last_rewards.numpy()
    assert set(np.unique(r)) <= {0.0, 1.0} and len(pids[-1]) == len(r)
    want = scaled_rloo_ref(r, pids[-1], {"a": 2.0, "b": 0.5})
    np.testing.assert_allclose(trainer.last_advantages.numpy(), want, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# no estimator-name comparisons outside the estimators, no algorithm-name comparisons outside
# the algorithms

#: Modules that name the methods they compare (and so may compare names).
NAMES_ALLOWED = {
    "bestk/lab/claims/exact.py": "the exact claims name the methods they compare",
    "bestk/lab/kappo.py": "the KAPPO testbed's own method ids (apo, dpo, kappo_grpo, rloo, "
                          "drgrpo, direct), some of which are estimator names",
}


def name_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, text)`` of each comparison (``==``, ``!=``, ``in``, ``not in``) of anything with
    a string constant that is one of ``names`` (alone or in a tuple / list / set literal)."""
    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(named(x) for x in [node.left, *node.comparators]):
            out.append((node.lineno, ast.unparse(node)))
    return out


def test_name_comparison_finder_finds_them():
    src = ('if cfg.estimator == "maxrl":\n    pass\nok = name in ("rloo", "x")\n'
           'fine = {"grpo": 1}.get(name)\n')
    assert [line for line, _ in name_comparisons(src, {"maxrl", "rloo", "grpo"})] == [1, 3]


def algorithm_names() -> set[str]:
    """The algorithm names: every key of ``ALGORITHMS`` and the built-in ones."""
    from bestk.train.algorithms import ALGORITHMS

    return set(ALGORITHMS) | {"pg", "apo", "dpo"}


def test_no_algorithm_name_comparisons_outside_the_algorithms():
    """The trainer, the config checks, the report and ``bestk compare`` read the algorithm's
    :class:`~bestk.train.algorithms.AlgorithmSpec`, never its name."""
    names = algorithm_names()
    bad = []
    for path in sorted((ROOT / "src" / "bestk").rglob("*.py")):
        rel = path.relative_to(ROOT / "src").as_posix()
        if rel.startswith("bestk/train/algorithms/") or rel in NAMES_ALLOWED:
            continue
        bad += [f"{rel}:{line}: {text}" for line, text in name_comparisons(path.read_text(), names)]
    assert not bad, "algorithm properties belong on its AlgorithmSpec:\n" + "\n".join(bad)


def test_the_algorithm_name_guard_sees_the_trainer():
    """Not vacuous: the names are the registered ones, and the finder flags a comparison of
    ``cfg.algorithm`` with one of them."""
    names = algorithm_names()
    assert {"pg", "apo", "dpo"} <= names
    src = 'what = cfg.estimator if cfg.algorithm == "pg" else cfg.kappo.k\n'
    assert [line for line, _ in name_comparisons(src, names)] == [1]


def test_no_estimator_name_comparisons_outside_the_estimators():
    names = set(ESTIMATORS)
    bad = []
    for path in sorted((ROOT / "src" / "bestk").rglob("*.py")):
        rel = path.relative_to(ROOT / "src").as_posix()
        if rel.startswith(("bestk/estimators/", "bestk/kappo/")) or rel in NAMES_ALLOWED:
            continue
        bad += [f"{rel}:{line}: {text}" for line, text in name_comparisons(path.read_text(), names)]
    assert not bad, "estimator properties belong in the registry:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# self-contained: no citation of files the repository does not hold

#: Names of notes and papers that are not part of the repository, spelled in pieces so that
#: this guard does not name them itself (and needs no exception for its own file).
_FOREIGN_NAMES = ("DES" + "IGN.md", "pap" + "ers/", ".." + "/sha" + "red")
FOREIGN = re.compile("|".join(re.escape(n) for n in _FOREIGN_NAMES)
                     + r"|[\w-]+-paper\.(?:md|txt)|[\w-]+-blog\.md")


def test_the_repository_cites_no_file_it_does_not_contain():
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    bad = []
    for rel in files:
        path = ROOT / rel
        if not path.is_file() or path.suffix in (".png", ".pt"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        bad += [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                for m in FOREIGN.finditer(text)]
    assert not bad, "\n".join(bad)
    for name in _FOREIGN_NAMES:  # each name is caught where a file cites it
        assert FOREIGN.search(f"see {name}kappo.txt section 6"), name


def test_tests_seed_deterministically():
    """No test calls ``hash()`` (of a string it changes with PYTHONHASHSEED, so a failure seeded
    by it would not reproduce)."""
    bad = []
    paths = sorted((ROOT / "tests").rglob("*.py"))
    assert any(p.parent != ROOT / "tests" for p in paths)  # the folders are searched too
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hash":
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad



def test_benchmarks_and_examples_use_only_public_names():
    """Scripts outside the package import no private bestk module or name (``_x``)."""
    bad = []
    for path in sorted([*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bestk"):
                names = [*node.module.split("."), *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [p for a in node.names if a.name.startswith("bestk")
                         for p in a.name.split(".")]
            else:
                continue
            if any(n.startswith("_") and n != "__version__" for n in names):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad


#: The longest a source file may be (docs/design.md, "Layout").
MAX_SOURCE_LINES = 800


def long_source_files(root: Path, limit: int = MAX_SOURCE_LINES) -> dict[str, int]:
    """``{path: lines}`` of the ``.py`` files under ``root`` longer than ``limit`` lines."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out[str(path.relative_to(root))] = n
    return out


def test_the_length_check_finds_a_long_file(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 801)
    (tmp_path / "short.py").write_text("x = 1\n" * 800)
    assert long_source_files(tmp_path) == {"pkg/long.py": 801}


def test_no_source_file_is_longer_than_the_limit():
    src = Path(bestk.__file__).parent
    assert long_source_files(src) == {}, "split these files by job (docs/design.md, Layout)"


#: The most lines a function of src/bestk may span (``def`` to its last line, docstring
#: included), unless its docstring says why it reads better whole ("Reads better whole:").
MAX_FUNCTION_LINES = 80
WHOLE = "Reads better whole:"


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``{"path:name": lines}`` of the functions (and methods) under ``root`` longer than
    ``limit`` lines whose docstring does not say why they read better whole."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if n > limit and WHOLE not in (ast.get_docstring(node) or ""):
                out[f"{path.relative_to(root)}:{node.name}"] = n
    return out


def test_the_function_length_check_finds_a_long_function(tmp_path):
    body = "    x = 1\n" * 80
    (tmp_path / "m.py").write_text(
        f"def long():\n{body}\n\ndef short():\n{body[:-10]}\n\n"
        f"def whole():\n    \"\"\"{WHOLE} one rule, read top to bottom.\"\"\"\n{body}\n"
        "class C:\n    def method(self):\n" + body.replace("    ", "        "))
    assert long_functions(tmp_path) == {"m.py:long": 81, "m.py:method": 81}


def test_no_function_is_longer_than_the_limit():
    """Functions stay under 80 lines (docs/design.md, Style), except where the docstring says
    why one reads better whole."""
    src = Path(bestk.__file__).parent
    assert long_functions(src) == {}, "split these functions into named steps"


def untested_modules(src: Path, tests: Path) -> list[str]:
    """The modules of ``src`` with behaviour of their own (a top-level function or class)
    that have neither a test file named after them in the mirroring folder of ``tests``
    (``a/b/_x.py`` -> ``tests/a/b/test_x.py``; a package's ``__init__`` -> ``test_<package>.py``
    beside or inside its folder) nor a line of that folder's ``README.md`` naming them
    (``- `x.py`: `test_y.py`, ...``) whose test files all exist."""
    out = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                   for n in tree.body):
            continue
        rel = path.relative_to(src)
        if path.name == "__init__.py":
            name, folders = rel.parent.name, [tests / rel.parent.parent, tests / rel.parent]
        else:
            name, folders = path.stem.lstrip("_"), [tests / rel.parent]
        if any((f / f"test_{name}.py").is_file() for f in folders):
            continue
        readme = tests / rel.parent / "README.md"
        lines = readme.read_text().splitlines() if readme.is_file() else []
        named = [ln for ln in lines if ln.startswith(f"- `{path.name}`: ")]
        covers = [re.findall(r"`([^`]+\.py)`", ln.split(": ", 1)[1]) for ln in named]
        if not covers or not all(covers[0]) or not all(
                (tests / rel.parent / t).resolve().is_file() for t in covers[0]):
            out.append(str(rel))
    return out


def test_the_test_map_check_finds_an_untested_module(tmp_path):
    src, tests = tmp_path / "src", tmp_path / "tests"
    for d in (src / "pkg", tests / "pkg"):
        d.mkdir(parents=True)
    for name in ("a", "b", "c", "d"):
        (src / "pkg" / f"{name}.py").write_text("def f():\n    pass\n")
    (src / "pkg" / "consts.py").write_text("X = 1\n")  # no behaviour of its own
    (tests / "pkg" / "test_a.py").write_text("")
    (tests / "pkg" / "test_other.py").write_text("")
    (tests / "pkg" / "README.md").write_text(
        "- `b.py`: `test_other.py` (b, through other)\n- `c.py`: `test_gone.py` (c)\n")
    assert untested_modules(src, tests) == ["pkg/c.py", "pkg/d.py"]


def test_every_module_has_a_test_file_or_a_readme_line():
    """tests/ mirrors src/bestk/: each module with behaviour of its own has a test file named
    after it, or its test folder's README.md says which tests cover it."""
    assert untested_modules(Path(bestk.__file__).parent, ROOT / "tests") == []
