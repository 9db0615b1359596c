"""Every store adapter, the backend contract and the servers' request bodies."""
