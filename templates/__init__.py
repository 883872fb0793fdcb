"""Jinja2 templates of the generated files (file layout, launch geometry, host glue)."""
