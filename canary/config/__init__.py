"""Configuration: canary.toml, the definitions in canaries_defs, their placeholders and durations."""
