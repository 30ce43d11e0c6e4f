"""Time per child of every evolution operator on Qwen2.5-7B LoRA shapes (CPU, float32).

The target: under 1 s per child for every operator at r = 32 on 2 cores.

    .venv/bin/python benchmarks/bench_evolution.py            # r = 16, 32, 64; 28 layers
    .venv/bin/python benchmarks/bench_evolution.py --quick    # r = 32; 4 layers (a fast check)

Prints a markdown table of seconds per child: wall time (best of --repeats after one warm-up) and
the process's CPU time for that same call (summed over threads). On a shared machine the wall time
includes waiting for the cores, so the load average before and after is printed too, and OpenMP's
wait policy defaults to PASSIVE: spinning threads whose partner has been descheduled inflated
2-thread times up to 20x here (DARE 25 s instead of ~1 s) at a load of 5 on 2 cores. Set
OMP_WAIT_POLICY=ACTIVE to measure torch's default on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede the torch import (OpenMP reads it once)

import torch  # noqa: E402

from populora_nb.operators import OPERATORS, PAPER_IDS, arity, synthetic_factors  # noqa: E402

# Qwen2.5-7B: hidden 3584, 4 KV heads × 128 = 512, MLP 18944, 28 layers. (d_in, d_out) per module.
QWEN25_7B_MODULES = {
    "self_attn.q_proj": (3584, 3584),
    "self_attn.k_proj": (3584, 512),
    "self_attn.v_proj": (3584, 512),
    "self_attn.o_proj": (3584, 3584),
    "mlp.gate_proj": (3584, 18944),
    "mlp.up_proj": (3584, 18944),
    "mlp.down_proj": (18944, 3584),
}


def qwen25_7b_shapes(num_layers: int = 28) -> dict[str, tuple[int, int]]:
    return {f"model.layers.{i}.{m}": shape for i in range(num_layers) for m, shape in QWEN25_7B_MODULES.items()}


def time_operator(name: str, parents: tuple, repeats: int) -> tuple[float, float]:
    """(wall, cpu) seconds of the fastest of `repeats` calls, after one warm-up call."""
    fn = OPERATORS[name]
    best = (float("inf"), float("inf"))
    for attempt in range(repeats + 1):  # the first call warms up the allocator and kernels
        generator = torch.Generator().manual_seed(attempt)
        wall, cpu = time.perf_counter(), time.process_time()
        child = fn(*parents[: arity(name)], generator=generator)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        del child
        if attempt > 0 and wall < best[0]:
            best = (wall, cpu)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="r = 32 only and 4 layers")
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per operator (best is kept)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--operators", nargs="+", default=list(OPERATORS))
    args = parser.parse_args()
    ranks, layers = ([32], 4) if args.quick else (args.ranks, args.layers)
    torch.set_num_threads(args.threads)

    shapes = qwen25_7b_shapes(layers)
    load_before = os.getloadavg()
    results: dict[int, dict[str, tuple[float, float]]] = {}
    for r in ranks:
        generator = torch.Generator().manual_seed(0)
        parents = tuple(synthetic_factors(shapes, r, generator=generator) for _ in range(2))
        params = sum(p.A.numel() + p.B.numel() for p in parents[0].values())
        print(f"r={r}: {len(shapes)} modules, {params / 1e6:.1f}M LoRA parameters per member", flush=True)
        results[r] = {name: time_operator(name, parents, args.repeats) for name in args.operators}
        del parents
    load_after = os.getloadavg()

    print(
        f"\nseconds per child (wall / cpu), float32 CPU, {args.threads} threads "
        f"(OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}), {layers} layers, best of {args.repeats}"
    )
    print("| operator | " + " | ".join(f"r={r} wall | r={r} cpu" for r in ranks) + " |")
    print("|---|" + "---|---|" * len(ranks))
    for name in args.operators:
        cells = " | ".join(f"{results[r][name][0]:.3f} | {results[r][name][1]:.3f}" for r in ranks)
        label = name if PAPER_IDS[name] == name else f"{PAPER_IDS[name]} {name}"  # controls have no paper id
        print(f"| {label} | {cells} |")
    print(
        f"load average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; "
        f"after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; cpus: {os.cpu_count()}"
    )


if __name__ == "__main__":
    main()
