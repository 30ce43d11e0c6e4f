# %% [markdown]
# # 01 · The verifier: where every reward comes from
#
# **Goal:** see the sandboxed verifier accept the seed task in its three kinds (deduction `code_o`,
# abduction `code_i`, induction `code_f`), reject one example of each invalid-task reason, refuse
# the injections that fool AZR's executor, and measure what the hardening costs: validations per
# second against AZR's unsafe executor, and how long the programs themselves run.
#
# A population multiplies the proposers looking for holes in the verifier, so it has two layers:
# a static policy checked on the program's syntax tree (allowed modules, no `eval`/`open`, no dunder
# attributes), and a sandbox where each run is its own short-lived process (forked from a warmed
# zygote that sits in its own user, mount, PID and network namespaces with an empty read-only root;
# no capabilities, no new processes, CPU/memory/file-size limits). The policy is a fast filter with
# a clear reason; the namespaces are the boundary, and they need no root.

# %% tags=["parameters"]
import os

preset = os.environ.get("POPULORA_PRESET", "smoke")
out_dir = None  # set by `make run`: figures are saved here as PNG
workers = 2
n_programs = None  # programs in the throughput batch; None: 40 for tiny, else 200

# %%
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt

from populora_nb.analysis.figures import save_figure
from populora_nb.config import describe, load_config
from populora_nb.verify import INVALID_REASONS, TASK_POLICY, Proposal, Task, Verifier
from populora_nb.verify.unsafe_azr import unsafe_azr_validate_many

config = load_config(preset)
n_programs = n_programs or (40 if config.preset == "tiny" else 200)
print(describe(config, "verifier"))
print(f"workers here: {workers}; batch: {n_programs}")
verifier = Verifier(timeout_s=config.verifier.timeout_s, memory_mb=config.verifier.memory_mb, workers=workers)
verifier.start()
print("sandbox isolation:", verifier.isolation)  # as the zygotes report it: "namespaces" where the kernel allows

# %% [markdown]
# ## The seed task in three kinds
# AZR grows everything from the identity program and the input `"Hello world"`. What to look for:
# each kind validates, outputs are canonical reprs, the right answer passes and the wrong one fails.
# `code_f` shows the first half of its pairs to the solver and judges the answer on the hidden half.

# %%
identity = "def f(a):\n    return a"
seed = {
    "code_o": verifier.validate("code_o", identity, ['"Hello world"']),
    "code_i": verifier.validate("code_i", identity, ['"Hello world"']),
    "code_f": verifier.validate(
        "code_f",
        identity,
        ['"Hello world"', "1", "[1, 2]", "(1.5, None)", "{'a': 1}", "b'x'"],
        "Return the argument unchanged.",
    ),
}
answers = {
    "code_o": ("'Hello world'", "'hello world'"),
    "code_i": ("'Hello world'", "'Hello'"),
    "code_f": ("def f(x):\n    return x", "def f(x):\n    return str(x)"),
}
for kind, task in seed.items():
    right, wrong = answers[kind]
    print(f"{kind}: outputs {task.outputs}  shown {task.n_shown}/{len(task.inputs)}")
    print(f"   right {right!r}: {verifier.check(task, right)}   wrong {wrong!r}: {verifier.check(task, wrong)}")

# %% [markdown]
# ## One proposal per rejection reason
# What to look for: each proposal is rejected for exactly the reason it was written to break.
# `crash` (a process that dies without reporting) needs `os`, which the policy bans, so it is shown
# below with the static layer switched off; `sandbox_error` is the verifier's own failure, never the
# model's.

