"""Load runs of the service against a ceiling, on a generated catalogue, and their report."""
