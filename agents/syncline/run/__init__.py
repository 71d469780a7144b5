"""Shared run-time pieces of the agents: task context, agent config, metrics, polling."""
