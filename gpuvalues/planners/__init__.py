"""Pure planners: MIG geometry, the optimal MILP, device-plugin and mig-parted configs,
topology, capacity/autoscaling, the HPA port, trace replay, the cluster model and fit.
No I/O, no presentation; they import only the catalog and the base modules."""
