"""Benchmarks: loading the local data, generating answers, scoring them with evalplus semantics.

  * `loaders`: find the data (`resolve_data_dir`) and read HumanEval+ / MBPP+ / LiveCodeBench /
    math files into `Problem`s.
  * `evalplus_release`: HumanEval+ / MBPP+ with no data folder, as evalplus gets them (its cache,
    ``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH``, a download).
  * `programs`: the program a code completion holds (extraction, sanitizing).
  * `output_shim`: how a program's outputs cross the sandbox boundary as literals.
  * `evalplus_scoring`, `lcb_scoring`: code answers checked in the verifier's sandbox.
  * `math_answers`: math answers checked with math-verify in a worker process.
  * `benchmarks`: prompts, `score_many`, and `evaluate` (models x benchmarks, resumable).
  * `report`: the table and the bar chart.
  * `runs`: the base, the baseline and every member of an experiment, from its checkpoints.

Import from those modules; this package imports nothing. The benchmark names and files
(`config.BENCHMARK_FILES`) live in the config, which checks ``eval.benchmarks`` against them.
"""
