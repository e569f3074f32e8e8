"""Day-2 operations on a running GPU cluster.

* `drain`: cordon/taint helpers with ownership, and eviction through the Eviction API
  honouring PodDisruptionBudgets (the project's one drain implementation).
* `remediation`: the pure per-node state machine of the GPU health remediation controller.
* `signals`: fault signals (DCGM series from Prometheus, node allocatable and conditions).
* `controller`: the loop behind `gpuvalues remediate` (leader election, metrics, Events).
"""
