"""Load: the workload, the closed-loop engine, its transports, and the endpoint health probe."""
