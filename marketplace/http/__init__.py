"""The contract's cross-cutting HTTP behaviour, each rule in one module."""
