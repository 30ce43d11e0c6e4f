"""Checking model-written programs: AZR's validity rules, the worker pool that runs them, and the sandbox.

`verifier` holds the rules a proposal must pass (and the `Verifier` the loop calls); `sandbox` is
the worker script that executes untrusted code under `isolation` (Linux namespaces, no root) and
`static_policy` (the AST screen and allow-lists). `unsafe_azr` is AZR's own unsandboxed executor,
kept only to measure agreement with it.
"""
