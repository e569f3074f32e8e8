"""Autoscaling: the HPA controller port, capacity (Erlang B, replicas for a load, behavior), trace replay."""
