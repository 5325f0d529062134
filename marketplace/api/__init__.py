"""HTTP handlers, one package per API version."""
