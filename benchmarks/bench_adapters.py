"""Benchmark the population's batched multi-LoRA against peft, in one run.

    .venv/bin/python benchmarks/bench_adapters.py            # SmolLM2-135M, batch 8, 128 new tokens

Prints (a) a mixed 8-member batch over a single-member batch (target <= 1.2x), (b) LoRA-on over
base-only (target <= 1.15x), (c) the memory of 8 members over the base (target <= +10%), and
(d) ``train_step`` time for 8 sequences of 384 tokens, next to peft's unmerged single adapter and
its ``adapter_names`` mixed batch measured in the same run on an identical copy of the base.

Every generation makes exactly ``--new-tokens`` tokens per row (stop tokens off), greedy. Runs are
interleaved and repeated; medians are reported. The machine is shared, so besides wall time each
run's process CPU time is measured (``time.process_time``): with one thread (the default) it counts
only this process's work and is the stable measure; PASS/FAIL is judged on it, wall ratios are
printed beside it.

Measured on the 2-core CPU box (load ~3 from other jobs; torch 2.13, transformers 5.24, peft 0.21),
``--repeats 4``, SmolLM2-135M fp32, 8 members r=8 on q,k,v,o,gate,up,down, batch 8, 128 tokens:
    cpu s per batch: our loop base 14.7, ours one member 15.2, ours mixed 15.9; HF generate base
    14.8, peft one adapter 16.4, peft adapter_names mixed 28.9 (greedy rows identical to ours)
    (a) mixed / single 1.044x PASS   (peft: 1.76x; ours mixed is 1.82x faster than peft mixed)
    (b) LoRA on / base 1.032x PASS   (peft unmerged / HF base: 1.106x)
    (c) 8 members' factors +14.5% of the base FAIL: 8 x r x sum(d_in + d_out) fp32 is the floor;
        r <= 5 meets +10% on this 135M model; the paper's 7B r=32 shape gives +8.5%
    (d) train_step 8 x 384: 28.6 s (1 thread) / 16.0 s (2 threads), peak RSS 8.1 GiB; with
        gradient checkpointing 35.1 s / 18.9 s, 4.3 GiB
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from populora_nb.config import load_config
from populora_nb.model.adapters import Population, roles_for
from populora_nb.model.base import load_base
from populora_nb.model.batch import TrainBatch, left_pad
from populora_nb.model.batched_update import train_step
from populora_nb.model.decoding import decode
from populora_nb.rl import policy_gradient_loss

QUESTIONS = [
    "Write a Python function that reverses a string.",
    "What is 2 + 2? Explain.",
    "Explain recursion briefly.",
    "Name three prime numbers and say why they are prime.",
    "Write a haiku about the sea.",
    "What does f('abc') return for def f(a): return a[::-1]?",
    "List the planets of the solar system.",
    "Why is the sky blue?",
]
PAPER_LORA_PARAMS, PAPER_BASE_PARAMS = 80.7e6, 7.62e9  # Qwen2.5-7B, r=32, 7 modules x 28 layers (docs/design.md)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Sample the resident set every 20 ms in a thread; ``peak - start`` is what a block added."""

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def verdict(value: float, target: float) -> str:
    return "PASS" if value <= target else "FAIL"


