"""Front end: Einstein-notation text to a checked contraction (parse, names, merging, dtypes)."""
