import ast
import dataclasses
import inspect

import pytest
import yaml

from populora_nb.config import ConfigError, load_config, save_config
from populora_nb.presets import PRESET_SHOWS, PRESETS, parse_override


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds(name):
    c = load_config(name)
    assert c.preset == name
    assert c.n_members == c.population.n_teachers + c.population.n_students


def test_preset_from_environment(monkeypatch):
    monkeypatch.setenv("POPULORA_PRESET", "tiny")
    assert load_config().model.name == "tiny"


def test_dotted_and_nested_overrides_agree():
    a = load_config("tiny", {"rl.rollouts": 7, "lora": {"rank": 2}})
    assert (a.rl.rollouts, a.lora.rank) == (7, 2)


def test_int_is_accepted_for_float():
    assert load_config("tiny", {"lora.lr": 1}).lora.lr == 1.0


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"rl.rolouts": 3}, "unknown config key 'rl.rolouts' (did you mean 'rl.rollouts'?)"),
        ({"nonsense": 1}, "unknown config key 'nonsense'"),
        ({"rl.rollouts": "3"}, "rl.rollouts must be int, got str '3'"),
        ({"lora.rank": 2.5}, "lora.rank must be int"),
        ({"run.steps": -1}, "run.steps must be > 0"),
        ({"population.n_teachers": 0}, "population.n_teachers must be > 0"),
        ({"model.name": "/no/such/model/dir"}, "model.name: no model directory at '/no/such/model/dir'"),
        ({"matchmaking.mode": "elo"}, "matchmaking.mode must be one of"),
        ({"tasks.kinds": ["code_x"]}, "tasks.kinds"),
        ({"lora": 5}, "lora is a section"),
        # values the config used to accept and the Verifier then refused, after config.yaml was written
        ({"verifier.memory_mb": 70}, "verifier.memory_mb must be >= 128"),
        ({"verifier.workers": 65}, "verifier.workers must be in 1..64"),
        ({"verifier.workers": 0}, "verifier.workers must be > 0"),
        ({"eval.benchmarks": ["humaneval++"]}, "eval.benchmarks: unknown ['humaneval++']"),
        ({"rl.student_rollouts_trained": 5}, "rl.student_rollouts_trained must be in 1..rollouts (4)"),
    ],
)
def test_bad_values_give_one_line_errors(overrides, fragment):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", overrides)
    msg = str(e.value)
    assert fragment in msg
    assert "\n" not in msg


def test_yaml_file_then_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"rl": {"rollouts": 5, "ppo_epochs": 2}}))
    c = load_config("tiny", {"rl.rollouts": 6}, p)
    assert (c.rl.rollouts, c.rl.ppo_epochs) == (6, 2)


def test_bad_yaml_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config("tiny", yaml_path=p)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config("tiny", yaml_path=tmp_path / "missing.yaml")


def test_save_and_reload_round_trip(tmp_path):
    c = load_config("smoke", {"rl.rollouts": 3})
    save_config(c, tmp_path / "config.yaml")
    data = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert load_config(data.pop("preset"), data) == c


def test_parse_override():
    assert parse_override("rl.rollouts=8") == ("rl.rollouts", 8)
    assert parse_override("tasks.kinds=[code_o]") == ("tasks.kinds", ["code_o"])
    with pytest.raises(ConfigError):
        parse_override("rl.rollouts")
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_override("rl.rollouts=[1")


def test_a_directory_without_a_model_is_named_as_such(tmp_path):
    (tmp_path / "README.md").write_text("no weights\n")
    with pytest.raises(ConfigError, match=r"model.name: .* is a directory but not a model \(no config.json"):
        load_config("tiny", {"model.name": str(tmp_path)})


