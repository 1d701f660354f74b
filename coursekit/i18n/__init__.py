"""The Chinese edition: message catalogs, the translated notebooks and the second website (see README)."""
