"""Public Atom feeds of releases under `/feeds`: their routes (`routes.py`) and documents (`atom.py`)."""
