"""``bestk.train.config.io``: the YAML reader refuses what no config needs and a hostile one
uses -- a key twice, a recursive alias, an alias bomb, runaway nesting -- in one line naming the
file and line, before anything is built (nothing hangs); a command line gives each config key
one value (``--set k=a --set k=b`` is refused, naming the key and both items)."""

from __future__ import annotations

import pytest
import yaml

from bestk.train.config import TrainConfig
from bestk.train.config.io import (
    YAML_ALIAS_LIMIT,
    YAML_DEPTH_LIMIT,
    apply_overrides,
    check_each_key_once,
    dotlist_value,
    load_config,
    parse_yaml_config,
)
from tests.conftest import invoke, one_line_error


def _bomb(levels: int = 9) -> str:
    """A "billion laughs": each line names the one above 9 times (9^levels values in ~400
    bytes once aliases are expanded)."""
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x]"]
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _refused_file(tmp_path, text: str) -> str:
    """The one line ``load_config`` and ``bestk train --config`` give for a file of ``text``
    (the same line; nothing written)."""
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        load_config(p)
    out = tmp_path / "run"
    assert one_line_error(invoke("train", "--config", p, "--out", out, "--quiet")) == \
        f"error: {e.value}"
    assert not out.exists()
    prefix = f"config file '{p}' is not valid YAML: "
    assert str(e.value).startswith(prefix), e.value
    return str(e.value).removeprefix(prefix)


@pytest.mark.parametrize("text, line", [
    ("max_steps: 5\nseed: 1\nmax_steps: 7\n",
     "duplicate key 'max_steps' (first at line 1) at line 3, column 1"),
    ("rollout:\n  n: 4\n  temperature: 0.7\n  n: 8\n",
     "duplicate key 'rollout.n' (first at line 2) at line 4, column 3"),
    ("task:\n  options: {digits: 2, digits: 3}\n",
     "duplicate key 'task.options.digits' (first at line 2) at line 2, column 24"),
    ("seed: 1\n'seed': 2\n", "duplicate key 'seed' (first at line 1) at line 2, column 1"),
])
def test_a_key_twice_in_a_config_file_is_one_line_naming_it_and_both_lines(tmp_path, text, line):
    """One value per key, never one silently winning (YAML says keys are unique; PyYAML kept
    the last)."""
    assert _refused_file(tmp_path, text) == line


@pytest.mark.parametrize("text, line", [
    ("task:\n  options: &x [*x]\n",
     "alias *x is inside the collection it names (a recursive alias) at line 2, column 16"),
    ("task:\n  options: &x {a: {b: *x}}\n",
     "alias *x is inside the collection it names (a recursive alias) at line 2, column 23"),
])
def test_a_recursive_alias_is_one_line(tmp_path, text, line):
    """It was a RecursionError traceback (OmegaConf walking the cycle)."""
    assert _refused_file(tmp_path, text) == line


def test_an_alias_bomb_is_refused_before_it_is_built(tmp_path):
    """A 400-byte "billion laughs" hung ``bestk train --config`` for minutes; it is refused
    while it is read (the aliases counted, none expanded), in a file and in a ``--set``."""
    text = _bomb()
    assert len(text) < 400
    line = _refused_file(tmp_path, text)
    assert line == (f"aliases expand the document by more than {YAML_ALIAS_LIMIT} values (an "
                    "alias bomb?) at line 6, column 10")
    flow = "{" + text.strip().replace("\n", ", ") + "}"
    with pytest.raises(ValueError, match=r"^--set 'task.options=\{a0: .*: aliases expand the "
                       r"document by more than 100000 values \(an alias bomb\?\) at line 1, "):
        dotlist_value(f"task.options={flow}")


def test_nesting_deeper_than_the_limit_is_refused_aliases_expanded():
    def nested(levels: int) -> str:
        return "x: " + "[" * levels + "]" * levels

    assert parse_yaml_config(nested(YAML_DEPTH_LIMIT - 1))  # the mapping + 31 lists: loads
    with pytest.raises(yaml.YAMLError, match=f"nested more than {YAML_DEPTH_LIMIT} levels"):
        parse_yaml_config(nested(YAML_DEPTH_LIMIT))
    deep = "[" * (YAML_DEPTH_LIMIT - 1) + "]" * (YAML_DEPTH_LIMIT - 1)
    with pytest.raises(yaml.YAMLError, match=f"alias \\*a nests the document more than "
                       f"{YAML_DEPTH_LIMIT} levels deep"):
        parse_yaml_config(f"a: &a {deep}\nb: [*a]\n")


