"""Features declared once, computed online (stream) and offline (DuckDB as-of joins)."""
