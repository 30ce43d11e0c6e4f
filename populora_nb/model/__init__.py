"""The frozen base model and the population of LoRA adapters on it.

`base` loads the model, `adapters` is the member bank, `policy` is what the loop generates and
trains with; each module's docstring says what it holds.
"""
