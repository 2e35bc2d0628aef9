"""``bestk.train.config``, the pydantic schema of a run: dotlist overrides, YAML files, merging,
the rules beside their fields, one-line errors naming the key, ``None`` = the algorithm's
default resolved once when a run starts, and a schema module that loads no trainer code."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Literal, get_args

import pytest
import yaml

from bestk._schema import want
from bestk.train.config import (
    CALIBRATION_KINDS,
    KappoConfig,
    LossConfig,
    RolloutConfig,
    TrainConfig,
)
from bestk.train.config.io import (
    apply_overrides,
    config_from_dict,
    config_keys,
    config_to_dict,
    load_config,
)
from bestk.train.validation import check_values, resolve_defaults, validate
from tests.conftest import ROOT

DOCS = ROOT / "docs"


def test_the_schema_round_trips_through_plain_dicts_and_yaml():
    cfg = resolve_defaults(TrainConfig())
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
    assert config_to_dict(config_from_dict(yaml.safe_load(text))) == config_to_dict(cfg)
    assert config_to_dict(TrainConfig.model_validate(config_to_dict(cfg))) == config_to_dict(cfg)
    assert list(config_to_dict(cfg)) == list(TrainConfig.model_fields)  # field order: config.yaml
    assert text.startswith("algorithm: pg\nestimator: argmaxrl\nestimator_options: {}\n")


def test_dotlist_values_are_typed_by_their_field():
    cfg = apply_overrides(TrainConfig(), [
        "optim.lr=5e-3",  # YAML 1.1 would read a string; OmegaConf's reader reads a number
        "loss.clip_low=0",  # an int into a float field
        "task.name=5",  # a number into a string field
        "rollout.max_new_tokens=null",
        "report_to=[tensorboard, wandb]",
        "model.path=a=b",  # everything after the first '=' is the value
        "kappo.k='3'",  # a quoted integer
    ])
    assert cfg.optim.lr == 0.005 and isinstance(cfg.loss.clip_low, float)
    assert cfg.task.name == "5" and cfg.rollout.max_new_tokens is None
    assert cfg.report_to == ["tensorboard", "wandb"] and cfg.model.path == "a=b"
    assert cfg.kappo.k == 3


def test_interpolations_resolve():
    cfg = apply_overrides(TrainConfig(), ["sft.lr=0.01", "optim.lr=${sft.lr}"])
    assert cfg.optim.lr == 0.01
    cfg = apply_overrides(TrainConfig(), ["eval.temperature=${rollout.temperature}",
                                          "rollout.temperature=0.5"])
    assert cfg.eval.temperature == 0.5  # resolved against the merged config
    with pytest.raises(ValueError, match="config key 'optim.lr': Interpolation key 'sft.nope'"):
        apply_overrides(TrainConfig(), ["optim.lr=${sft.nope}"])


@pytest.mark.parametrize(
    "item, match",
    [
        ("rollout.nn=3", "unknown config key 'rollout.nn'; valid keys under 'rollout': "
                         "rollout.prompts_per_step, rollout.n,"),
        ("bogus=1", "unknown config key 'bogus'; valid keys: algorithm, estimator,"),
        ("seed.x=1", "unknown config key 'seed.x': seed is not a section"),
        ("model=3", "config key 'model' is a section; give a mapping"),
        ("kappo.k=1.5", "config key 'kappo.k' must be an integer, got 1.5"),
        ("kappo.k=2.0", "config key 'kappo.k' must be an integer, got 2.0"),
        ("kappo.k=true", "config key 'kappo.k' must be an integer, got True"),
        ("optim.lr=fast", "config key 'optim.lr' must be a number, got 'fast'"),
        ("optim.lr=true", "config key 'optim.lr' must be a number, got True"),
        ("model.arch=null", "config key 'model.arch' cannot be null"),
        ("task.options=3", "config key 'task.options' must be a mapping, got 3"),
        ("task.options={1: 2}", "config key 'task.options' must be a mapping with string keys"),
        ("report_to=[1, 2]", "config key 'report_to' must be a list of names"),
        ("rollout.n=[x", "config key 'rollout.n' must be an integer, got '\\[x'"),
        ("nokey", "--set expects key=value"),
        # the range rules beside the fields
        ("rollout.n=0", "config key 'rollout.n' must be an integer >= 1 or null "
                        "\\(the algorithm's default\\), got 0"),
        ("rollout.top_p=2", "config key 'rollout.top_p' must be a number in \\(0, 1\\] or null "
         "\\(the model's generation_config\\), got 2"),
        ("loss.clip_low=1", "config key 'loss.clip_low' must be a number in \\[0, 1\\), got 1"),
        ("optim.lr=0", "config key 'optim.lr' must be a number > 0, got 0"),
        ("optim.lr=.inf", "config key 'optim.lr' must be a finite number, got inf"),
        ("seed=-1", "config key 'seed' must be an integer in \\[0, 2\\*\\*63 - 1\\], got -1"),
        ("kappo.beta=0", "config key 'kappo.beta' must be a number >= 1e-30, got 0"),
        ("kappo.kind=exact",
         "config key 'kappo.kind' must be auto, binary or winrate, got 'exact'"),
        ("loss.agg=mean", "config key 'loss.agg' must be token-mean, seq-mean-token-mean or "
                          "seq-mean-token-sum, got 'mean'"),
        ("model.lora.target_modules=[]", "'model.lora.target_modules' must be a list of module"),
        ("device=", "config key 'device' cannot be null"),
        ("run_name=''", "config key 'run_name' must be a name or null, got ''"),
        # the rules between fields
        ("model.hidden_size=30",
         "'model.hidden_size' \\(30\\) must be divisible by model.num_heads"),
        ("loss.minibatches=5", "'loss.minibatches' \\(5\\) must divide rollout.prompts_per_step"),
        ("model.autocast=bf16", "'model.autocast' is bf16, which needs a CUDA device"),
    ],
)
def test_errors_are_one_line_and_name_the_key(item, match):
    cfg = TrainConfig()
    before = config_to_dict(cfg)
    with pytest.raises(ValueError, match=match) as e:
        apply_overrides(cfg, [item])
    assert "\n" not in str(e.value)
    assert config_to_dict(cfg) == before  # a refused override changes nothing


def test_construction_and_assignment_are_validated_with_the_same_messages():
    with pytest.raises(ValueError, match="^config key 'rollout.n' must be an integer >= 1"):
        RolloutConfig(n=0)
    with pytest.raises(ValueError, match="^config key 'rollout.n' must be an integer >= 1"):
        TrainConfig(rollout={"n": 0})
    with pytest.raises(ValueError, match="^unknown config key 'rollout.nn'; valid keys under"):
        TrainConfig(rollout={"nn": 0})
    cfg = TrainConfig()
    with pytest.raises(ValueError, match="^config key 'kappo.k' must be an integer >= 1, got 0$"):
        cfg.kappo.k = 0
    with pytest.raises(ValueError, match="^config key 'loss.agg' must be token-mean"):
        cfg.loss.agg = "mean"
    with pytest.raises(ValueError, match="^config key 'device' cannot be null$"):
        cfg.device = None
    assert cfg.kappo.k == 4 and cfg.loss.agg == "token-mean"  # refused: unchanged
    # a rule between sections, broken section by section, is caught on the whole config
    cfg.loss.minibatches = 3
    with pytest.raises(ValueError, match="'loss.minibatches' \\(3\\) must divide"):
        check_values(cfg)


def test_sections_merge_and_mappings_are_replaced():
    cfg = apply_overrides(TrainConfig(), ["task.options={digits: 2, op: sort}",
                                          "rollout={top_p: 0.9}"])
    assert cfg.rollout.top_p == 0.9 and cfg.rollout.temperature == 1.0  # a section merges
    apply_overrides(cfg, ["task.options={op: reverse}"])
    assert cfg.task.options == {"op": "reverse"}  # a mapping field is replaced
    apply_overrides(cfg, ["task.options.digits=3", "task.options="])
    assert cfg.task.options == {}  # an empty value is null, which empties a mapping
    apply_overrides(cfg, ["task.options.a.b=1"])
    assert cfg.task.options == {"a": {"b": 1}}


def test_none_is_the_algorithms_default_resolved_once_when_the_run_starts():
    cfg = TrainConfig()
    assert (cfg.rollout.n, cfg.out) == (None, None)  # no hidden state: None until resolved
    assert (resolve_defaults(cfg).rollout.n, resolve_defaults(cfg).out) == (8, "runs/bestk")
    assert apply_overrides(cfg, ["algorithm=apo"]) is cfg  # in place
    resolved = resolve_defaults(cfg)
    assert resolved is not cfg and cfg.rollout.n is None  # a new config; cfg unchanged
    assert (resolved.rollout.n, resolved.out) == (1, "runs/bestk-apo")
    apply_overrides(cfg, ["rollout.n=8", "algorithm=pg", "algorithm=dpo"])
    assert resolve_defaults(cfg).rollout.n == 8 and resolve_defaults(cfg).out == "runs/bestk-dpo"
    apply_overrides(cfg, ["rollout.n=null", "out=x"])
    assert (resolve_defaults(cfg).rollout.n, resolve_defaults(cfg).out) == (1, "x")


def test_an_explicit_value_is_kept_in_any_order_of_setting_it():
    """The same settings give the same run however they are made (attribute assignments,
    ``--set`` items, a dict), in either order."""
    c = TrainConfig()
    c.rollout.n = 8
    c.algorithm = "apo"
    d = apply_overrides(TrainConfig(), ["rollout.n=8", "algorithm=apo"])
    e = apply_overrides(TrainConfig(), ["algorithm=apo", "rollout.n=8"])
    f = config_from_dict({"algorithm": "apo", "rollout": {"n": 8}})
    assert [resolve_defaults(x).rollout.n for x in (c, d, e, f)] == [8, 8, 8, 8]
    assert len({yaml.safe_dump(config_to_dict(resolve_defaults(x))) for x in (c, d, e, f)}) == 1


def test_validate_resolves_a_copy():
    cfg = TrainConfig(algorithm="dpo")
    validate(cfg)  # dpo needs rollout.n = 1: its default, resolved in a copy
    assert cfg.rollout.n is None
    cfg.rollout.n = 4
    with pytest.raises(ValueError, match="'rollout.n' \\(4\\) is not used by algorithm 'dpo'"):
        validate(cfg)


def test_yaml_files_and_dicts_merge_on_the_defaults(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("estimator: pkpo\nestimator_options: {k: 4}\noptim:\n  lr: 1e-4\n"
                 "rollout: {temperature: 0.7}\neval:\n  temperature: ${rollout.temperature}\n")
    cfg = load_config(p)
    assert cfg.estimator_options == {"k": 4} and cfg.optim.lr == 1e-4
    assert cfg.eval.temperature == 0.7 and resolve_defaults(cfg).sft.steps == 100
    again = config_from_dict({"max_steps": 7, "optim": {"beta1": 0.8}}, base=cfg)
    assert (again.max_steps, again.optim.beta1, again.optim.lr) == (7, 0.8, 1e-4)
    assert cfg.max_steps == 100  # the base is left alone
    p.write_text("optim: {lr: 1e-4\n")
    with pytest.raises(ValueError, match="is not valid YAML: .* at line 2, column 1"):
        load_config(p)
    p.write_text("- 1\n")
    with pytest.raises(ValueError, match="must be a mapping at the top level, got list"):
        load_config(p)
    p.write_text("rollout: {n: 0}\n")
    with pytest.raises(ValueError, match="config key 'rollout.n' must be an integer >= 1"):
        load_config(p)


def test_every_key_is_documented_in_the_schema_and_once_in_the_training_docs():
    keys = config_keys()
    assert [k for k, info in keys.items() if not info.description] == []
    for name, info in TrainConfig.model_fields.items():
        assert info.description, name  # the sections too
    # the config table of docs/training.md: `a.b.c` / `d` rows give a.b.c and a.b.d
    text = (DOCS / "training.md").read_text()
    table = text[text.index("| key | default | meaning |"):].split("\n\n")[0]
    documented: list[str] = []
    for line in table.splitlines():
        m = re.match(r"\| (`[a-z0-9_.]+`(?: / `[a-z0-9_]+`)*) \| ", line)
        if m:
            first, *rest = re.findall(r"`([a-z0-9_.]+)`", m.group(1))
            section = first.rpartition(".")[0]
            documented += [first] + [f"{section}.{r}" if section else r for r in rest]
    assert sorted(documented) == sorted(keys)  # each key once, no key that is not one


def test_the_literal_choices_are_the_libraries_own():
    from bestk.kappo.calibration import MIN_BETA
    from bestk.losses import AGG_MODES, KL_ESTIMATORS

    def choices(cls, name):
        (tp,) = [t for t in [cls.model_fields[name].annotation]]
        assert tp.__origin__ is Literal
        return get_args(tp)

    assert choices(LossConfig, "agg") == AGG_MODES
    assert choices(LossConfig, "kl_estimator") == KL_ESTIMATORS
    assert choices(KappoConfig, "kind") == CALIBRATION_KINDS
    assert want(KappoConfig.model_fields["beta"]) == f"a number >= {MIN_BETA:g}"
    assert [m.ge for m in KappoConfig.model_fields["beta"].metadata if hasattr(m, "ge")] == \
        [MIN_BETA]


def test_the_schema_module_loads_no_trainer_code_and_no_torch():
    code = ("import sys, bestk.train.config; "
            "print(sorted(m for m in sys.modules if m.startswith(('bestk', 'torch'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = eval(out)  # noqa: S307 - a list of module names printed just above
    assert "torch" not in loaded
    assert [m for m in loaded if m not in ("bestk", "bestk._lazy", "bestk._schema", "bestk.train",
                                           "bestk.train.config",
                                           "bestk.train.config.schema")] == []


@pytest.mark.parametrize("text, got", [("42\n", "int 42"), ("hello world\n", "str 'hello world'"),
                                       ("3.5\n", "float 3.5"), ("- a\n- b\n", "list")])
def test_a_config_file_that_is_not_a_mapping_is_one_line(tmp_path, text, got):
    """``echo 42 > scalar.yaml; bestk train --config scalar.yaml``: one line saying the file
    must be a mapping and what it holds (not an omegaconf traceback, nor "unknown config key
    'hello world'")."""
    from tests.conftest import invoke, one_line_error

    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        load_config(p)
    assert str(e.value).startswith(f"config file '{p}' must be a mapping at the top level")
    assert f"at the top level, got {got}; write one 'key: value' per line" in str(e.value)
    line = one_line_error(invoke("train", "--config", p, "--out", tmp_path / "run", "--quiet"))
    assert line == f"error: {e.value}"
    assert not (tmp_path / "run").exists()


def test_sft_steps_default_to_none_for_a_model_path():
    """``sft.steps: null`` (the default) is 100 for the tiny model, 0 for a ``model.path``
    (a pretrained model is not warmed up on the task's answers unless asked to)."""
    assert TrainConfig().sft.steps is None
    assert resolve_defaults(TrainConfig()).sft.steps == 100
    cfg = apply_overrides(TrainConfig(), ["model.path=some/model"])
    assert resolve_defaults(cfg).sft.steps == 0
    apply_overrides(cfg, ["sft.steps=7"])
    assert resolve_defaults(cfg).sft.steps == 7
    apply_overrides(cfg, ["sft.steps=null", "model.path=null"])
    assert resolve_defaults(cfg).sft.steps == 100


@pytest.mark.parametrize("item, message", [
    ("sampling_seed=-5", "config key 'sampling_seed' must be an integer in [0, 2**63 - 1] or "
     "null (= seed), got -5"),
    (f"sampling_seed={2**63}", "config key 'sampling_seed' must be an integer in "
     f"[0, 2**63 - 1] or null (= seed), got {2**63}"),
    (f"max_steps={2**63}", "config key 'max_steps' must be an integer in [0, 2**63 - 1], got "
     f"{2**63}"),
    ("task.reward=[]", "config key 'task.reward' must be a reward name, module:function, "
     "path/file.py:function, or a non-empty list of them (null = the task's own reward), "
     "got []"),
    ("task.reward=''", "config key 'task.reward' must be a reward name, module:function, "
     "path/file.py:function, or a non-empty list of them (null = the task's own reward), "
     "got ''"),
    ("task.reward=[exact, '']", "config key 'task.reward' must be a reward name, "
     "module:function, path/file.py:function, or a non-empty list of them (null = the task's "
     "own reward), got ['exact', '']"),
])
def test_single_field_rules_refuse_in_the_schema(item, message):
    """``sampling_seed=-5`` was refused after config.yaml, metrics.jsonl and the SFT were
    written, without naming the key; ``max_steps`` above int64 and an empty ``task.reward``
    (silently the task's own reward) were accepted: each is the schema's one line now."""
    with pytest.raises(ValueError) as e:
        apply_overrides(TrainConfig(), [item])
    assert str(e.value) == message
    key, value = item.split("=", 1)
    *section, name = key.split(".")
    data: dict = {name: yaml.safe_load(value)}
    with pytest.raises(ValueError, match=re.escape(message)):  # a config file's too
        config_from_dict({section[0]: data} if section else data)


def test_the_bounds_of_those_fields_keep_their_valid_values():
    cfg = apply_overrides(TrainConfig(), [f"sampling_seed={2**63 - 1}",
                                          f"max_steps={2**63 - 1}", "task.reward=[exact]"])
    assert (cfg.sampling_seed, cfg.max_steps, cfg.task.reward) == (2**63 - 1, 2**63 - 1,
                                                                   ["exact"])
    apply_overrides(cfg, ["sampling_seed=null", "task.reward=null", "max_steps=0"])
    assert (cfg.sampling_seed, cfg.task.reward, cfg.max_steps) == (None, None, 0)