def test_anchors_aliases_and_merge_keys_of_a_normal_config_still_load(tmp_path):
    """Anchors of scalars and mappings, and ``<<`` merge keys whose keys the mapping
    overrides (a merge is no key twice)."""
    p = tmp_path / "c.yaml"
    p.write_text("optim: {lr: &lr 1e-4}\nsft: {lr: *lr}\n"
                 "rollout: &sampling {temperature: 0.7, top_p: 0.9}\n"
                 "eval:\n  <<: *sampling\n  top_p: 0.95\n  n: 4\n")
    cfg = load_config(p)
    assert cfg.optim.lr == cfg.sft.lr == 1e-4
    assert (cfg.rollout.temperature, cfg.rollout.top_p) == (0.7, 0.9)
    assert (cfg.eval.temperature, cfg.eval.top_p, cfg.eval.n) == (0.7, 0.95, 4)
    many = "a: &a {k: [1, 2, 3]}\n" + "".join(f"b{i}: *a\n" for i in range(1000))
    assert parse_yaml_config(many)["b999"] == {"k": [1, 2, 3]}  # well within the limit


@pytest.mark.parametrize("sets, line", [
    (["max_steps=1", "max_steps=2"],
     "--set max_steps=1 and --set max_steps=2 both set 'max_steps'; give it once"),
    (["max_steps=abc", "max_steps=2"],  # a bad value is not hidden by a later one
     "--set max_steps=abc and --set max_steps=2 both set 'max_steps'; give it once"),
    (["rollout={n: 4}", "rollout.n=8"],
     "--set rollout={n: 4} and --set rollout.n=8 both set 'rollout.n'; give it once"),
    (["task.options.op=sort", "task.options={digits: 2}"],  # a mapping field is replaced
     "--set task.options.op=sort and --set task.options={digits: 2} both set "
     "'task.options.op'; give it once"),
    (["task.options={digits: 2, digits: 3}"],
     "--set 'task.options={digits: 2, digits: 3}': duplicate key 'digits' (first at line 1) "
     "at line 1, column 13"),
])
def test_a_key_given_twice_on_the_command_line_is_one_line(tmp_path, sets, line):
    """``bestk train --set k=a --set k=b`` silently took b; ``--resume`` and ``bestk eval`` read
    ``--set`` the same way."""
    out = tmp_path / "run"
    args = [x for s in sets for x in ("--set", s)]
    assert one_line_error(invoke("train", "--out", out, "--quiet", *args)) == f"error: {line}"
    assert not out.exists()
    assert one_line_error(invoke("train", "--resume", out, "--quiet", *args)) == f"error: {line}"
    assert one_line_error(invoke("eval", "--model", tmp_path, "--set", "eval.n=2", "--set",
                                 "eval.n=3")) == \
        "error: --set eval.n=2 and --set eval.n=3 both set 'eval.n'; give it once"


def test_each_key_once_compares_values_and_a_sections_keys():
    assert check_each_key_once(["max_steps=20", "max_steps=20"]) == {"max_steps": 20}
    assert check_each_key_once(["rollout={n: 4}", "rollout.n=4"]) == {"rollout.n": 4}
    assert check_each_key_once(["rollout={n: 4}", "rollout.top_p=0.9"]) == \
        {"rollout.n": 4, "rollout.top_p": 0.9}  # a section's mapping: its keys one by one
    with pytest.raises(ValueError, match="^--set-for m:seed=1 and --set-for m:seed=2 both set "
                       "'seed'; give it once$"):
        check_each_key_once(["seed=1", "seed=2"], "--set-for m:")
    # the library applies layers of overrides in order (a command line is checked first)
    assert apply_overrides(TrainConfig(), ["seed=1", "seed=2"]).seed == 2


def test_a_run_config_yaml_is_read_by_the_same_reader(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 1\nseed: 2\n")
    line = one_line_error(invoke("train", "--resume", run, "--quiet"))
    assert line == (f"error: {run / 'config.yaml'} is not valid YAML: duplicate key 'seed' "
                    "(first at line 1) at line 2, column 1")


def test_last_of_each_key_turns_layers_into_one_command_line():
    from bestk.train.config.io import check_each_key_once, last_of_each_key

    layers = ["rollout.n=4", "eval.n=8", "seed=1", "rollout.n=16", "eval.n=16"]
    once = last_of_each_key(layers)
    assert once == ["seed=1", "rollout.n=16", "eval.n=16"]
    assert check_each_key_once(once) == {"seed": 1, "rollout.n": 16, "eval.n": 16}
    with pytest.raises(ValueError, match="both set 'rollout.n'"):
        check_each_key_once(layers)
