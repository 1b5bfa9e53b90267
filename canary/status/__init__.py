"""Guard status: the pure evaluation, the facts it is evaluated on, transitions and mutes."""