# %%
examples = {  # reason -> (kind, program, inputs, message)
    "syntax": ("code_o", "def f(a)\n    return a", ("1",), ""),
    "no_f": ("code_o", "def g(a):\n    return a", ("1",), ""),
    "program_too_long": ("code_o", identity + "\n#" + "x" * 25_000, ("1",), ""),
    "banned_import": ("code_o", "import random\ndef f(a):\n    return random.random()", ("1",), ""),
    "banned_call": ("code_o", "def f(a):\n    return eval(a)", ("'1+1'",), ""),
    "banned_attribute": ("code_o", "def f(a):\n    return a.__class__.__subclasses__()", ("1",), ""),
    "no_message": ("code_f", identity, ("1", "2"), ""),
    "too_few_inputs": ("code_f", identity, ("1",), "identity"),
    "duplicate_inputs": ("code_f", identity, ("1", "[2]", "1"), "identity"),
    "input_too_long": ("code_o", identity, ("'" + "x" * 3000 + "'",), ""),
    "input_not_literal": ("code_o", identity, ("list(range(3))",), ""),
    "runtime_error": ("code_o", "def f(a):\n    return a[10]", ("[1]",), ""),
    "timeout": ("code_o", "def f(a):\n    while True:\n        a += 1", ("0",), ""),
    "memory": ("code_o", "def f(a):\n    return [0] * 10 ** 10", ("0",), ""),
    "output_not_literal": ("code_o", "def f(a):\n    return (x for x in a)", ("[1]",), ""),
    "output_too_long": ("code_o", "def f(a):\n    return 'x' * 10_000", ("0",), ""),
    "nondeterministic": ("code_o", "def f(a):\n    return ''.join(set(a))", ("'determinism'",), ""),
}
verdicts = verifier.validate_many([Proposal(*spec) for spec in examples.values()])
for (reason, _), verdict in zip(examples.items(), verdicts):
    print(f"{reason:20s} -> {verdict.reason:20s} {verdict.detail[:70]}")

# %% [markdown]
# ## Injections that pass AZR's executor
# AZR pastes answers into code, so the abduction answer `'zz') or (True` makes its check
# `f('zz') or (True) == gold` true, and a program whose result has an always-true `__eq__` passes
# induction. Here answers are parsed as literals and results must be exact literal types.

# %%
cheats = [
    (seed["code_i"], "'zz') or (True"),
    (seed["code_o"], "__import__('os').system('touch /tmp/populora_pwned')"),
    (seed["code_f"], "class Yes:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Yes()"),
    (seed["code_f"], "import os\ndef f(x):\n    return x"),
]
cheat_verdicts = verifier.judge_many(cheats)
for (task, answer), verdict in zip(cheats, cheat_verdicts):
    print(f"{task.kind}: {answer.splitlines()[0][:50]!r:55s} passed={verdict.passed} ({verdict.status})")

# %% [markdown]
# ## Hostile programs with the static layer off
# The policy already rejects all of these (`banned_import`). To show the OS layer on its own, this
# verifier allows `os`, `socket` and `subprocess` and skips the in-process stubs. What to look for:
# every attack ends as a status, the files and the parent survive.

# %%
open_policy = replace(
    TASK_POLICY,
    allowed_modules=TASK_POLICY.allowed_modules | {"os", "socket", "subprocess"},
    banned_modules=frozenset(),
    banned_names=frozenset(),
    disable_dangerous=False,
    guard_imports=False,
)
victim = Path(f"/tmp/populora-victim-{os.getpid()}")
victim.mkdir(exist_ok=True)
(victim / "keep.txt").write_text("keep")
hostile = {
    "fork bomb": "import os\ndef f(p):\n    while True:\n        os.fork()",
    "overwrite a file": "def f(p):\n    with open(p + '/keep.txt', 'w') as fh:\n        fh.write('pwned')",
    "delete a file": "import os\ndef f(p):\n    os.remove(p + '/keep.txt')",
    "open a socket": "import socket\ndef f(p):\n    socket.create_connection(('1.1.1.1', 80), timeout=1)",
    "kill the parent": "import os\ndef f(p):\n    os.kill(os.getppid(), 9)",
    "os._exit": "import os\ndef f(p):\n    os._exit(0)",
    "spawn a shell": "import subprocess\ndef f(p):\n    subprocess.run(['rm', '-rf', p])",
}
with Verifier(timeout_s=1.0, policy=open_policy) as exposed:
    contained = exposed.run_many([(program, [repr(str(victim))]) for program in hostile.values()])
for name, (result,) in zip(hostile, contained):
    print(f"{name:18s} {result.status:14s} {result.detail[:60]}")
print("files afterwards:", sorted(p.name for p in victim.iterdir()), (victim / "keep.txt").read_text())

# %% [markdown]
# ## What hardening costs
# Each hardened validation is two confined runs in two processes with different `PYTHONHASHSEED`;
# AZR's executor execs the program in one worker and calls `f` twice, with no limits. What to look
# for: the ratio. On a machine shared with other jobs the absolute numbers swing a lot; the
# benchmark script (`benchmarks/bench_verifier.py`) also prints CPU time per validation.

