"""Alerts: planning notifications from transitions, and the channels that deliver them."""
