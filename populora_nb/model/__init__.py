"""The frozen base model and the population of LoRA adapters on it.

`base` loads the model (the bundled SmolLM2 GGUF, a tiny random model for tests, or a hub id);
`adapters` is the member bank (every member's factors, record and optimiser, keyed by the loop's
member names); `batch` is what one member's training step consumes; `checkpoint` writes and reads
populations and peft adapters; `multilora` runs a mixed batch of members through one base forward;
`unsloth_slot` is the GPU path; `policy` is what the loop generates and trains with.
"""
