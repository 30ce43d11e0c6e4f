"""Reading runs: curriculum complexity and coverage, compute, what each logged series means (`series`),
plots, the dashboard and the report (the seed protocol over seeds is a study: `studies.protocol`).
Nothing here trains; everything reads a run directory's records, found by `runs` and read through
`frames`, and each module's docstring says what it reads and why.
"""
