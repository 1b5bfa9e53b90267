"""Canary runs: the runner, runs in flight, drawn values, the agent driver, the schedule, the session."""
