import pytest
import yaml

from populora_nb.config import PRESETS, ConfigError, load_config, parse_override, save_config


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
