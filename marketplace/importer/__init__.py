"""Import of an earlier-platform database (`marketplace import-earlier`)."""
