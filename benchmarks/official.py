"""Saved completions scored by the official evaluator, evalplus 0.3.1, inside OS isolation, so a
user can publish official numbers: ``python benchmarks/official.py EXPERIMENT_DIR [--preset P] [--set K=V]``
after ``python -m populora_nb eval EXPERIMENT_DIR`` (it runs that first when nothing is saved). It
writes ``eval/evalplus/``, whose official rows the experiment report then shows. A cross-check and
a benchmark beside the package, not part of a run: the package never imports it.

Official evalplus runs each candidate with `untrusted_check` in a plain multiprocessing child whose
only guard is `reliability_guard`'s stubs: not a sandbox (its own docstring says so). Model output
never runs outside ours, so here every candidate runs in `official_sandbox.py` (its docstring lists
the walls, in the order they go up) in a minimal read-only root rather than the whole filesystem
made read-only: nothing of the machine (home directories, other runs, the host's /proc) is even
readable. Where namespaces are unavailable it refuses, unless the caller opts in
(`allow_unsafe_no_isolation`, as the verifier's `verifier.allow_unsafe_no_isolation`).

The program judged for each completion is the project's extraction (`programs.evalplus_program`,
evalplus' sanitizer rules), so both scorers judge the same code; `report.py` labels every number
with the scorer that made it (`EvalResult.scorer`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

from populora_nb.config import load_config, load_dir_config  # noqa: E402
from populora_nb.errors import UserInputError  # noqa: E402
from populora_nb.evaluation.benchmarks import EvalResult, Score, _finish, _result_path, load_results  # noqa: E402
from populora_nb.evaluation.loaders import Problem, benchmark_path, load_benchmark  # noqa: E402
from populora_nb.evaluation.programs import evalplus_program  # noqa: E402
from populora_nb.evaluation.report import write_report  # noqa: E402
from populora_nb.evaluation.runs import evaluate_experiment  # noqa: E402
from populora_nb.presets import parse_override  # noqa: E402
from populora_nb.verify import isolation  # noqa: E402
from populora_nb.verify.zygote import IsolationUnavailable, SandboxError, spawn_sandbox  # noqa: E402

EVALPLUS_VERSION = "0.3.1"
OFFICIAL_SCORER = f"evalplus {EVALPLUS_VERSION} official"
OFFICIAL_DATASET = {"humanevalplus": "humaneval", "mbppplus": "mbpp"}
"""Our benchmark name -> evalplus' dataset name (the Mini and LiveCodeBench sets have no official path here)."""
OVERRIDE_ENV = {"humaneval": "HUMANEVAL_OVERRIDE_PATH", "mbpp": "MBPP_OVERRIDE_PATH"}
SANDBOX_SCRIPT = Path(__file__).with_name("official_sandbox.py")
NEEDED_MODULES = ("evalplus", "numpy", "psutil", "wget", "tempdir", "appdirs")
"""evalplus' evaluation path and data loaders; `pip install evalplus==0.3.1 --no-deps` brings only the first."""
INSTALL_HINT = (
    "pip install evalplus==0.3.1 --no-deps wget==3.2 tempdir==0.7.1 appdirs==1.4.4 "
    "(--no-deps: evalplus' own requirements pull in its code-generation stack, openai/transformers/datasets/..., "
    "which scoring never uses)"
)
SUBDIR = "evalplus"
"""Under an experiment's eval/: the official results, table.md and table.json."""


class EvalplusMissing(UserInputError):
    """The official scorer asked for, and the official evaluator is not installed (or another version)."""


