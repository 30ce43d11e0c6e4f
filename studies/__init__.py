"""Studies of the method, beside the package: the seed protocol, the pilots, sweeps and the retention
experiment. Each imports `populora_nb` and is never imported by it; each runs from the repository root
as ``python -m studies.NAME`` (studies/README.md names each study's question, its command and the
committed result under docs/results/ it regenerates)."""
