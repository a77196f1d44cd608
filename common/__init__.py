"""Paper-agnostic core shared by every reproduction in `papers/`."""
