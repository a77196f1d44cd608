"""One package per reproduced paper; see the top-level README for the table."""
