"""Embed: dense and SPLADE encoder ports and adapters, the content-addressed vector cache."""
