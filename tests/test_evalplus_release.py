"""HumanEval+ / MBPP+ with no benchmark folder, the evalplus way: the override variables, evalplus'
cache, a download (here from a local HTTP server) and, offline, one line saying what to set."""

import functools
import gzip
import http.server
import threading
from pathlib import Path

import pytest

from populora_nb.config import load_config
from populora_nb.evaluation import evalplus_release as er
from populora_nb.evaluation import loaders
from populora_nb.evaluation import runs as eval_runs
from populora_nb.evaluation.benchmarks import evaluate
from populora_nb.evaluation.loaders import BenchmarkDataError, load_benchmark

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "benchmarks"
FILES = {
    "humanevalplus": FIXTURES / "humanevalplus" / "HumanEvalPlus.jsonl",
    "mbppplus": FIXTURES / "mbppplus" / "MbppPlus.jsonl",
}
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens, as on a machine without network


@pytest.fixture
def no_folder(monkeypatch, tmp_path):
    """No data folder, no override variable, an empty evalplus cache, and no network."""

    def missing(data_dir=None):
        raise BenchmarkDataError("benchmark data directory /nowhere does not exist")

    for var in (loaders.DATA_ENV, "HUMANEVAL_OVERRIDE_PATH", "MBPP_OVERRIDE_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(loaders, "resolve_data_dir", missing)
    monkeypatch.setattr(eval_runs, "available_benchmarks", lambda d=None: missing(d))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(er, "GITHUB", CLOSED)
    return tmp_path


CONFIG = load_config("tiny", {"eval.benchmarks": ["humanevalplus", "mbppplus"], "eval.limit": 1})


def test_the_override_variables_are_read_and_scored(no_folder, monkeypatch):
    monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", str(FILES["humanevalplus"]))
    monkeypatch.setenv("MBPP_OVERRIDE_PATH", str(FILES["mbppplus"]))
    chosen, note = eval_runs.benchmarks_to_run(CONFIG)
    assert chosen == ["humanevalplus", "mbppplus"] and str(FILES["mbppplus"]) in note
    problems = {b: load_benchmark(b, limit=1)[0] for b in chosen}
    assert all(p.plus_inputs for p in problems.values())  # the plus tests, not HumanEval's base ones

    def reference(p, prompts):  # the canonical solution as a model's answer: it must pass
        return [f"```python\n{p.question}{p.canonical_solution}\n```"] * len(prompts)

    results = {}
    for bench, p in problems.items():
        (results[bench],) = evaluate({"m": functools.partial(reference, p)}, [bench], limit=1)
    assert {b: r.score for b, r in results.items()} == {"humanevalplus": 1.0, "mbppplus": 1.0}
    assert results["mbppplus"].source == str(FILES["mbppplus"])


def test_a_missing_override_file_is_named(no_folder, monkeypatch):
    monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", str(no_folder / "nope.jsonl"))
    with pytest.raises(er.ReleaseUnavailable, match=r"\$HUMANEVAL_OVERRIDE_PATH=.*nope\.jsonl is not a file"):
        load_benchmark("humanevalplus")


def test_offline_one_line_says_what_to_set_then_humaneval_base_tests(no_folder):
    with pytest.raises(er.ReleaseUnavailable) as e:
        er.fetch_release("humanevalplus")
    line = str(e.value)
    assert "\n" not in line and "HUMANEVAL_OVERRIDE_PATH=" in line and "POPULORA_DATA" in line
    assert str(er.cache_path("humanevalplus")) in line and not er.cache_path("humanevalplus").exists()
    chosen, note = eval_runs.benchmarks_to_run(CONFIG)
    assert "MBPP_OVERRIDE_PATH=" in note and "HUMANEVAL_OVERRIDE_PATH=" in note
    if loaders.packaged_humaneval() is not None:
        assert chosen == ["humaneval"]


def test_download_into_evalplus_cache_from_a_local_server(no_folder):
    release = er.RELEASES["humanevalplus"]
    site = no_folder / "site"
    served = site / f"{release.name.lower()}_release" / "releases" / "download" / release.version
    served.mkdir(parents=True)
    (served / f"{release.name}.jsonl.gz").write_bytes(gzip.compress(FILES["humanevalplus"].read_bytes()))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = er.fetch_release("humanevalplus", base_url=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert path == no_folder / "cache" / "evalplus" / "HumanEvalPlus-v0.1.10.jsonl"  # evalplus' own name
    assert path.read_bytes() == FILES["humanevalplus"].read_bytes()
    assert er.fetch_release("humanevalplus") == path  # cached: no network needed again
    assert loaders.benchmark_path("humanevalplus") == path  # and the loader finds it there
    assert load_benchmark("humanevalplus", limit=1)[0].plus_inputs
