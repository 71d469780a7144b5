"""The sponsor side: publish a task's artifacts, post it, export the trained model."""
