"""Catalog source kinds beyond JSON Lines: folders of files, tables and the ACL Anthology's data.

Each kind reads its input into ``RawRow``s of the ``document`` catalog format (``records``), so
cleaning, the parse memo and row accounting treat every kind alike.
"""
