"""Benchmarks: loading the local data, generating answers, scoring them with evalplus semantics.

`loaders` (and `evalplus_release`, `humaneval` without a data folder) read the data into `Problem`s;
`programs` extracts the program of a code completion, `output_shim` carries its outputs out of the
sandbox as literals, `evalplus_scoring` / `lcb_scoring` check code answers in the verifier's sandbox,
`math_answers` math answers with math-verify; `benchmarks` prompts, scores and runs `evaluate`
(models x benchmarks, resumable), `runs` builds an experiment's models from its checkpoints, `report`
draws the table. Import from those modules; this package imports nothing. The benchmark names and
files (`config.BENCHMARK_FILES`) live in the config, which checks ``eval.benchmarks`` against them.
"""
