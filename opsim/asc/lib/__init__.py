"""``asc.lib``: the host-side libraries (``runtime``: streams; ``host``: tiling helpers)."""
