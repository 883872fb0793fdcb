"""Public benchmark lists of tensor contractions (see README.md here), and their loader."""
