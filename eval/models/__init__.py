"""The embedded default models: byte tokenizer, architecture builders and fast training paths.

* :mod:`.tokenizer` - the byte-level tokenizer saved next to every model.
* :mod:`.configs` - the two stock Hugging Face architectures (Qwen3.5 text = GDN hybrid,
  Nemotron-H = Mamba-2 hybrid) at ~5M parameters.
* :mod:`.fast_gdn`, :mod:`.fast_ssd` - chunked GDN / Mamba-2 SSD in matmul form, installed
  into the stock modules for training only (:func:`.training_paths.fast_training_paths`).
"""
