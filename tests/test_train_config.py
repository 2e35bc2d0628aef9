"""``bestk.train.config`` on OmegaConf structured configs: dotlist overrides, YAML files,
merging, one-line errors naming the key, and the algorithm-dependent defaults."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from bestk.train.config import (
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config,
    resolve_defaults,
)


def test_the_dataclasses_are_an_omegaconf_schema():
    conf = OmegaConf.structured(TrainConfig)
    assert OmegaConf.is_config(conf) and conf.rollout.prompts_per_step == 64
    assert config_to_dict(OmegaConf.to_object(OmegaConf.structured(TrainConfig()))) == \
        config_to_dict(TrainConfig())


def test_dotlist_values_are_typed_by_their_field():
    cfg = apply_overrides(TrainConfig(), [
        "optim.lr=5e-3",  # YAML 1.1 would read a string; OmegaConf reads a number
        "loss.clip_low=0",  # an int into a float field
        "task.name=5",  # a number into a string field
        "rollout.max_new_tokens=null",
        "report_to=[tensorboard, wandb]",
        "model.path=a=b",  # everything after the first '=' is the value
    ])
    assert cfg.optim.lr == 0.005 and isinstance(cfg.loss.clip_low, float)
    assert cfg.task.name == "5" and cfg.rollout.max_new_tokens is None
    assert cfg.report_to == ["tensorboard", "wandb"] and cfg.model.path == "a=b"


def test_interpolations_resolve():
    cfg = apply_overrides(TrainConfig(), ["sft.lr=0.01", "optim.lr=${sft.lr}"])
    assert cfg.optim.lr == 0.01
    with pytest.raises(ValueError, match="config key 'optim.lr': Interpolation key 'sft.nope'"):
        apply_overrides(TrainConfig(), ["optim.lr=${sft.nope}"])


@pytest.mark.parametrize(
    "item, match",
    [
        ("rollout.nn=3", "unknown config key 'rollout.nn'; valid keys under 'rollout': "
                         "rollout.prompts_per_step, rollout.n,"),
        ("seed.x=1", "unknown config key 'seed.x': seed is not a section"),
        ("model=3", "config key 'model' is a section; give a mapping"),
        ("kappo.k=1.5", "config key 'kappo.k' must be an integer, got 1.5"),
        ("optim.lr=fast", "config key 'optim.lr' must be a number, got 'fast'"),
        ("model.arch=null", "config key 'model.arch' cannot be null"),
        ("task.options=3", "config key 'task.options' must be a mapping, got 3"),
        ("report_to=[1, 2]", "config key 'report_to' must be a list of names"),
        ("rollout.n=[x", "config key 'rollout.n' must be an integer, got '\\[x'"),
        ("nokey", "--set expects key=value"),
    ],
)
def test_errors_are_one_line_and_name_the_key(item, match):
    with pytest.raises(ValueError, match=match) as e:
        apply_overrides(TrainConfig(), [item])
    assert "\n" not in str(e.value)


def test_sections_merge_and_mappings_are_replaced():
    cfg = apply_overrides(TrainConfig(), ["task.options={digits: 2, op: sort}",
                                          "rollout={top_p: 0.9}"])
    assert cfg.rollout.top_p == 0.9 and cfg.rollout.temperature == 1.0  # a section merges
    apply_overrides(cfg, ["task.options={op: reverse}"])
    assert cfg.task.options == {"op": "reverse"}  # a mapping field is replaced
    apply_overrides(cfg, ["task.options.digits=3", "task.options="])
    assert cfg.task.options == {}  # an empty value is null, which empties a mapping


def test_overrides_apply_in_place_and_the_algorithm_defaults_follow():
    cfg = TrainConfig()
    assert (cfg.rollout.n, cfg.out) == (8, "runs/bestk")
    assert apply_overrides(cfg, ["algorithm=apo"]) is cfg
    assert (cfg.rollout.n, cfg.out) == (1, "runs/bestk-apo")  # defaults follow the algorithm
    apply_overrides(cfg, ["rollout.n=8", "algorithm=pg", "algorithm=dpo"])
    assert cfg.rollout.n == 8 and cfg.out == "runs/bestk-dpo"  # explicit n stays
    apply_overrides(cfg, ["rollout.n=null"])
    assert cfg.rollout.n == 1  # null: the algorithm's default again
    cfg.algorithm = "pg"  # an attribute assignment: resolve_defaults catches it
    assert resolve_defaults(cfg).rollout.n == 8


def test_yaml_files_and_dicts_merge_on_the_defaults(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("estimator: pkpo\nestimator_options: {k: 4}\noptim:\n  lr: 1e-4\n"
                 "rollout: {temperature: 0.7}\neval:\n  temperature: ${rollout.temperature}\n")
    cfg = load_config(p)
    assert cfg.estimator_options == {"k": 4} and cfg.optim.lr == 1e-4
    assert cfg.eval.temperature == 0.7 and cfg.sft.steps == 100
    again = config_from_dict({"max_steps": 7, "optim": {"beta1": 0.8}}, base=cfg)
    assert (again.max_steps, again.optim.beta1, again.optim.lr) == (7, 0.8, 1e-4)
    p.write_text("optim: {lr: 1e-4\n")
    with pytest.raises(ValueError, match="is not valid YAML: .* at line 2, column 1"):
        load_config(p)
    p.write_text("- 1\n")
    with pytest.raises(ValueError, match="must be a mapping at the top level, got list"):
        load_config(p)
