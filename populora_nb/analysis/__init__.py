"""Reading runs: curriculum complexity and coverage, compute, the seed protocol, plots, the dashboard
and the report. Nothing here trains; everything reads a run directory's records, found by `runs` and
read through `frames`, and each module's docstring says what it reads and why.
"""
