"""populora_nb: PopuLoRA (arXiv 2605.16727) as a Jupyter-first research package.

LoRA adapters on one frozen base model co-evolve as teachers, who propose verifiable Python
tasks, and students, who solve them. See DESIGN in the README for where each concept lives.
"""

__version__ = "0.1.0"
