"""An AWS API served by `shipyard server` under /aws: SageMaker, CloudWatch Logs, CloudWatch and STS, as
botocore clients (and the sagemaker SDK) speak them, so code written for AWS talks to this machine's jobs.
protocol.py decodes and encodes what each service's protocol sends; a service module answers operations."""
