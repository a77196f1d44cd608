"""The skeleton paper: a runnable template in the fixed paper layout (see templates/paper/README.md)."""
