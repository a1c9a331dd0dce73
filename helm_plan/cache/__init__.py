"""cache stage."""
