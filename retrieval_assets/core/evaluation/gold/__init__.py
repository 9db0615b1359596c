"""Gold for catalogs nobody judged: known-item queries, LLM questions, frozen per catalog, curated files.

``known_item`` draws queries from the documents, ``llm`` rewrites them as a model's questions,
``frozen`` keeps one versioned set per catalog, ``curated`` reads gold a person wrote, and
``agreement`` checks that generated gold ranks configurations as real gold does.
"""
