"""Training tachy's code embedder: pairs mined from the standard library, distillation
from MiniLM, contrastive training (training/embed/README in the docstrings)."""
