"""The data layer: engines and sessions, the public reads, replicas, the change feed, freshness, write conflicts."""