def require_evalplus() -> None:
    """Raise EvalplusMissing, saying how to install it, unless evalplus 0.3.1 and its loaders import."""
    missing = [m for m in NEEDED_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise EvalplusMissing(
            f"the official scorer needs the official evaluator ({', '.join(missing)} missing): {INSTALL_HINT}"
        )
    version = importlib.metadata.version("evalplus")
    if version != EVALPLUS_VERSION:
        raise EvalplusMissing(
            f"the official scorer is pinned to evalplus {EVALPLUS_VERSION}, found {version}: {INSTALL_HINT}"
        )


@dataclass
class OfficialScores:
    """Per completion [base passed, base and plus passed, status]; what the sandboxes reported."""

    verdicts: list[tuple[bool, bool, str]]
    isolation: list[dict] = field(default_factory=list)


def _read_only_paths() -> list[str]:
    """What the sandbox's root holds: the standard library and site-packages of this interpreter (not
    sys.path, which may name the working directory or a checkout) and the system libraries."""
    import sysconfig

    dirs = sysconfig.get_paths()
    paths = [dirs[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    paths += ["/usr", "/lib", "/lib64", "/etc/ld.so.cache"]
    return sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})


def _mountpoint(read_only: Sequence[str]) -> str:
    for d in ("/tmp", "/mnt", "/media", "/srv", "/opt"):
        if os.path.isdir(d) and not any(p == d or p.startswith(d + "/") for p in read_only):
            return d
    raise SandboxError("no directory to build the sandbox's root on (/tmp, /mnt, ... all hold Python)")


def _run_sandbox(cfg: dict, env: dict, jobs: list[dict], timeout_s: float | None) -> dict:
    proc = spawn_sandbox([sys.executable, "-I", "-B", str(SANDBOX_SCRIPT), json.dumps(cfg)], env)
    try:
        out, _ = proc.communicate(json.dumps(jobs).encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"official evalplus sandbox ran past {timeout_s} s; killed") from None
    finally:  # killed on any way out
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = out.decode(errors="replace").splitlines()
    if not lines:
        raise SandboxError(f"official evalplus sandbox died without an answer (exit {proc.returncode})")
    reply = json.loads(lines[-1])
    if "error" in reply:
        if reply.get("kind") == "isolation":
            raise IsolationUnavailable(
                f"no OS-level isolation for the official evaluator here ({reply['error']}); refusing to run "
                f"model-written code under evalplus' reliability_guard alone. To run it anyway, set "
                f"verifier.allow_unsafe_no_isolation=true (score_official(allow_unsafe_no_isolation=True))."
            )
        raise SandboxError(f"official evalplus sandbox: {reply['error']}")
    if len(reply["verdicts"]) != len(jobs):
        raise SandboxError(f"official evalplus sandbox answered {len(reply['verdicts'])} of {len(jobs)} verdicts")
    return reply


def score_official(
    problems: Sequence[Problem],
    completions: Sequence[str],
    data_dir: str | os.PathLike | None = None,
    programs: Sequence[str] | None = None,
    workers: int = 2,
    memory_mb: int = 6144,
    timeout_s: float | None = None,
    allow_unsafe_no_isolation: bool = False,
    namespaces: bool = True,
) -> OfficialScores:
    """Judge each completion of a HumanEval+ / MBPP+ problem with official evalplus 0.3.1 (fast
    check, base then plus, as `evalplus.evaluate` does) in `workers` isolated sandboxes (the tasks
    split between them; each computes its tasks' ground truth with evalplus' `trusted_exec`).
    `programs` skips the extraction (trusted programs, e.g. tests' references). `namespaces=False`
    skips the namespace layer, as on a kernel without user namespaces: refused unless
    `allow_unsafe_no_isolation`. `memory_mb` caps each sandbox process's address space (evalplus
    sets 4 GiB itself per check, so it must be above that)."""
    require_evalplus()
    if len(problems) != len(completions):
        raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
    if memory_mb < 4200:
        raise ValueError("memory_mb must be >= 4200: evalplus sets a 4 GiB limit per check itself")
    bad = sorted({p.benchmark for p in problems if p.benchmark not in OFFICIAL_DATASET})
    if bad:
        raise ValueError(f"official evalplus scores {', '.join(OFFICIAL_DATASET)} only, not {', '.join(bad)}")
    if programs is None:
        programs = [evalplus_program(p, c) for p, c in zip(problems, completions)]
    if not problems:
        return OfficialScores([])
    env = {"PYTHONIOENCODING": "utf-8", "TMPDIR": "/tmp", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env["HOME"] = "/tmp"  # evalplus' loaders name a cache dir there; with the overrides nothing is written
    for bench in sorted({p.benchmark for p in problems}):
        env[OVERRIDE_ENV[OFFICIAL_DATASET[bench]]] = str(benchmark_path(bench, data_dir).resolve())
    read_only = _read_only_paths()
    cfg = {
        "isolation_py": isolation.__file__,
        "owner_pid": os.getpid(),
        "namespaces": namespaces,
        "allow_unsafe_no_isolation": allow_unsafe_no_isolation,
        "read_only": read_only,
        "mountpoint": _mountpoint(read_only),
        "tmpfs": {"/tmp": 256, "/dev/shm": 64},
        "memory_mb": memory_mb,
    }
    tasks = sorted({p.id for p in problems})
    n = max(1, min(workers, len(tasks)))
    share = {t: i % n for i, t in enumerate(tasks)}  # whole tasks per sandbox: ground truth once each
    groups = [[i for i, p in enumerate(problems) if share[p.id] == k] for k in range(n)]

    def judge(k: int) -> dict:
        uid = 200_000 + (os.getpid() * 64 + k) % 1_000_000_000  # as root: a uid of its own per sandbox
        jobs = [
            {"dataset": OFFICIAL_DATASET[problems[i].benchmark], "task_id": problems[i].id, "solution": programs[i]}
            for i in groups[k]
        ]
        return _run_sandbox(dict(cfg, uid=uid), env, jobs, timeout_s)

    with ThreadPoolExecutor(n) as pool:
        replies = list(pool.map(judge, range(n)))
    verdicts: list[tuple[bool, bool, str]] = [(False, False, "")] * len(problems)
    for group, reply in zip(groups, replies):
        for i, (base, plus, why) in zip(group, reply["verdicts"]):
            verdicts[i] = (bool(base), bool(plus), str(why))
    return OfficialScores(verdicts, [r["isolation"] for r in replies])


def rescore_results(
    eval_dir: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    workers: int = 2,
    allow_unsafe_no_isolation: bool = False,
    say=print,
) -> list[EvalResult]:
    """The HumanEval+ / MBPP+ results `evaluate` saved in `eval_dir`, their completions judged again
    by official evalplus into ``eval_dir/evalplus/`` (same file names, `scorer` = OFFICIAL_SCORER,
    the isolation in `settings`); the other benchmarks' results are returned as they are (project
    scorer). Results already rescored from the same completions are loaded, not recomputed."""
    out = Path(eval_dir) / SUBDIR
    results = []
    for saved in load_results(Path(eval_dir)):
        if saved.benchmark not in OFFICIAL_DATASET or not saved.problems:
            results.append(saved)
            continue
        completions = [c for row in saved.problems for c in row["completion"]]
        digest = hashlib.sha256(json.dumps(completions).encode()).hexdigest()
        path = _result_path(out, saved.model, saved.benchmark)
        if path.is_file():
            old = EvalResult(**json.loads(path.read_text()))
            if old.settings.get("completions_sha256") == digest:
                say(f"[eval] {saved.model} / {saved.benchmark}: official scores loaded from {path}")
                results.append(old)
                continue
        by_id = {p.id: p for p in load_benchmark(saved.benchmark, data_dir)}
        missing = [row["id"] for row in saved.problems if row["id"] not in by_id]
        if missing:
            raise UserInputError(f"{saved.benchmark}: {len(missing)} saved problems not in the data, e.g. {missing[0]}")
        problems = [by_id[row["id"]] for row in saved.problems]
        expanded = [by_id[row["id"]] for row in saved.problems for _ in row["completion"]]
        scored = score_official(
            expanded, completions, data_dir, workers=workers, allow_unsafe_no_isolation=allow_unsafe_no_isolation
        )
        scores = [Score(plus, why, base_passed=base) for base, plus, why in scored.verdicts]
        settings = dict(saved.settings, completions_sha256=digest, isolation=scored.isolation)
        result = _finish(saved.model, saved.benchmark, problems, completions, scores, settings, {})
        result = replace(result, scorer=OFFICIAL_SCORER, source=saved.source)
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(result), indent=1))
        say(f"[eval] {saved.model} / {saved.benchmark}: official evalplus pass@1 {result.score:.3f}")
        results.append(result)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Rescore an experiment's saved HumanEval+ / MBPP+ completions into ``eval/evalplus/`` and print its table."""
    parser = argparse.ArgumentParser(
        description="official evalplus 0.3.1, sandboxed, on an experiment's saved HumanEval+ / MBPP+ completions"
    )
    parser.add_argument("experiment_dir", type=Path, help="a directory holding baseline/ and population/ runs")
    parser.add_argument("--preset", default=None, help="change the saved config to this preset's fields")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="config field"
    )
    args = parser.parse_args(argv)
    try:
        require_evalplus()  # one line saying how to install it, before any model loads
        overrides = dict(parse_override(o) for o in args.overrides)
        saved = args.experiment_dir / "config.yaml"
        config = load_dir_config(saved, args.preset, overrides)[0] if saved.is_file() else None
        config = config or load_config(args.preset, overrides)
        eval_dir = args.experiment_dir / "eval"
        if not eval_dir.is_dir() or not any(r.benchmark in OFFICIAL_DATASET for r in load_results(eval_dir)):
            evaluate_experiment(config, args.experiment_dir, require_data=True)  # completions first
        results = rescore_results(
            eval_dir,
            config.eval.data_dir,
            workers=config.verifier.n_workers,
            allow_unsafe_no_isolation=config.verifier.allow_unsafe_no_isolation,
        )
    except (UserInputError, FileNotFoundError, IsolationUnavailable) as e:
        print(f"official: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    write_report(results, eval_dir / SUBDIR)
    print((eval_dir / SUBDIR / "table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
