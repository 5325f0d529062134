"""Clients of the upstream services: the chat platform's server widget and the statistics service."""
