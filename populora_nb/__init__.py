"""populora_nb: PopuLoRA (arXiv 2605.16727) as a Jupyter-first research package.

LoRA adapters on one frozen base model co-evolve as teachers, who propose verifiable Python
tasks, and students, who solve them. The algorithm reads top to bottom in the flat modules here
(config → tasks, prompts, buffers → stages → rewards, rl → matchmaking → operators, lowrank,
evolution → loop, state → experiment); the machinery lives in subpackages: `verify` (the sandbox),
`model` (base model and adapters), `evaluation` (benchmarks), `analysis` (curves, report). The
README's "Where each paper concept lives" maps the paper to modules.

Importing this package loads nothing heavy: torch and the model load with the modules that need them,
pandas with `populora_nb.analysis.frames` (`load_frames`: a run's records as tables).
"""

__version__ = "0.1.0"
