"""Scheduling: NVLink/topology, the cluster inventory model and the kube-scheduler-style fit."""
