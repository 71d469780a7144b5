"""Differentially private training: the accounting (:mod:`.accounting`), the secret but
reproducible noise seeds (:mod:`.noise`) and DP-SGD in the inner loop (:mod:`.dpsgd`).
See docs/privacy.md."""
