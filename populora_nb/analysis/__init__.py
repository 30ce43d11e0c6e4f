"""Reading runs: curriculum complexity and coverage, compute, the seed protocol, plots, the dashboard
and the report. Nothing here trains; everything reads a run directory's records.

  runs              find_run_dirs / find_runs: the one run finder
  frames            load_frames: a run, an experiment, a seed protocol or a sweep as pandas tables,
                    and the analyses' one reader of the records (records, load_tasks, step_mean)
  explorer          ipywidgets filters over those tables that leave a static record (notebook 08)
  complexity        per-program metrics of what proposers wrote, the collapse detector
  coverage          problem-space coverage at equal sample sizes (rarefaction)
  compute           tokens generated and trained, per run and per adapter
  protocol          several seeds: intervals and the baseline/population comparison
  figures           save_figure and what every plot shares; every plot returns a Figure
  plots             figures of a run's records (solve rates, ratings, matches, lineage)
  complexity_plots  figures of complexity and coverage
  step_tables       tables of what each stage of one step made (the notebooks' step by hand)
  dashboard         the live view of a running run, and its one-line step summary
  report            report.md / report.html of an experiment
  synthetic         made-up run directories, for a demo without a model and for tests
"""
