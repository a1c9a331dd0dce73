"""latency stage."""
