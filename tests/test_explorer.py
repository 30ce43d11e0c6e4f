"""The explorer (populora_nb.analysis.explorer): its filters select what they say, one task reads in
full, a member's lineage goes back to its founders, and the record is plain HTML and a PNG."""

import matplotlib

matplotlib.use("Agg")  # noqa: E402  (tests draw off-screen)

from pathlib import Path

import pandas as pd
import pytest

from populora_nb.analysis.explorer import Explorer, ancestry, filter_tasks
from populora_nb.analysis.frames import load_frames
from studies.synthetic import write_synthetic_experiment


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    return load_frames(write_synthetic_experiment(tmp_path_factory.mktemp("exp"), n_steps=12, matches=True))


def test_each_filter_selects_what_it_says(frames):
    tasks = frames.tasks
    late = filter_tasks(tasks, steps=(5, 8), member="T1", kind="code_o", validity="valid", copy="new")
    assert len(late) and late["step"].between(5, 8).all() and (late["proposer"] == "T1").all()
    assert (late["kind"] == "code_o").all() and late["valid"].all() and (late["copy"] == "new").all()
    band = filter_tasks(tasks, rho=(0.2, 0.6))
    assert len(band) and band["rho"].between(0.2, 0.6).all()
    as_solver = filter_tasks(tasks, member="S2")
    assert len(as_solver) and (as_solver["solver"] == "S2").all()
    rejected = filter_tasks(tasks, validity="invalid: error")
    assert len(rejected) == (~tasks["valid"]).sum() and (rejected["reason"] == "error").all()
    assert len(filter_tasks(tasks)) == len(tasks)


def test_ancestry_goes_back_to_the_founders():
    lineage = pd.DataFrame(
        [
            {"child": "c1", "parents": ["T0"], "operator": "dare", "birth_step": 3},
            {"child": "c2", "parents": ["c1", "T2"], "operator": "layer_swap", "birth_step": 6},
        ]
    )
    births = ancestry(lineage, "c2")
    assert births["child"].tolist() == ["c2", "c1"] and births["generation"].tolist() == [0, 1]
    assert ancestry(lineage, "T0").empty  # a founder was born to no one


def test_the_explorer_follows_its_controls_and_records_html_and_a_figure(frames):
    ex = Explorer(frames)
    assert set(ex.selection()["run"]) == {"baseline", "population"}
    everything = ex.head_html()
    assert "baseline</b>: " in everything and "population</b>: " in everything
    ex.member.value = "T1"
    ex.kind.value = "code_i"
    assert set(ex.selection()["proposer"]) | set(ex.selection()["solver"]) >= {"T1"}
    assert ex.describe() == "steps 0–11, member T1, kind code_i"
    head = ex.head_html()
    assert head != everything and "baseline</b>: 0 of" in head  # the baseline has no member T1
    # the task list follows the filter; the detail reads the chosen task in full
    run, number = ex.task.value
    task = frames.tasks[(frames.tasks["run"] == run) & (frames.tasks["task"] == number)].iloc[0]
    assert task["proposer"] == "T1" and task["kind"] == "code_i"
    detail = ex.detail_html()
    assert f"task {number}" in detail and "solve attempts: " in detail and "of 8 attempts" in detail
    ex.lineage.value = ex.lineage.options[1]
    assert f"lineage of {ex.lineage.value}" in ex.detail_html()
    ex.step.value = 4
    fig = ex.figure()
    titles = [ax.get_title() for ax in fig.axes]
    assert "TrueSkill μ ± σ at step 4" in titles and "ρ per pair, steps 0–4" in titles


def test_the_explorer_shows_one_run_alone(frames):
    """Notebook 08's ``explore_run``: one run's rows only, its own heading, one row of panels."""
    ex = Explorer(frames.select(run="population"))
    assert set(ex.selection()["run"]) == {"population"}
    head = ex.head_html()
    assert "population</b>: " in head and "baseline" not in head
    assert {value[0] for _, value in ex.task.options} == {"population"}
    fig = ex.figure()
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]  # the colorbar has no title
    assert len(titles) == 3 and titles[0].startswith("population:") and not any("baseline" in t for t in titles)


def test_the_pair_panel_is_the_solve_matrix_of_the_sliders_window(frames):
    """The explorer's ρ per pair is `plots.plot_solve_matrix` over the `window` steps up to the slider:
    each pair that met there shows its mean ρ over the played tasks and how many they were."""
    ex = Explorer(frames.select(run="population"), window=3)
    ex.step.value = 6
    [ax] = [a for a in ex.figure().axes if a.get_title() == "ρ per pair, steps 4–6"]
    m = frames.matches
    played = m[(m["run"] == "population") & m["step"].between(4, 6) & m["valid"] & m["rho"].notna()]
    pairs = played.astype({"rho": float}).groupby(["teacher", "student"])["rho"]
    assert len(pairs) > 1 and {t.get_text() for t in ax.texts} == {
        f"{rho:.2f}\nn={n}" for rho, n in zip(pairs.mean(), pairs.size())
    }


def test_more_than_two_runs_are_refused_with_the_fix(tmp_path):
    for seed in (0, 1):
        write_synthetic_experiment(tmp_path / f"seed{seed}", n_steps=2)
    frames = load_frames(tmp_path)
    with pytest.raises(ValueError, match=r"frames.select\(seed=..., run=...\)"):
        Explorer(frames)
    Explorer(frames.select(seed=1))


@pytest.mark.slow  # executes notebook 08 in a kernel (~15 s)
def test_notebook_08_draws_the_explorer_figure_as_a_png(tmp_path, monkeypatch):
    """The figure cell's output is an image, not the text repr of a Figure nothing displayed."""
    import nbformat
    from nbclient import NotebookClient

    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    monkeypatch.setenv("POPULORA_PRESET", "tiny")  # the kernel inherits the environment
    monkeypatch.setenv("PYTHONPATH", str(notebooks.parent))  # and imports this checkout's package
    nb = nbformat.read(notebooks / "08_explore.ipynb", as_version=4)
    cwd = tmp_path / "notebooks"  # no ../runs beside it: the notebook explores its synthetic demo
    cwd.mkdir()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    [cell] = [c for c in nb.cells if c.cell_type == "code" and "fig = ex.figure()" in c.source]
    kinds = [set(o.get("data", {})) for o in cell.outputs]
    assert any("image/png" in k for k in kinds), cell.outputs
    shown = "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "") for o in cell.outputs)
    assert "<Figure size" not in shown
    # tiny has nothing to show, and the notebook says so first
    first = next(c for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", []))
    assert first.outputs[0]["text"].startswith("preset tiny: a random 2-layer model, so this run has nothing to show")
