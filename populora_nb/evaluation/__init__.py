"""Benchmarks: loading the local data, generating answers, scoring them with evalplus semantics.

`loaders` reads HumanEval+/MBPP+/LiveCodeBench/math data; `scoring` checks code answers in the
verifier's sandbox; `math_answers` checks math answers with math-verify; `benchmarks` runs a
policy over a benchmark; `runs` evaluates the base, the baseline and every member of a run.
"""
