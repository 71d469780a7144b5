"""Modality adapters: how a task's model is built, its data sharded and batched, and its loss measured.

Every adapter implements ``ModalityAdapter`` (see ``base.py``). Language is implemented now;
time series and vision plug in behind the same interface.
"""
