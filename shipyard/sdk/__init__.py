"""The user-facing SDK, shaped like SageMaker's: Estimator, framework estimators, TrainingInput."""
