"""minirl: verl rebuilt small enough to read, instrumented to show every stage of a batch's life."""

__version__ = "0.1.0"
