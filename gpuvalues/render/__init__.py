"""Render: the chart with the real helm, and validation of the objects it produces."""
