"""MIG planning: partition geometry, the MILP fleet planner, the re-planner over its model API, mig-parted configs."""
