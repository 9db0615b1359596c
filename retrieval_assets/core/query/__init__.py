"""Query parsing: control tags, natural-language filters, context (format) tokens."""
