"""What runs inside one instance: the agent that plays the SageMaker training toolkit's part (fetch code,
lay out data, install requirements, pick the launcher, run the entry point, write success/failure)."""
