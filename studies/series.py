"""What each series the seed protocol reports means: the keys `studies.protocol_series` reads or
derives from a run directory, each with a one-line meaning in ``HEADLINE`` (the logged keys' labels
are the plots', `populora_nb.analysis.plots.LABELS`). Every series is a
number per logged step, except coverage, which is a number per window of steps.

From ``metrics.jsonl`` (per step, the mean over the members that logged the key: ``frames.per_step``):
  teacher/valid_rate      share of proposals the verifier accepted (AZR's format/validity reward gate)
  student/solve_rate      ρ of fresh, matched proposals (not buffer tasks): the learnability signal
                          AZR's proposer reward is built on; the collapse story is ρ → 1
  reward/propose_mean     the proposer's (teacher's) mean reward, what its policy gradient climbs
  lengths/propose_chars   characters per proposal: a response-length proxy (AZR and the paper
                          track response length as the model's "thinking" growing or shrinking)
From ``tasks.jsonl`` (``frames.load_tasks``, its ``measured`` rows: valid code_o/code_i programs a
proposer newly wrote; copies (``populora_nb.copies``) and code_f programs, which the proposer was handed, excluded):
  band/share              per step, the share of played tasks (valid, fresh, attempted by the matched
                          solver: ρ recorded) with 0 < ρ < 1: the only tasks AZR's learnability reward
                          1 − ρ pays for. Collapse is this share falling as tasks drift to ρ = 1 (or 0);
                          the arms race keeps it up. A share, so playing more tasks does not score higher
  copies/copy_rate        per step, the share of valid proposals that copy a shown reference, a seed,
                          a warm-up example or an earlier program of the run: read beside the curves
                          below, which count only new programs (copying rising cannot make them fall)
  complexity/<field>      per step, the mean over that step's newly written programs of each field of
                          ``complexity.COMPLEXITY_FIELDS``: the four curves of the paper's Fig. 4, whose
                          fall with ρ → 1 is the collapse and whose growth is the arms race. Start and
                          end are fixed step windows with a floor on the program count
                          (`studies.windows`)
  coverage/ngrams         in the first and in the last ``window`` steps with task records: the
                          expected number of distinct node-type n-grams (``coverage.ngram_features``)
                          among n written programs (code_o and code_i). n is ONE common size for every
                          run, seed and window compared (the smallest window's program count), so a run
                          that writes more programs but no more diverse ones does not score higher (the
                          population proposes once per teacher, the baseline once). n-grams rather than
                          shapes: almost every program has its own normalised shape, so shape counts at
                          equal n saturate at n. Windows and exact rarefaction: `studies.coverage_windows`
  coverage/signatures     the same, of distinct I/O type signatures of the written programs, e.g.
                          ``(list[int], str) -> int``: one per program whatever its length, so programs
                          that only grow longer do not score higher, as they can on n-grams
From ``tasks.jsonl``, new tasks told from repeats (`populora_nb.copies`: a repeat is the same task as its
student meets it, met before in the run):
  repeats/repeat_rate      per step, the share of valid tasks that are repeats: the proposers replaying
                           their past (or the seeds, the warm-up, a shown reference)
  band/share_non_repeats   per step, the share of played non-repeat tasks with 0 < ρ < 1: the band
                           share over tasks not met before (a repeat's student may have met it)
  rho/non_repeats          per step, the mean ρ of played non-repeat tasks: difficulty of new tasks
  rho/repeats              per step, the mean ρ of played repeats: tasks met before (a seed, a
                           warm-up example, an earlier task), which may or may not have been played
From ``metrics.jsonl`` at difficulty-probe events (``populora_nb.probe``; none when probe.every = 0):
  probe/rho               the frozen starting adapter's solve rate of the valid tasks each proposer
                          wrote for the same fixed prompts under the same draws: difficulty on one
                          scale for both runs (a weaker student cannot lower it); start and end are
                          the first and the last event; a run floor-bound or with fewer than
                          ``studies.probe_floor.MIN_PROBE_TASKS`` valid probe tasks gives no value
  probe/valid_rate        the share of the fixed prompts answered with a valid task
From ``metrics.jsonl`` ``rating/mu`` (population only; the baseline plays no matches):
  rating/mu_spread        per step, the standard deviation (ddof = 0: the members present) of TrueSkill
                          μ within each role, averaged over the roles: a growing spread means the
                          population stratifies (some teachers better than others), near 0 that no
                          member of a role beats another. Within a role, because the gap between the
                          roles says who wins the matches, not whether a role stratifies.
"""

