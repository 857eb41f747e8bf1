"""SageMaker's built-in algorithms, each a module that `ALGORITHMS` (spec/images.py) names: what an image of the
image catalog runs on every instance in place of an entry point. A module has `validate(hyperparameters)` (the
strings SageMaker gives an algorithm -> typed values; ValidationError naming the bad one, so the SDK checks
them before anything runs), `check_channels(channels)` (the same for the channels, as inputdataconfig.json
gives them), `metric_definitions()` (what its log lines are scraped for) and `main()` (its training on one
instance, reading /opt/ml as the algorithm's container does).

Nothing here imports the SDK or pydantic: `main` runs inside the job."""