def train_child(args: argparse.Namespace, gradient_checkpointing: bool) -> None:
    """(d): time ``train_step`` on 8 random sequences; prints one line for the parent."""
    cfg = load_config(args.preset, {"lora.init": "random", "lora.gradient_checkpointing": gradient_checkpointing})
    base = load_base(cfg)
    pop = Population.create(base, roles_for(1, 0), cfg.lora, seed=0)
    gen = torch.Generator().manual_seed(0)
    seq = torch.randint(100, len(base.tokenizer) - 100, (args.batch, args.train_len), generator=gen)
    comp = torch.zeros_like(seq)
    comp[:, -args.train_completion :] = 1
    batch = TrainBatch(seq, torch.ones_like(seq), comp, torch.randn(args.batch, generator=gen))
    loss_fn = lambda lp, b: policy_gradient_loss(lp, b.completion_mask, b.advantages)  # noqa: E731
    before = rss_bytes()
    times = []
    with PeakRSS() as peak:
        for _ in range(2):
            wall, cpu, _ = timed(lambda: train_step(pop, "T0", batch, loss_fn))
            times.append((wall, cpu))
    print(
        f"{statistics.median(t[0] for t in times):6.1f} s wall, {statistics.median(t[1] for t in times):6.1f} s cpu, "
        f"peak RSS {peak.peak / 2**30:.2f} GiB (+{(peak.peak - before) / 2**30:.2f} GiB over the loaded model)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="smoke", help="smoke: the real SmolLM2-135M; tiny: a quick dry run")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--train-len", type=int, default=384)
    ap.add_argument("--train-completion", type=int, default=128)
    ap.add_argument("--skip-peft", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a dry run: tiny preset, short sequences, 1 repeat")
    ap.add_argument("--train-only", choices=["off", "on"], help=argparse.SUPPRESS)  # child process for (d)
    args = ap.parse_args()
    if args.quick:  # explicit values travel to the train_step child processes below
        args.preset, args.repeats, args.new_tokens, args.train_len, args.train_completion = "tiny", 1, 16, 64, 16
    torch.set_num_threads(args.threads)
    if args.train_only:
        return train_child(args, gradient_checkpointing=args.train_only == "on")
    uptime = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    print(f"machine: {os.cpu_count()} cores, torch threads {args.threads}; load at start: {uptime()}")

    cfg = load_config(args.preset, {"lora.init": "random"})
    rss0 = rss_bytes()
    base = load_base(cfg)
    base_bytes = sum(p.numel() * p.element_size() for p in base.model.parameters())
    rss_base = rss_bytes()
    roles = roles_for(args.batch // 2, args.batch - args.batch // 2)
    pop = Population.create(base, roles, cfg.lora, seed=0)
    rss_pop = rss_bytes()
    tok = base.tokenizer
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in (QUESTIONS * args.batch)[: args.batch]
    ]
    ids, mask = left_pad(
        [tok(p, add_special_tokens=False)["input_ids"] for p in prompts], tok.pad_token_id, base.device
    )
    n_new, members = args.new_tokens, pop.ids()
    print(
        f"model {base.name}: {base.n_parameters / 1e6:.1f}M params, fp32; population {len(members)} members, "
        f"r={cfg.lora.rank}, alpha={cfg.lora.alpha}, {len(pop.multi.modules)} adapted modules; "
        f"batch {args.batch}, prompt lengths {int(mask.sum(1).min())}-{int(mask.sum(1).max())}, {n_new} new tokens"
    )

    runs = {
        "ours: base only (same decode loop)": lambda: decode(base.model, ids, mask, n_new, [], tok.pad_token_id)[0],
        "ours: one member on all rows": lambda: pop.generate(
            [members[0]] * args.batch, prompts, n_new, stop_token_ids=[]
        ),
        "ours: mixed, one member per row": lambda: pop.generate(members, prompts, n_new, stop_token_ids=[]),
    }
    hf_kw = dict(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=n_new,
        min_new_tokens=n_new,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
    )
    runs["HF generate: base only"] = lambda: base.model.generate(**hf_kw)
    if not args.skip_peft:
        from peft import PeftModel

        tmp = Path(tempfile.mkdtemp(prefix="bench_adapters_"))
        peft_base = load_base(cfg)  # peft injects layers into what it wraps: keep our base clean
        for i, m in enumerate(members):
            pop.save_member(m, tmp / f"m{i}")
        peft_model = PeftModel.from_pretrained(peft_base.model, str(tmp / "m0"), adapter_name="m0")
        for i in range(1, len(members)):
            peft_model.load_adapter(str(tmp / f"m{i}"), adapter_name=f"m{i}")
        peft_model.set_adapter("m0")
        peft_model.eval()
        names = [f"m{i}" for i in range(len(members))]
        runs["peft: one adapter, unmerged"] = lambda: peft_model.generate(**hf_kw)
        runs["peft: mixed, adapter_names"] = lambda: peft_model.generate(**hf_kw, adapter_names=names)

    results: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    outputs: dict[str, object] = {}
    for k, fn in runs.items():  # warm-up (also the output check), not timed
        with torch.no_grad():
            outputs[k] = fn()
    order = list(runs)
    for rep in range(args.repeats):
        for k in order[rep % len(order) :] + order[: rep % len(order)]:  # rotate so no run always goes first
            with torch.no_grad():
                wall, cpu, _ = timed(runs[k])
            results[k].append((wall, cpu))
        print(f"  repeat {rep + 1}/{args.repeats} done; load {uptime().split('load average:')[-1].strip()}")

    print(f"\n{f'generation (median of {args.repeats})':<40} {'wall s':>8} {'cpu s':>8} {'tok/s (cpu)':>12}")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in results.items()}
    for k, (w, c) in med.items():
        print(f"{k:<40} {w:8.2f} {c:8.2f} {args.batch * n_new / c:12.1f}")

    ours_mixed = outputs["ours: mixed, one member per row"]
    if "peft: mixed, adapter_names" in outputs:
        # HF's min_new_tokens bans EOS where our loop merely ignores it: compare the tokens before our first EOS.
        theirs = outputs["peft: mixed, adapter_names"][:, ids.shape[1] :].tolist()
        cut = [
            g.completion_ids.index(tok.eos_token_id) if tok.eos_token_id in g.completion_ids else n_new
            for g in ours_mixed
        ]
        same = sum(g.completion_ids[:c] == t[:c] for g, t, c in zip(ours_mixed, theirs, cut))
        print(
            f"greedy check: {same}/{args.batch} mixed-batch rows token-identical to peft's adapter_names output "
            f"(before EOS; {sum(cut)} tokens compared)"
        )

    def ratio(num: str, den: str) -> tuple[float, float]:
        return med[num][1] / med[den][1], med[num][0] / med[den][0]

    print("\nratios (cpu time; wall time in brackets)")
    a = ratio("ours: mixed, one member per row", "ours: one member on all rows")
    b = ratio("ours: one member on all rows", "ours: base only (same decode loop)")
    print(
        f"(a) mixed 8-member batch / single-member batch: {a[0]:.3f}x [{a[1]:.3f}x]  target <= 1.20x  "
        f"{verdict(a[0], 1.2)}"
    )
    print(
        f"(b) LoRA on / base only:                        {b[0]:.3f}x [{b[1]:.3f}x]  target <= 1.15x  "
        f"{verdict(b[0], 1.15)}"
    )
    if not args.skip_peft:
        pa = ratio("peft: mixed, adapter_names", "peft: one adapter, unmerged")
        pb = ratio("peft: one adapter, unmerged", "HF generate: base only")
        pm = ratio("peft: mixed, adapter_names", "ours: mixed, one member per row")
        print(f"    peft mixed / peft single:                   {pa[0]:.3f}x [{pa[1]:.3f}x]")
        print(f"    peft single unmerged / HF base:             {pb[0]:.3f}x [{pb[1]:.3f}x]")
        print(f"    peft mixed / ours mixed:                    {pm[0]:.3f}x [{pm[1]:.3f}x]")
    hf = ratio("ours: base only (same decode loop)", "HF generate: base only")
    print(f"    our decode loop / HF generate (base):       {hf[0]:.3f}x [{hf[1]:.3f}x]")

    factor_bytes = pop.multi.nbytes()
    member_bytes = factor_bytes // len(members)
    c = factor_bytes / base_bytes
    print(
        f"\n(c) memory: base parameters {base_bytes / 2**20:.0f} MiB (process RSS +{(rss_base - rss0) / 2**20:.0f} MiB)"
    )
    print(
        f"    {len(members)} members' factors {factor_bytes / 2**20:.1f} MiB = +{100 * c:.1f}% of the base "
        f"(RSS +{(rss_pop - rss_base) / 2**20:.0f} MiB)  target <= +10%  {verdict(c, 0.10)}"
    )
    print(
        f"    one member {member_bytes / 2**20:.2f} MiB = {100 * member_bytes / base_bytes:.2f}%; the floor is "
        f"n_members x r x sum(d_in + d_out) x 4 bytes, so <= +10% needs "
        f"r <= {int(0.10 * base_bytes / factor_bytes * cfg.lora.rank)} here"
    )
    print(
        f"    transient while a mixed batch decodes (B <= N: rows' factors gathered once): "
        f"{args.batch * member_bytes / 2**20:.1f} MiB"
    )
    print(f"    AdamW moments when every member has trained: +{2 * factor_bytes / 2**20:.1f} MiB")
    paper = 8 * PAPER_LORA_PARAMS / PAPER_BASE_PARAMS
    print(f"    at the paper's shape (Qwen2.5-7B, r=32, 8 members): +{100 * paper:.1f}%")

    # (d) in fresh processes, so each peak RSS is that step's own and not what earlier runs left.
    print(
        f"\n(d) train_step, {args.batch} x {args.train_len} tokens ({args.train_completion} scored), fp32, "
        f"one member, {args.threads} thread(s), median of 2 steps in a fresh process"
    )
    for gc in ("off", "on"):
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--train-only",
                gc,
                "--preset",
                args.preset,
                "--batch",
                str(args.batch),
                "--threads",
                str(args.threads),
                "--train-len",
                str(args.train_len),
                "--train-completion",
                str(args.train_completion),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        print(f"    gradient checkpointing {gc:<3}: " + child.stdout.strip().splitlines()[-1])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\nload at end: {uptime()}; peak process RSS {rss:.2f} GiB")


if __name__ == "__main__":
    main()
