"""The command line: commands, printers, and canary init."""
