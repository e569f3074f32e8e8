"""Pure planners, by domain: `mig/` (partition geometry, the MILP package, the re-planner over
its public model API, mig-parted configs), `autoscaling/` (the HPA port, capacity, trace replay),
`scheduling/` (topology, the cluster model, fit) and `deviceplugin` (device-plugin configs).
No I/O, no presentation; they import only the catalog and the base modules."""
