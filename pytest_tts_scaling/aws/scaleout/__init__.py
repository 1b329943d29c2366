"""A SageMaker scale-out timed stage by stage: the stage readers, the probe, the policy's lag."""
