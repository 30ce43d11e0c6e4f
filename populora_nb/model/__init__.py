"""The frozen base model and the population of LoRA adapters on it.

`base` loads the model (the bundled SmolLM2 GGUF, a tiny random model for tests, or a hub id);
`adapters` holds every member's LoRA factors, optimisers and checkpoints; `multilora` runs a
mixed batch of members through one base forward; `unsloth_slot` is the GPU path; `policy` is
what the loop generates and trains with.
"""
