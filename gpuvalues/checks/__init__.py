"""Checks: JSON Schemas, findings and the semantic rules over specs, values and fleets."""
