"""Training of the embedded default models (``replayssm-quant train-demo``).

* :mod:`.data` - training batches: book windows mixed with packed synthetic task examples.
* :mod:`.evaluate` - held-out bits per byte and task exact-match accuracy of a saved model.
* :mod:`.loop` - the training loop (bf16 autocast, optional compile, cosine LR on a wall-clock budget).
"""
