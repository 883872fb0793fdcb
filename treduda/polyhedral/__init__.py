"""Polyhedral stage: isl statements, scheduled by strategies, scanned into an AST."""
