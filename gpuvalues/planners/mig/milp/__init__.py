"""The MILP planner: the model (demands, pools, build_model), the HiGHS adapter, solving, certificates, diagnoses."""