# %%
programs = [
    ("def f(xs):\n    return sorted(xs)[::-1]", "[3, 1, 2, 9]"),
    ("from collections import Counter\ndef f(s):\n    return Counter(s).most_common(2)", "'mississippi'"),
    ("def f(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a", "30"),
    ("import re\ndef f(s):\n    return re.sub('[aeiou]', '*', s).upper()", "'hello world'"),
    (
        "from itertools import permutations\n"
        "def f(s):\n    return sorted(set(''.join(p) for p in permutations(s)))[:5]",
        "'abcd'",
    ),
]
batch = [
    Proposal("code_o", f"{p}\n# variant {i}", (x,))
    for i, (p, x) in ((i, programs[i % len(programs)]) for i in range(n_programs))
]
verifier.validate_many(batch[:4])  # warm the pool
start = time.perf_counter()
hardened_results = verifier.validate_many(batch)
hardened_rate = n_programs / (time.perf_counter() - start)
with ProcessPoolExecutor(max_workers=1) as pool:
    unsafe_azr_validate_many(batch[:4], pool)
    start = time.perf_counter()
    unsafe_results = unsafe_azr_validate_many(batch, pool)
    unsafe_rate = n_programs / (time.perf_counter() - start)
print(
    f"hardened ({workers} workers): {hardened_rate:.0f}/s   AZR-style (1 worker, exec): {unsafe_rate:.0f}/s   "
    f"ratio {hardened_rate / unsafe_rate:.2f}"
)

fig, ax = plt.subplots(figsize=(5, 3))
ax.bar(
    [f"hardened\n({workers} workers, 2 runs)", "AZR-style\n(1 worker, exec)"],
    [hardened_rate, unsafe_rate],
    color=["tab:blue", "tab:gray"],
)
ax.set_ylabel("validations / s")
ax.set_title("Throughput on the same programs")
fig.tight_layout()
if out_dir:
    save_figure(fig, Path(out_dir) / "01_verifier_throughput.png", close=False)
plt.show()

# %% [markdown]
# ## How long the programs run
# The time `f` itself takes inside the sandbox (the slower of the two runs): a few microseconds for
# typical tasks, far below the per-process cost, which is why the pool forks from a warmed zygote.

# %%
seconds = [r.meta["seconds"] for r in hardened_results if isinstance(r, Task)]
fig, ax = plt.subplots(figsize=(5, 3))
ax.hist([s * 1e6 for s in seconds], bins=30, color="tab:blue")
ax.set_xlabel("execution time of f per validation (µs)")
ax.set_ylabel("programs")
fig.tight_layout()
if out_dir:
    save_figure(fig, Path(out_dir) / "01_verifier_exec_times.png", close=False)
plt.show()
verifier.close()

# %% [markdown]
# ## Verify it is real
# The evidence, printed; tests/test_verifier.py and tests/test_isolation.py assert them.

# %%
print(f"isolation: {verifier.isolation.level}")  # "none" refuses to start unless opted in
print(f"seed kinds valid: {all(isinstance(t, Task) for t in seed.values())}")
print(f"code_o seed output: {seed['code_o'].outputs}")
for (reason, _), verdict in zip(examples.items(), verdicts):
    print(f"  expected {reason:<22} got {getattr(verdict, 'reason', verdict)}")
# crash: the containment cell below; wrong_input_count: the loop's check against tasks.code_f_inputs
shown = set(examples) | {"crash", "sandbox_error", "wrong_input_count"}
print(f"reasons not shown above: {sorted(set(INVALID_REASONS) - shown) or 'none'}")
print(f"injections passed: {sum(v.passed for v in cheat_verdicts)}")
print(f"/tmp/populora_pwned exists: {os.path.exists('/tmp/populora_pwned')}")
print(f"attacks contained: {[r[0].status for r in contained]}; keep.txt reads {(victim / 'keep.txt').read_text()!r}")
shutil.rmtree(victim)
same = [r.outputs for r in hardened_results] == unsafe_results
print(f"hardened and AZR-style outputs identical: {same}; rates {hardened_rate:.0f}/s and {unsafe_rate:.0f}/s")
