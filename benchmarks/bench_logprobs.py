"""Peak memory per scored token of the trainer's log-probs at a 152k-vocabulary head, before and after the fused head.

The log-prob code once materialised (tokens × vocab) float32 tensors several times (≈ 2.4 MB per
scored token at Qwen's 151,936-token vocabulary), as much as a 1.5B model's activations. This script
runs the same forward + backward of a policy-gradient-shaped loss through an output head of that
vocabulary (random weights, hidden size 256: the head's (V, D) weight is fixed memory, what a scored
token costs does not depend on D beyond D floats) in three implementations, side by side in one run:

* ``before #29``: the head's full (B, L, V) logits, then ``completion_logprobs_before_29`` (a verbatim
  copy of the old function, kept below as the reference);
* ``chunked, from logits``: the same logits, then today's ``rl.completion_logprobs`` (rows a chunk at a
  time under activation checkpointing), what a model without a separable head still takes;
* ``fused head``: today's training path, ``rl.completion_logprobs_from_hidden`` on the hidden states
  (``model.scoring``): the head is applied a chunk of rows at a time, so no logits are ever whole.

How memory is measured, and why this way: every (variant, token count) runs in a fresh subprocess
(nothing cached by one variant's allocator can lower another's number) with glibc's
``MALLOC_MMAP_THRESHOLD_`` fixed at 64 KiB, so every tensor buffer is its own mmap and is returned
to the kernel when freed. After building the head and the inputs the child resets the kernel's
peak-RSS counter (``/proc/self/clear_refs`` ← 5), runs forward + backward, and reads ``VmHWM``: the
kernel's exact high-water mark of resident memory (not a sampled one), minus the RSS before. torch's
allocations bypass Python's allocator, so ``tracemalloc`` would not see them. "Per scored token" is
the slope between two token counts, (peak₂ − peak₁) / (N₂ − N₁), so fixed costs (one chunk's
buffers, the interpreter) cancel; the head's weight and the hidden states are built before the
reset, so the fused head's slope is what its backward keeps per token (the hidden states' gradient,
D floats), which needs a wider span of N to rise above page granularity.

    python benchmarks/bench_logprobs.py           # V = 151,936, D = 256, N = 128 and 512 tokens (fused: 4,096)
    python benchmarks/bench_logprobs.py --quick   # V = 32,000, N = 96 and 192 (fused: 768), a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.utils.checkpoint

from populora_nb.rl import completion_logprobs, completion_logprobs_from_hidden, logprob_temperature

VARIANTS = ("before #29", "chunked, from logits", "fused head")


def completion_logprobs_before_29(
    logits: torch.Tensor, input_ids: torch.Tensor, completion_mask: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """The reference: ``rl.completion_logprobs`` as it was before the fused head (its helper inlined)."""
    b, t = completion_mask.bool().nonzero(as_tuple=True)
    row = t - 1 - (input_ids.shape[1] - logits.shape[1])
    selected = logits[b, row].float() / logprob_temperature(temperature)  # (N, V) float32
    taken = input_ids[b, t]  # (N,)
    token_logp = selected.gather(1, taken[:, None]).squeeze(1) - torch.logsumexp(selected, dim=-1)
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=logits.device)
    return out.index_put((b, t), token_logp)


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def child(variant: str, tokens: int, vocab: int, hidden_size: int, rows: int) -> None:
    """One measurement: prints a JSON line {bytes: peak over the RSS before, cpu_s}."""
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden_size, vocab, bias=False).requires_grad_(False)  # frozen, as under LoRA
    per_row = tokens // rows
    length = per_row + 1  # one prompt token, then the scored completion
    hidden = torch.randn(rows, length, hidden_size).requires_grad_(True)  # stands in for the LoRA'd backbone
    input_ids = torch.randint(0, vocab, (rows, length))
    mask = torch.zeros(rows, length, dtype=torch.bool)
    mask[:, 1:] = True
    weights = torch.randn(rows, length)  # a loss that is not a plain sum, as the advantages make it
    # torch imports its compiler stack on a process's first checkpoint (~150 MiB, seconds), once per
    # process whatever the token count: done before the measurement, in every variant alike.
    torch.utils.checkpoint.checkpoint(torch.sin, torch.ones(1, requires_grad=True), use_reentrant=False).backward()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    before = status_kib("VmRSS")
    start = time.process_time()
    if variant == "fused head":
        lp = completion_logprobs_from_hidden(hidden, head, input_ids, mask, temperature=0.7)
    elif variant == "chunked, from logits":
        lp = completion_logprobs(head(hidden), input_ids, mask, temperature=0.7)
    else:
        lp = completion_logprobs_before_29(head(hidden), input_ids, mask, temperature=0.7)
    (lp * weights).sum().backward()
    cpu_s = time.process_time() - start  # CPU seconds (all threads): wall time is noise on a shared machine
    assert hidden.grad is not None and bool(hidden.grad.abs().sum() > 0)
    print(json.dumps({"bytes": (status_kib("VmHWM") - before) * 1024, "cpu_s": cpu_s}))


def measure(variant: str, tokens: int, args: argparse.Namespace) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": str(args.threads)}
    cmd = [sys.executable, __file__, "--child", variant, "--child-tokens", str(tokens), "--vocab", str(args.vocab)]
    cmd += ["--hidden", str(args.hidden), "--rows", str(args.rows)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{variant} at N = {tokens} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=151936, help="Qwen2.5's vocabulary")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--rows", type=int, default=4, help="sequences; the tokens are split evenly among them")
    ap.add_argument("--tokens", type=int, nargs=2, default=[128, 512], help="two scored-token counts (N1 N2)")
    ap.add_argument(
        "--fused-tokens",
        type=int,
        default=4096,
        help="the fused head's N2: its slope is a few KiB per token, so it needs a wider span to rise above noise",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a smoke test: V = 32,000, N = 96 and 192 (fused: 768)")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)  # one measurement, in a subprocess
    ap.add_argument("--child-tokens", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.child_tokens, args.vocab, args.hidden, args.rows)
    if args.quick:  # above one chunk (rl.CHUNK_ROWS), so each slope is per token, not per chunk
        args.vocab, args.tokens, args.fused_tokens = 32000, [96, 192], 768
    n1, n2 = args.tokens
    print(
        f"head: vocabulary {args.vocab:,}, hidden {args.hidden}, float32, {args.rows} rows; CPU, {args.threads} threads"
    )
    print("forward + backward of the completion log-probs of N scored tokens; peak RSS over the RSS before")
    print()
    print("| variant | N1 | peak at N1 | N2 | peak at N2 | per scored token | CPU s at N2 |")
    print("|---|---|---|---|---|---|---|")
    slopes = {}
    for variant in VARIANTS:
        hi = args.fused_tokens if variant == "fused head" else n2
        a, b = measure(variant, n1, args), measure(variant, hi, args)
        slopes[variant] = (b["bytes"] - a["bytes"]) / (hi - n1)
        print(
            f"| {variant} | {n1:,} | {a['bytes'] / 2**20:,.1f} MiB | {hi:,} | {b['bytes'] / 2**20:,.1f} MiB | "
            f"{slopes[variant] / 2**10:,.2f} KiB | {b['cpu_s']:.1f} |"
        )
    print()
    print(f"for scale, one float32 row of logits at this vocabulary: 4 B x V = {4 * args.vocab / 2**10:,.0f} KiB")
    old, new = slopes["before #29"], slopes["fused head"]
    floor = 4096 / (args.fused_tokens - n1)  # one page over the span: below it a slope is not resolved
    ratio = f"{old / new:,.0f}x" if new > floor else f"> {old / floor:,.0f}x (fused slope below one page over the span)"
    print(f"before #29 / fused head, bytes per scored token: {ratio}")
    print(f"before #29 / chunked from logits, bytes per scored token: {old / slopes['chunked, from logits']:,.1f}x")


if __name__ == "__main__":
    main()