def test_binary_or_unparsable_config_file_is_a_one_line_config_error(tmp_path):
    binary, broken, folder = tmp_path / "b.yaml", tmp_path / "s.yaml", tmp_path / "dir"
    binary.write_bytes(bytes(range(256)))
    broken.write_text("rl: {rollouts: 2\n")
    folder.mkdir()
    for path, fragment in ((binary, "is not text"), (broken, "is not valid YAML"), (folder, "is not a file")):
        with pytest.raises(ConfigError, match=fragment) as e:
            load_config("tiny", yaml_path=path)
        assert "\n" not in str(e.value)


def test_config_errors_are_user_input_errors():
    from populora_nb.errors import UserInputError

    assert issubclass(ConfigError, UserInputError) and issubclass(ConfigError, ValueError)


def test_evolution_needs_a_parent_left_in_each_role():
    """1+1 with evolution used to pass the config and fail at the first evolution event."""
    with pytest.raises(ConfigError, match="replace_per_role=1 must be smaller than the smallest role"):
        load_config("tiny", {"population.n_teachers": 1})
    assert load_config("tiny", {"population.n_teachers": 1, "evolution.enabled": False}).population.n_teachers == 1
    assert load_config("tiny", {"population.n_teachers": 1, "run.agent": "baseline"}).run.agent == "baseline"


def _field_help(cls_node):
    """{field: its attribute docstring or None} for the annotated fields of one class, in order."""
    body, out = cls_node.body, {}
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            nxt = body[i + 1] if i + 1 < len(body) else None
            doc = nxt.value.value if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) else None
            out[node.target.id] = doc.strip() if isinstance(doc, str) else None
    return out


def test_every_config_field_has_help_text():
    """Attribute docstrings are not kept at runtime, so read them from the source (issue #15)."""
    import populora_nb.config as config_module

    tree = ast.parse(inspect.getsource(config_module))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    sections = [f.type for f in dataclasses.fields(config_module.ExperimentConfig) if f.name != "preset"]
    checked = ["ExperimentConfig", *sections]
    assert len(sections) == 14
    dataclass_names = {n for n in classes if dataclasses.is_dataclass(getattr(config_module, n))}
    assert dataclass_names == set(checked), "a config dataclass outside ExperimentConfig: add it to this test"
    missing = []
    for name in checked:
        cls = getattr(config_module, name)
        help_text = _field_help(classes[name])
        runtime = [f.name for f in dataclasses.fields(cls)]
        assert list(help_text) == runtime, f"{name}: AST fields {list(help_text)} != dataclass fields {runtime}"
        missing += [f"{name}.{f}" for f, text in help_text.items() if not text]
    assert not missing, f"config fields without a help docstring on the line after them: {missing}"


def test_one_trueskill_env_per_run():
    """Built from the matchmaking section in one place, once: every step of a run rates with the same env."""
    from populora_nb.state import trueskill_env

    a, b = load_config("tiny"), load_config("tiny")
    assert trueskill_env(a) is trueskill_env(b)
    other = load_config("tiny", {"matchmaking": {"beta": 2.0}})
    assert trueskill_env(other) is not trueskill_env(a) and trueskill_env(other).beta == 2.0


def test_config_knows_every_operator_name_and_checks_a_mix_like_evolution():
    """config checks a mix without tensor code, from its own list of names: the list must be the
    operators module's registry, or a new operator would be refused (or a removed one accepted)."""
    from populora_nb.config import OPERATOR_NAMES
    from populora_nb.evolution import OperatorMix
    from populora_nb.operators import OPERATORS

    assert OPERATOR_NAMES == set(OPERATORS)
    for bad in ({"no_such_operator": 1.0}, {"dare": -1.0}, {"dare": 0.0}):
        with pytest.raises(ConfigError):
            load_config("tiny", {"evolution.operators": bad})
        with pytest.raises(ValueError):
            OperatorMix(bad)


def test_every_preset_says_in_one_line_what_its_runs_show():
    assert set(PRESET_SHOWS) == set(PRESETS)
    assert all(line.startswith(f"preset {name}: ") and "\n" not in line for name, line in PRESET_SHOWS.items())
    assert "nothing to show" in PRESET_SHOWS["tiny"]