from __future__ import annotations

from collections.abc import Mapping

from populora_nb.analysis.complexity import COMPLEXITY_FIELDS
from populora_nb.analysis.plots import LABELS

BAND_KEY = "band/share"
"""Share of played tasks with 0 < ρ < 1 per step (the module docstring says why)."""
REPEAT_KEY = "repeats/repeat_rate"
BAND_NON_REPEATS_KEY = "band/share_non_repeats"
RHO_NON_REPEATS_KEY = "rho/non_repeats"
RHO_REPEATS_KEY = "rho/repeats"
REPEAT_SERIES: Mapping[str, str] = {
    REPEAT_KEY: "repeat rate of valid tasks",
    BAND_NON_REPEATS_KEY: "share of non-repeat tasks in 0 < ρ < 1",
    RHO_NON_REPEATS_KEY: "ρ of non-repeat tasks",
    RHO_REPEATS_KEY: "ρ of repeated tasks",
}
METRIC_SERIES: Mapping[str, str] = {
    k: LABELS[k] for k in ("teacher/valid_rate", "student/solve_rate", "reward/propose_mean", "lengths/propose_chars")
}
COMPLEXITY_SERIES: Mapping[str, str] = {
    "complexity/ast_depth": "AST depth of newly written programs",
    "complexity/cc_total": "McCabe complexity (total) of newly written programs",
    "complexity/sloc": "SLOC of newly written programs",
    "complexity/n_variables": "variables of newly written programs",
}
COPY_KEY = "copies/copy_rate"
assert tuple(k.split("/", 1)[1] for k in COMPLEXITY_SERIES) == COMPLEXITY_FIELDS, "one series per field"
PROBE_RHO_KEY = "probe/rho"
PROBE_SERIES: Mapping[str, str] = {k: LABELS[k] for k in (PROBE_RHO_KEY, "probe/valid_rate")}
SPREAD_KEY = "rating/mu_spread"
COVERAGE_SERIES: Mapping[str, str] = {
    "coverage/ngrams": "distinct AST n-grams at equal n (rarefied)",
    "coverage/signatures": "distinct I/O type signatures of written programs at equal n (rarefied)",
}
POPULATION_ONLY: frozenset[str] = frozenset({SPREAD_KEY})
"""Series the baseline cannot have (no matches, no ratings)."""
WITHIN_RUN_ONLY: Mapping[str, str] = {
    "reward/propose_mean": "not comparable: AZR's proposer reward and PopuLoRA's teacher reward differ "
    "(−0.5 vs 0 for a task solved by none or all; rewards.py)",
}
"""Series whose start, end and change mean something within a run but whose population − baseline
difference would compare two different definitions: the difference is not computed."""
HEADLINE: Mapping[str, str] = {
    **METRIC_SERIES,
    **COMPLEXITY_SERIES,
    BAND_KEY: "share of tasks in 0 < ρ < 1",
    SPREAD_KEY: "within-role spread of TrueSkill μ",
    COPY_KEY: "copy rate of valid proposals",
    **REPEAT_SERIES,
    **COVERAGE_SERIES,
    **PROBE_SERIES,
}
"""Every series the protocol reports, key -> a one-line meaning (the module docstring says more)."""
