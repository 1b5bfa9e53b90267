"""The daemon: its loop, the control API, metrics, and the service manager units."""
