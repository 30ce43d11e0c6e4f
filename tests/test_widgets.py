"""The dashboard and the figures a reader meets: a static record that survives the kernel, panels
that apply, whole-number steps, empty panels that say why, human labels, a legend entry per kind."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # noqa: E402  (tests draw off-screen)

import matplotlib.pyplot as plt
import nbformat
import pytest
from matplotlib.figure import Figure

from populora_nb.analysis import complexity_plots, plots
from populora_nb.analysis.dashboard import Dashboard, step_summary, verdict
from populora_nb.analysis.figures import save_figure
from populora_nb.evolution import Lineage
from studies import protocol

REPO = Path(__file__).resolve().parents[1]
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def fake_run(run_dir: Path, agent: str = "population", steps: int = 3, valid: bool = True) -> Path:
    """Records in the loop's format: each proposer writes one task per kind, only code_o valid."""
    run_dir.mkdir(parents=True, exist_ok=True)
    members = (
        [("agent", "agent")]
        if agent == "baseline"
        else ([(f"T{i}", "teacher") for i in range(2)] + [(f"S{i}", "student") for i in range(2)])
    )
    metrics, tasks, matches = [], [], []
    for step in range(steps):
        for m, role in members:
            row = {"step": step, "member": m, "role": role}
            if role in ("teacher", "agent"):
                row.update(
                    {
                        "teacher/n_proposed": 3,
                        "teacher/valid_rate": 1 / 3 if valid else 0.0,
                        "reward/propose_mean": -0.5,
                    }
                )
                for kind in ("code_o", "code_i", "code_f"):
                    ok = valid and kind == "code_o"
                    tasks.append(
                        {
                            "step": step,
                            "proposer": m,
                            "kind": kind,
                            "solver": "S0",
                            "valid": ok,
                            "solve_rate": 0.25 if ok else None,
                            "reason": None if ok else "syntax",
                            "program": "def f(a):\n    return a",
                            "inputs": ["1"],
                            "outputs": ["1"],
                        }
                    )
                    if agent == "population":
                        matches.append(
                            {
                                "step": step,
                                "teacher": m,
                                "student": "S" + m[1],
                                "kind": kind,
                                "valid": ok,
                                "rho": 0.25 if ok else None,
                            }
                        )
            if role in ("student", "agent") and valid:
                row.update(
                    {
                        "student/solve_rate": 0.25,
                        "student/n_fresh_attempts": 4,
                        "solve_rate/code_o": 0.25,
                        "reward/solve_mean": -0.2,
                    }
                )
            if agent == "population":
                row.update({"rating/mu": 25.0 + step * (1 if role == "teacher" else -1), "rating/sigma": 8.0 - step})
            metrics.append(row)
    for name, rows in (("metrics", metrics), ("tasks", tasks), ("matches", matches)):
        (run_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def _integer_ticks(ax) -> bool:
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    return bool(ticks) and all(float(t).is_integer() for t in ticks)


# ---- text --------------------------------------------------------------------------------------


def test_step_summary_counts_from_zero_and_gives_counts_with_rates():
    rows = [
        {
            "step": 4,
            "member": "agent",
            "role": "agent",
            "teacher/n_proposed": 4,
            "teacher/valid_rate": 0.25,
            "student/solve_rate": 0.5,
            "student/n_fresh_attempts": 8,
            "solve_rate/code_o": 0.5,
        }
    ]
    line = step_summary(4, rows, ("code_o", "code_f"), total=5)
    assert line.startswith("step 4 (5/5 done)")  # the last step of five is step 4, and 5 are done
    assert "valid 1/4 proposals" in line and "solve rate 0.50 (4/8 fresh attempts)" in line
    assert "code_f -" in line  # a kind with no task is named, not dropped


def test_verdict_reads_the_same_everywhere():
    assert verdict({"valid": True, "solve_rate": 0.0, "reason": None}) == "valid, solve rate 0.00"
    assert verdict({"valid": False, "solve_rate": None, "reason": "syntax"}) == "rejected: syntax"


# ---- figures ----------------------------------------------------------------------------------


def test_baseline_dashboard_has_no_trueskill_panel_and_whole_step_ticks(tmp_path):
    fig = Dashboard(fake_run(tmp_path / "b", "baseline", steps=2), total_steps=5).figure()
    titles = [ax.get_title() for ax in fig.axes]
    assert not any("TrueSkill" in t or "Ratings" in t for t in titles), titles
    assert all(_integer_ticks(ax) for ax in fig.axes)
    fig = Dashboard(fake_run(tmp_path / "p"), total_steps=3).figure()
    assert any(ax.get_title() == "Ratings" for ax in fig.axes)
    assert all(_integer_ticks(ax) for ax in fig.axes)


def test_a_kind_without_a_valid_task_is_named_in_its_panel_not_in_the_legend(tmp_path):
    run = fake_run(tmp_path / "p")  # only code_o is ever valid
    fig = plots.plot_solve_rates({"population": run}, kinds=("code_o", "code_i", "code_f"))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["code_o"]  # a legend entry is a line drawn
    assert "no data for code_i, code_f: no valid task" in _texts(fig.axes[0]).replace("\n", " ")


def _texts(ax) -> str:
    return " ".join(t.get_text() for t in ax.texts)


def test_solve_matrix_shows_each_pairs_mean_rho_over_played_tasks_and_blanks_the_rest(tmp_path):
    """A cell is the mean ρ of the tasks its student attempted (valid, with a ρ), with their count;
    a pair that met only on an invalid task, or never met, stays blank."""
    run = tmp_path / "population"
    run.mkdir()
    rows = [
        {"step": 0, "teacher": "t0", "student": "s0", "valid": True, "rho": 0.5},
        {"step": 1, "teacher": "t0", "student": "s0", "valid": True, "rho": 1.0},
        {"step": 0, "teacher": "t0", "student": "s1", "valid": False, "rho": None},
        {"step": 0, "teacher": "t1", "student": "s1", "valid": True, "rho": 0.0},
    ]
    (run / "matches.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ax = plots.plot_solve_matrix(run).axes[0]
    rho = ax.images[0].get_array()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["t0", "t1"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["s0", "s1"]
    assert rho[0, 0] == pytest.approx(0.75) and rho[1, 1] == 0.0
    assert rho.mask[0, 1] and rho.mask[1, 0]  # only an invalid task; never met
    assert "0.75\nn=2" in [t.get_text() for t in ax.texts]


def test_empty_panels_say_why_inside_the_axes(tmp_path):
    run = fake_run(tmp_path / "p", valid=False)
    ax = plots.plot_solve_matrix(run).axes[0]
    assert "none of 18 proposals was valid" in _texts(ax)
    ax = plots.plot_solve_rates({"population": run}).axes[0]
    assert "no valid proposal to solve yet" in _texts(ax)
    base = fake_run(tmp_path / "b", "baseline", valid=False)
    assert "baseline" in _texts(plots.plot_solve_matrix(base).axes[0])
    assert "single agent" in _texts(plots.plot_ratings(base).axes[0])


def test_axes_use_human_labels_not_metric_keys(tmp_path):
    ax = plots.plot_step_metric({"baseline": fake_run(tmp_path / "b", "baseline")}, "teacher/valid_rate").axes[0]
    assert ax.get_ylabel() == "valid-proposal rate" and "/" not in ax.get_title()


def test_rating_end_labels_do_not_overlap(tmp_path):
    run = fake_run(tmp_path / "p")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:  # every member ends on the same rating: the labels must still be apart
        r["rating/mu"] = 25.0
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fig = plots.plot_ratings(run)
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in fig.axes[0].texts]
    assert len(boxes) == 4
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def test_lineage_axis_ends_with_the_run_in_whole_steps():
    births = [Lineage("T2", ("T0",), "svd_structured", 2, "teacher", "T1")]
    ax = plots.plot_lineage(births, end_step=3).axes[0]
    assert ax.get_xlim() == (0, 3) and _integer_ticks(ax)


def test_every_plot_returns_its_figure_under_a_name_no_other_module_uses(tmp_path):
    modules = (plots, complexity_plots, protocol)
    names = [name for m in modules for name in vars(m) if name.startswith("plot_") and callable(getattr(m, name))]
    assert len(names) == len(set(names)), names
    run = fake_run(tmp_path / "p")
    births = [Lineage("T2", ("T0",), "svd_structured", 2, "teacher", "T1")]
    for draw in (
        lambda ax: plots.plot_solve_rates({"p": run}, ax=ax),
        lambda ax: plots.plot_step_metric({"p": run}, "teacher/valid_rate", ax=ax),
        lambda ax: plots.plot_ratings(run, ax=ax),
        lambda ax: plots.plot_solve_matrix(run, ax=ax),
        lambda ax: plots.plot_valid_rate_per_teacher(run, ax=ax),
        lambda ax: plots.plot_invalid_reasons(run, ax=ax),
        lambda ax: plots.plot_rewards(run, ax=ax),
        lambda ax: plots.plot_lineage(births, ax=ax),
        lambda ax: protocol.plot_seed_band([tmp_path], "teacher/valid_rate", ax=ax),
    ):
        alone = draw(None)
        fig, ax = plt.subplots()
        assert isinstance(alone, Figure) and draw(ax) is fig
        plt.close("all")
    path = save_figure(plots.plot_rewards(run), tmp_path / "figures" / "rewards.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


# ---- the record a notebook keeps ------------------------------------------------------------


def _execute(cells: list[str], cwd: Path) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.mark.slow  # starts a kernel (~5 s)
def test_dashboard_leaves_figures_and_table_as_plain_outputs(tmp_path):
    run = fake_run(tmp_path / "p", steps=3)
    cells = [
        "from populora_nb.analysis.dashboard import Dashboard",
        # a live run: records appear step by step (cut back to step 0 first), update after each
        f"import json, pathlib\nrun = pathlib.Path({str(run)!r})\n"
        "full = {n: (run / f'{n}.jsonl').read_text().splitlines() for n in ('metrics', 'tasks', 'matches')}\n"
        "for n, lines in full.items():\n    (run / f'{n}.jsonl').write_text('')\n"
        "dash = Dashboard(run, 3)\ndash.show()\n"
        "for step in range(3):\n"
        "    for n, lines in full.items():\n"
        "        mine = [l for l in lines if json.loads(l)['step'] == step]\n"
        "        with open(run / f'{n}.jsonl', 'a') as fh: fh.write(''.join(l + '\\n' for l in mine))\n"
        "    dash.update(step, [json.loads(l) for l in full['metrics'] if json.loads(l)['step'] == step])\n"
        "dash.finish()",
        # the same cell rerun on the finished run
        "again = Dashboard(run, 3)\nagain.show()",
    ]
    nb = _execute(cells, tmp_path)
    for cell in nb.cells[1:]:
        mimes = [m for o in cell.outputs for m in o.get("data", {})]
        assert WIDGET_MIME not in mimes, "a widget's state dies with the kernel"
        assert "image/png" in mimes, "the figure must be a plain PNG output"
        html = " ".join(o["data"].get("text/html", "") for o in cell.outputs if "data" in o)
        assert "<table>" in html and "valid, solve rate 0.25" in html
    assert "run complete (3/3)" in str(nb.cells[1].outputs)
    assert "run complete (3/3), showing saved records" in str(nb.cells[2].outputs)


def test_run_shows_one_progress_line_from_the_start(tmp_path, capsys):
    from scripted import ScriptedPolicy

    from populora_nb.config import load_config
    from populora_nb.loop import run
    from populora_nb.model.sources import bundled_tokenizer

    cfg = load_config("tiny", {"run.agent": "baseline", "run.steps": 2})
    run(cfg, tmp_path / "b", policy=ScriptedPolicy(bundled_tokenizer(cfg.model)))
    # on stdout: JupyterLab paints stderr as a pink error box under the cell
    out, err = capsys.readouterr()
    assert out.index("loading the model") < out.index("step 0 running") < out.index("step 1 running")
    assert "run complete" in out and "2/2" in out and "running" not in err
    run(cfg, tmp_path / "b", policy=ScriptedPolicy(bundled_tokenizer(cfg.model)))  # finished: nothing to do
    assert "run complete" in capsys.readouterr().out


# ---- the executed notebook, exported --------------------------------------------------------


@pytest.mark.slow  # runs notebook 03 in the tiny preset (~1-2 min on 2 cores)
def test_executed_notebook_03_exports_figures_and_tables_not_widget_reprs(tmp_path):
    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks")
    nb_path = tmp_path / "notebooks" / "03_population.ipynb"
    env = {**os.environ, "POPULORA_PRESET": "tiny"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--inplace",
            "--ExecutePreprocessor.timeout=600",
            str(nb_path),
        ],
        check=True,
        env=env,
        cwd=nb_path.parent,
    )
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(nb_path)], check=True, env=env)
    page = nb_path.with_suffix(".html").read_text()
    for repr_text in ("VBox(children", "IntProgress", "HBox(children", "Error displaying widget"):
        assert repr_text not in page, repr_text
    nb = nbformat.read(nb_path, as_version=4)
    dash_cell = next(c for c in nb.cells if c.cell_type == "code" and "Dashboard(" in c.source)
    mimes = [m for o in dash_cell.outputs for m in o.get("data", {})]
    assert "image/png" in mimes and WIDGET_MIME not in mimes
    assert "run complete (3/3)" in str(dash_cell.outputs)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
