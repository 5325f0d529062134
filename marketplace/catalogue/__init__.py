"""Domain services: what the API reads and writes, independent of HTTP."""
