"""The main job run by ``make demo``."""
