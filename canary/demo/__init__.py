"""The bundled demo: sample agent logs and the canary definitions of their guards."""
