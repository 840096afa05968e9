"""``asc.runtime``: launch configuration (``config``)."""
