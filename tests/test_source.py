"""source.show (populora_nb.analysis.source): the package's code beside a by-hand stage, read at run
time, named by module and lines, without docstring and argument checks."""

import importlib
import inspect
import sys
from pathlib import Path

import pytest

from populora_nb import rewards, rl
from populora_nb.analysis import source


def test_an_excerpt_is_the_functions_own_lines_named_by_module_and_file():
    e = source.excerpt(rewards.teacher_reward)
    lines, first = inspect.getsourcelines(rewards.teacher_reward)
    assert e.name == "populora_nb.rewards.teacher_reward" and e.path == "populora_nb/rewards.py"
    assert (e.first, e.last) == (first, first + len(lines) - 1)
    assert "return 0.0 if rho == 0.0 else 1.0 - rho" in e.code  # the formula itself
    assert '"""' not in e.code and "# ... docstring left out ..." in e.code
    shown = source.show(rewards.teacher_reward, rewards.student_reward).data
    assert shown.count("```python") == 2 and "`populora_nb/rewards.py`, lines" in shown


def test_argument_checks_are_left_out_and_the_computation_kept():
    code = source.excerpt(rl.trr_plus_plus_advantages).code
    assert "raise ValueError" not in code and "# ... argument checks left out ..." in code
    assert "centred[idx] = g - g.mean()" in code and code.rstrip().endswith(
        "return (centred / (scale + eps)).to(torch.float32)"
    )


def test_the_source_is_read_when_shown_so_a_changed_package_shows_the_change(tmp_path, monkeypatch):
    (tmp_path / "pkg_demo").mkdir()
    module = tmp_path / "pkg_demo" / "formula.py"
    module.write_text('def reward(rho):\n    """The reward."""\n    return 1 - rho\n')
    (tmp_path / "pkg_demo" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    formula = importlib.import_module("pkg_demo.formula")
    assert "return 1 - rho" in source.show(formula.reward).data
    module.write_text('def reward(rho):\n    """The reward."""\n    return 0.5 - rho\n')
    formula = importlib.reload(formula)
    shown = source.show(formula.reward).data
    assert "return 0.5 - rho" in shown and "`pkg_demo.formula.reward` · `pkg_demo/formula.py`" in shown
    sys.modules.pop("pkg_demo.formula"), sys.modules.pop("pkg_demo")


def test_only_functions_are_shown():
    with pytest.raises(ValueError, match="at least one function"):
        source.show()
    with pytest.raises(TypeError, match="functions and methods"):
        source.show(rewards)  # a module


def test_every_by_hand_stage_of_notebooks_02_and_03_is_followed_by_its_code():
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    for name in ("02_azr_baseline.py", "03_population.py"):
        cells = notebooks.joinpath(name).read_text().split("# %%")
        stages = [i for i, c in enumerate(cells) if "step_tables." in c and "_table(" in c and "source.show" not in c]
        assert stages, name
        for i in stages:
            assert "source.show(" in cells[i + 1], f"{name}: no source.show after {cells[i].strip()[:60]!r}"
