"""The marketplace's public HTTP API (`/api/v1`), its data layer and its operator commands."""
