"""Reading runs: curriculum complexity and coverage, compute, the seed protocol, plots, the dashboard
and the report. Nothing here trains; everything reads a run directory's records.
"""
