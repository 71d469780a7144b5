"""The witness (syncer) agent: aggregate each round's outer gradients and finalize on chain."""
